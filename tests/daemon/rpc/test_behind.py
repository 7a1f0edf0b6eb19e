"""A call that reaches the daemon too close to its deadline is answered
"not decided" at once (boundary.BEHIND_S), counted, and not decided: over
the wire, against the real daemon, read back from its metrics."""

from __future__ import annotations

import time

import grpc

from conftest import free_port, scrape, start_daemon
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

BEHIND = 'squawk_refused_calls_total{cause="behind",code="RESOURCE_EXHAUSTED",rpc="DecideRetry"}'


def _decided(port: int) -> float:
    return sum(
        v
        for k, v in scrape(port).items()
        if k.startswith("squawk_decisions_total{") and 'rpc="DecideRetry"' in k
    )


def test_a_call_too_close_to_its_deadline_is_answered_not_decided() -> None:
    port = free_port()
    daemon = start_daemon("--metrics-listen", f"127.0.0.1:{port}")
    request = pb.DecideRetryRequest(attempt=1, http_status=503, capability="search")
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            stub.DecideRetry(
                request, timeout=5
            )  # the channel is up: the calls below are sent at once
            before = _decided(port)
            answers = []
            # Each of these reaches the daemon with under 5 ms left; a call
            # already expired when the daemon would start it never reaches
            # the method, so a slow machine lowers the count, never raises it.
            for timeout in (0.002, 0.003, 0.004) * 20:
                try:
                    stub.DecideRetry(request, timeout=timeout)
                    answers.append("decided")
                except grpc.RpcError as exc:
                    answers.append(exc.code().name)
                    if exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED:
                        assert (exc.details() or "").startswith("not decided: ")
            deadline = time.monotonic() + 5
            while scrape(port).get(BEHIND, 0) < 1:
                assert time.monotonic() < deadline, answers
                time.sleep(0.05)
            behind = scrape(port)[BEHIND]
            # Not decided: the decisions counted are the calls the daemon
            # reached in time, at most the 60 sent less those behind.
            assert "decided" not in answers
            assert _decided(port) - before <= 60 - behind
            # A call with time to spare is decided as ever.
            reply = stub.DecideRetry(request, timeout=5)
            assert reply.action == pb.ACTION_RETRY
    finally:
        daemon.stop()
