"""The official LLM SDKs behind Squawk through the client's httpx2 transports:
the real `openai` and `anthropic` packages, with their retries off, against
loopback mocks of their APIs and a real daemon. Each call is admitted,
reported with its headers, resent on the daemon's RETRY, and ends in the
SDK's own error type when the policy ends it."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import anthropic
import grpc
import httpx
import httpx2
import openai
import pytest

from chat_server import Reply, ScriptedAPI
from conftest import Daemon, free_port, start_daemon
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc
from squawk_client import AsyncSquawkClient, SquawkClient, StepOptions
from squawk_client.httpx import SquawkTransport as HttpxTransport
from squawk_client.httpx2 import AsyncSquawkTransport, SquawkTransport

KEY = "sk-test-0000000000000000"
# "paced": one call in 20 s, so a second call within a step's second is shed.
POLICY = """\
profiles:
  paced:
    rate_limit: {rate: 0.05, burst: 1}
"""
QUOTA = {  # OpenAI's dialect: 401 of 600 used, refilled in 4 s
    "x-ratelimit-limit-requests": "600",
    "x-ratelimit-remaining-requests": "199",
    "x-ratelimit-reset-requests": "4s",
}
CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hello"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12},
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "hello"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 7, "output_tokens": 5},
}
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def openai_error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error"}}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    path = tmp_path_factory.mktemp("sdk") / "policy.yaml"
    path.write_text(POLICY)
    daemon = start_daemon("--policy", str(path))
    try:
        yield daemon
    finally:
        daemon.stop()


def row(daemon: Daemon, upstream: str, profile: str = "default") -> pb.UpstreamState:
    with grpc.insecure_channel(daemon.target) as channel:
        listed = pb_grpc.PolicyServiceStub(channel).GetUpstreams(
            pb.GetUpstreamsRequest(profile=profile, upstream=upstream), timeout=5
        )
    (found,) = listed.upstreams
    return found


@contextmanager
def chat_sdk(
    squawk: SquawkClient,
    base_url: str,
    upstream: str,
    *,
    retries: int = 0,
    options: StepOptions | None = None,
) -> Iterator[tuple[openai.OpenAI, SquawkTransport]]:
    """The openai SDK behind a transport of its own, closed on leaving."""
    transport = SquawkTransport(squawk, upstream=upstream, options=options)
    http = httpx2.Client(transport=transport)
    with openai.OpenAI(
        api_key=KEY, base_url=base_url, max_retries=retries, http_client=http
    ) as client:
        yield client, transport


def ask(client: openai.OpenAI) -> str | None:
    done = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    return done.choices[0].message.content


def test_an_openai_call_is_resent_on_a_429_and_its_headers_pace_the_upstream(
    daemon: Daemon,
) -> None:
    throttled = Reply(openai_error("slow down"), status=429, headers={"retry-after-ms": "20"})
    with (
        ScriptedAPI(throttled, Reply(CHAT, headers=QUOTA)) as api,
        SquawkClient(daemon.target) as squawk,
    ):
        # The user's code: a transport, and the SDK with its own retries off.
        transport = SquawkTransport(squawk, upstream="openai-chat")
        http = httpx2.Client(transport=transport)
        with openai.OpenAI(
            api_key=KEY, base_url=api.base_url, max_retries=0, http_client=http
        ) as client:
            assert ask(client) == "hello"
        assert [s.json for s in api.seen] == [api.seen[0].json] * 2  # the same payload, twice
    # The success was reported with its quota: the pace now follows the headers.
    assert row(daemon, "openai-chat").pace_source == pb.PACE_SOURCE_HEADERS
    assert transport.sdk_retries == 0


def test_an_anthropic_529_is_resent_by_the_async_transport(daemon: Daemon) -> None:
    overloaded = Reply(OVERLOADED, status=529)

    async def call() -> str:
        async with AsyncSquawkClient(daemon.target) as squawk:
            transport = AsyncSquawkTransport(squawk, upstream="anthropic-messages")
            http = httpx2.AsyncClient(transport=transport)
            async with anthropic.AsyncAnthropic(
                api_key=KEY, base_url=api.base_url[:-3], max_retries=0, http_client=http
            ) as client:
                message = await client.messages.create(
                    model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
                )
        block = message.content[0]
        assert isinstance(block, anthropic.types.TextBlock)
        return block.text

    with ScriptedAPI(overloaded, Reply(MESSAGE)) as api:
        assert asyncio.run(call()) == "hello"
        assert [s.path for s in api.seen] == ["/v1/messages"] * 2


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (Reply(openai_error("bad model"), status=400), openai.BadRequestError),
        (
            Reply(openai_error("busy"), status=503, headers={"x-should-retry": "false"}),
            openai.InternalServerError,
        ),
    ],
    ids=["a 400 is never resent unchanged", "x-should-retry false is obeyed"],
)
def test_a_failure_the_policy_ends_reaches_the_sdk_as_its_own_error_after_one_call(
    daemon: Daemon, reply: Reply, error: type[openai.APIStatusError]
) -> None:
    with (
        ScriptedAPI(reply) as api,
        SquawkClient(daemon.target) as squawk,
        chat_sdk(squawk, api.base_url, "openai-fail") as (client, _),
    ):
        with pytest.raises(error) as caught:
            ask(client)
        assert len(api.seen) == 1
    assert caught.value.status_code == reply.status
    body = json.loads(reply.encoded())
    assert caught.value.message.endswith(body["error"]["message"])


def test_a_shed_call_gets_squawks_own_503_and_never_reaches_the_upstream(
    daemon: Daemon,
) -> None:
    # One call in 20 s, and a step may wait a second: the second call is shed.
    options = StepOptions(profile="paced", deadline=timedelta(seconds=1))
    with (
        ScriptedAPI(Reply(CHAT), Reply(CHAT)) as api,
        SquawkClient(daemon.target) as squawk,
        chat_sdk(squawk, api.base_url, "openai-paced", retries=2, options=options) as sdk,
    ):
        client, transport = sdk
        assert ask(client) == "hello"
        with pytest.raises(openai.InternalServerError) as caught:
            ask(client)
        assert len(api.seen) == 1
    response = caught.value.response
    assert response.headers["x-squawk-reason"] == "REASON_UPSTREAM_SATURATED"
    # x-should-retry: false keeps even an SDK left with retries on from resending.
    assert response.headers["x-should-retry"] == "false"
    assert transport.sdk_retries == 0
    assert "REASON_UPSTREAM_SATURATED" in caught.value.message


def test_no_response_reaches_the_sdk_as_its_connection_error(daemon: Daemon) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"
    options = StepOptions(max_attempts=1)
    with (
        SquawkClient(daemon.target) as squawk,
        chat_sdk(squawk, closed, "openai-down", options=options) as (client, _),
        pytest.raises(openai.APIConnectionError),
    ):
        ask(client)


def test_an_sdk_left_retrying_on_its_own_is_counted_and_logged_once(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    # Squawk ends each step at its first 503 (one attempt); the SDK resends.
    busy = Reply(openai_error("busy"), status=503, headers={"retry-after-ms": "1"})
    options = StepOptions(max_attempts=1)
    with (
        ScriptedAPI(busy, busy, busy) as api,
        SquawkClient(daemon.target) as squawk,
        chat_sdk(squawk, api.base_url, "openai-retrying", retries=2, options=options) as sdk,
    ):
        client, transport = sdk
        with caplog.at_level(logging.WARNING, "squawk_client"), pytest.raises(openai.APIError):
            ask(client)
        assert len(api.seen) == 3
    assert transport.sdk_retries == 2
    warnings = [r for r in caplog.records if "max_retries=0" in r.getMessage()]
    assert len(warnings) == 1
    assert "openai-retrying" in warnings[0].getMessage()


def test_a_transport_needs_an_upstream(daemon: Daemon) -> None:
    with SquawkClient(daemon.target) as squawk, pytest.raises(ValueError, match="upstream"):
        SquawkTransport(squawk, upstream="")


def test_the_httpx_transport_resends_the_same_way(daemon: Daemon) -> None:
    # Programs and older SDKs on httpx (not httpx2) get the same transport.
    busy = Reply(openai_error("busy"), status=503, headers={"retry-after-ms": "1"})
    with ScriptedAPI(busy, Reply(CHAT)) as api, SquawkClient(daemon.target) as squawk:
        transport = HttpxTransport(squawk, upstream="plain-httpx")
        with httpx.Client(transport=transport) as http:
            response = http.post(f"{api.base_url}/chat/completions", json={"n": 1})
        assert response.status_code == 200
        assert response.json()["usage"]["total_tokens"] == 12
        assert [s.json for s in api.seen] == [{"n": 1}] * 2


def test_an_upstream_flooding_headers_is_still_decided_and_resent(daemon: Daemon) -> None:
    # Headers past the daemon's bounds (count, length) on a 429 are the
    # upstream's, not the caller's: they must not get DecideRetry refused.
    flood = {f"x-junk-{i}": "v" for i in range(100)} | {"x-big": "v" * 20_000}
    throttled = Reply(openai_error("slow down"), status=429, headers=flood | {"retry-after": "0"})
    with (
        ScriptedAPI(throttled, Reply(CHAT)) as api,
        SquawkClient(daemon.target) as squawk,
        chat_sdk(squawk, api.base_url, "openai-flood") as (client, _),
    ):
        assert ask(client) == "hello"
        assert len(api.seen) == 2
