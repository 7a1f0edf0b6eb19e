"""Client-side throttling: tests/vectors/throttle.json through the Python
client's machine (squawk_client._throttle.Throttle, on a fake clock and fixed
draws; the Go and TypeScript clients run the same file), then both Python
clients over the wire against loopback servers that count what reaches them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from concurrent import futures
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from squawk.v1 import policy_pb2 as pb
from squawk_client import AsyncSquawkClient, SquawkClient, SquawkError
from squawk_client._throttle import Throttle

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parents[1] / "vectors" / "throttle.json").read_text()
)["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_throttle_vector(case: dict[str, Any]) -> None:
    throttle = Throttle()
    in_flight: dict[str, int] = {}
    for n, event in enumerate(case["events"]):
        method, at = event["method"], event["at"]
        if "ended" in event:
            assert in_flight.get(method, 0) >= event["ended"], f"event {n}: {event}"
            in_flight[method] -= event["ended"]
            for _ in range(event["ended"]):
                throttle.ended(method, at, grpc.StatusCode[event["end"]])
            continue
        for _ in range(event.get("repeat", 1)):
            sent, _, _ = throttle.allow(method, at, event["draw"])
            assert sent is event["sent"], f"event {n}: {event}"
            if sent and "end" in event:
                throttle.ended(method, at, grpc.StatusCode[event["end"]])
            elif sent:
                in_flight[method] = in_flight.get(method, 0) + 1


class _Counting(grpc.GenericRpcHandler):
    """Answers every call with `code` (OK: an empty DecideRetryResponse) and
    counts the calls that reached it."""

    def __init__(self, code: grpc.StatusCode) -> None:
        self.code = code
        self.received = 0
        self._lock = threading.Lock()

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[bytes, bytes]:
        # The client's first health check (it starts connecting) is not a call.
        policy_call = details.method.startswith("/squawk.v1.PolicyService/")

        def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
            with self._lock:
                self.received += policy_call
            if self.code != grpc.StatusCode.OK:
                context.abort(self.code, "scripted status")
            return pb.DecideRetryResponse(
                action=pb.ACTION_FAIL, reason=pb.REASON_TERMINAL_STATUS
            ).SerializeToString()

        return grpc.unary_unary_rpc_method_handler(answer)


@contextlib.contextmanager
def _server(code: grpc.StatusCode) -> Iterator[tuple[str, _Counting]]:
    handler = _Counting(code)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", handler
    finally:
        server.stop(None)


CALLS = 200
REQUEST = pb.DecideRetryRequest(attempt=1, http_status=503)


def _sync_calls(target: str) -> tuple[list[bool], int]:
    with SquawkClient(target, call_timeout=timedelta(seconds=5)) as client:
        fallbacks = [client.decide_retry(REQUEST).fallback for _ in range(CALLS)]
        return fallbacks, client.fallback_count


def _async_calls(target: str) -> tuple[list[bool], int]:
    async def main() -> tuple[list[bool], int]:
        async with AsyncSquawkClient(target, call_timeout=timedelta(seconds=5)) as client:
            fallbacks = [(await client.decide_retry(REQUEST)).fallback for _ in range(CALLS)]
            return fallbacks, client.fallback_count

    return asyncio.run(main())


RUNS = {"sync": _sync_calls, "async": _async_calls}


@pytest.mark.parametrize("mode", RUNS)
def test_a_refusing_daemon_gets_few_calls_and_every_call_is_answered(mode: str) -> None:
    """200 calls to a daemon refusing each for load: every one is answered by
    the fallback, but past the first 20 the client sends about one in
    (requests + 1) (about 22 in all), not 200."""
    with _server(grpc.StatusCode.RESOURCE_EXHAUSTED) as (target, server):
        fallbacks, counted = RUNS[mode](target)
    assert fallbacks == [True] * CALLS
    assert counted == CALLS
    assert 20 <= server.received <= 40, server.received


@pytest.mark.parametrize("mode", RUNS)
def test_a_daemon_that_answers_gets_every_call(mode: str) -> None:
    with _server(grpc.StatusCode.OK) as (target, server):
        fallbacks, counted = RUNS[mode](target)
    assert fallbacks == [False] * CALLS
    assert (counted, server.received) == (0, CALLS)


def test_a_call_without_fallback_raises_what_the_daemon_would_and_says_it_was_not_sent() -> None:
    errors: list[SquawkError] = []
    with _server(grpc.StatusCode.RESOURCE_EXHAUSTED) as (target, server):
        client = SquawkClient(target, call_timeout=timedelta(seconds=5))
        try:
            for _ in range(60):
                with pytest.raises(SquawkError) as raised:
                    client.classify(pb.ClassifyRequest(http_status=503))
                errors.append(raised.value)
        finally:
            client.close()
    assert {e.code for e in errors} == {"RESOURCE_EXHAUSTED"}
    assert [e.details for e in errors[:20]] == ["scripted status"] * 20
    not_sent = [e.details for e in errors[20:] if e.details != "scripted status"]
    assert len(not_sent) == 60 - server.received
    assert len(not_sent) >= 30
    assert not_sent[0].startswith("squawk: not sent: the daemon answered 0 of the last ")
    assert "Classify calls in time" in not_sent[0]
