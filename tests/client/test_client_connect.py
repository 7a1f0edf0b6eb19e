"""A Python client starts connecting when it is built, against the real daemon:
a first call that had to connect inside its 50 ms would get the fallback's
answer instead of the daemon's. The channel's state is read without asking
it to connect, so only the client's own constructor can have started one."""

from __future__ import annotations

import asyncio
import gc
import queue
import threading
import time
from datetime import timedelta

import grpc
import pytest

from conftest import Daemon, free_port
from squawk.v1 import policy_pb2 as pb
from squawk_client import Action, AsyncSquawkClient, SquawkClient
from squawk_client._client import _target

READY = grpc.ChannelConnectivity.READY
# Generous for a loaded machine: a channel nobody asks to connect stays IDLE.
WAIT_S = 10.0


def _wait_for_threads(before: set[threading.Thread]) -> set[threading.Thread]:
    """The threads started since `before` that are still alive after WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while (extra := set(threading.enumerate()) - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    return extra


def test_a_sync_client_given_no_call_reaches_ready(daemon: Daemon) -> None:
    with SquawkClient(daemon.target) as client:
        before = set(threading.enumerate())
        seen: queue.SimpleQueue[grpc.ChannelConnectivity] = queue.SimpleQueue()
        client._channel.subscribe(seen.put, try_to_connect=False)
        deadline = time.monotonic() + WAIT_S
        states = []
        try:
            while READY not in states:
                states.append(seen.get(timeout=max(0.0, deadline - time.monotonic())))
        except queue.Empty:
            raise AssertionError(f"states {states} in {WAIT_S} s, never READY") from None
        finally:
            client._channel.unsubscribe(seen.put)
            # The subscription's polling thread would race close() (grpc/grpc#18995).
            _wait_for_threads(before)


def test_an_async_client_given_no_call_reaches_ready(daemon: Daemon) -> None:
    async def state_after_waiting() -> grpc.ChannelConnectivity:
        async with AsyncSquawkClient(daemon.target) as client:
            deadline = time.monotonic() + WAIT_S
            state = client._channel.get_state(try_to_connect=False)
            while state is not READY and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
                state = client._channel.get_state(try_to_connect=False)
            return state

    assert asyncio.run(state_after_waiting()) is READY


def test_without_a_daemon_the_client_answers_locally_and_close_ends_its_threads() -> None:
    before = set(threading.enumerate())
    with SquawkClient(f"127.0.0.1:{free_port()}") as client:
        decision = client.decide_retry(pb.DecideRetryRequest(attempt=1, http_status=503))
        assert (decision.action, decision.fallback) == (Action.RETRY, True)
    assert _wait_for_threads(before) == set()


def test_a_client_dropped_unclosed_without_a_daemon_leaves_no_thread() -> None:
    before = set(threading.enumerate())
    client = SquawkClient(f"127.0.0.1:{free_port()}")
    del client
    gc.collect()
    assert _wait_for_threads(before) == set()


def test_without_a_daemon_the_async_client_answers_locally() -> None:
    async def decide() -> tuple[Action, bool]:
        async with AsyncSquawkClient(f"127.0.0.1:{free_port()}") as client:
            decision = await client.decide_retry(pb.DecideRetryRequest(attempt=1, http_status=503))
            return decision.action, decision.fallback

    assert asyncio.run(decide()) == (Action.RETRY, True)


def test_a_client_given_no_target_reads_squawk_address(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = pb.DecideRetryRequest(attempt=1, http_status=503)
    monkeypatch.setenv("SQUAWK_ADDRESS", daemon.target)
    with SquawkClient(call_timeout=timedelta(seconds=5)) as client:
        assert not client.decide_retry(request).fallback

    async def decide() -> bool:
        async with AsyncSquawkClient(call_timeout=timedelta(seconds=5)) as client:
            return (await client.decide_retry(request)).fallback

    assert not asyncio.run(decide())
    # An explicit target wins over the variable: nothing listens there.
    with SquawkClient(f"127.0.0.1:{free_port()}", call_timeout=timedelta(seconds=5)) as client:
        assert client.decide_retry(request).fallback


@pytest.mark.parametrize("value", [None, ""])
def test_without_squawk_address_the_default_is_the_daemons(
    value: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is None:
        monkeypatch.delenv("SQUAWK_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("SQUAWK_ADDRESS", value)
    assert _target(None) == _target("") == "127.0.0.1:50051"
    monkeypatch.setenv("SQUAWK_ADDRESS", "unix:///run/squawk/squawk.sock")
    assert _target("") == "unix:///run/squawk/squawk.sock"
