"""A busy executor costs the daemon little: the runners' outcomes of many
concurrent steps go to the real daemon in batches, none lost, an outcome
the daemon never got is counted, and the permits of an upstream nothing
limits start several dispatches per Admit."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from conftest import Daemon, free_port
from squawk.v1 import policy_pb2 as pb
from squawk_client import AsyncSquawkClient, SquawkClient, StepOptions, run_step, run_step_sync

TIMEOUT = timedelta(seconds=10)


class Counted:
    """One of the stub's methods, counting its calls (the daemon meters only decisions)."""

    def __init__(
        self, client: SquawkClient | AsyncSquawkClient, rpc: str = "ReportOutcome"
    ) -> None:
        self.call = getattr(client._stub, rpc)
        self.calls = 0
        setattr(client._stub, rpc, self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.call(*args, **kwargs)


def _calls(client: SquawkClient, upstream: str) -> int:
    (state,) = client.get_upstreams(upstream=upstream)
    return state.window_calls


def test_concurrent_async_steps_share_one_batch_of_outcomes(daemon: Daemon) -> None:
    options = StepOptions(upstream="batched-async")
    steps = 150

    async def main() -> int:
        go = asyncio.Event()
        started = 0

        async def step(n: int) -> int:
            nonlocal started
            started += 1
            if started == steps:
                go.set()
            await go.wait()
            return n

        async with AsyncSquawkClient(daemon.target, call_timeout=TIMEOUT) as client:
            reports = Counted(client)
            done = await asyncio.gather(
                *(run_step(client, step, n, options=options) for n in range(steps))
            )
            assert done == list(range(steps))
        assert client.dropped_outcomes == 0
        return reports.calls

    # All 150 finished in one turn of the loop: a full batch of 100, then 50.
    assert asyncio.run(main()) == 2
    with SquawkClient(daemon.target, call_timeout=TIMEOUT) as reader:
        assert _calls(reader, "batched-async") == steps


def test_concurrent_threads_share_one_queue_of_outcomes(daemon: Daemon) -> None:
    threads = 100
    barrier = threading.Barrier(threads)

    def step(n: int) -> int:
        barrier.wait(timeout=30)
        return n

    with SquawkClient(daemon.target, call_timeout=TIMEOUT) as client:
        reports = Counted(client)
        options = StepOptions(upstream="batched-sync")
        with ThreadPoolExecutor(threads) as pool:
            done = list(
                pool.map(lambda n: run_step_sync(client, step, n, options=options), range(threads))
            )
        assert done == list(range(threads))
    assert client.dropped_outcomes == 0
    # One per step without batching; a batch waits 50 ms or for 100 outcomes,
    # so only a machine stalling for most of a second sends more than a few.
    assert 1 <= reports.calls <= threads / 10
    with SquawkClient(daemon.target, call_timeout=TIMEOUT) as reader:
        assert _calls(reader, "batched-sync") == threads


def test_outcomes_the_daemon_never_got_are_counted() -> None:
    async def main() -> tuple[int, int]:
        async with AsyncSquawkClient(f"127.0.0.1:{free_port()}") as client:
            for _ in range(3):
                await run_step(client, asyncio.sleep, 0, options=StepOptions(upstream="away"))
        return client.dropped_outcomes, client.fallback_count

    dropped, fallbacks = asyncio.run(main())
    # Three admissions failed open, and every batch (one, unless the machine
    # stalled past its 50 ms) was lost and counted, each outcome once.
    assert dropped == 3
    assert 4 <= fallbacks <= 6


def test_a_report_after_close_is_counted_not_sent(daemon: Daemon) -> None:
    client = SquawkClient(daemon.target, call_timeout=TIMEOUT)
    client.close()
    client._report_later(pb.Outcome(upstream="late", success=True))
    assert client.dropped_outcomes == 1


def test_a_busy_executor_starts_dispatches_on_leased_permits(daemon: Daemon) -> None:
    steps = 60
    with SquawkClient(daemon.target, call_timeout=TIMEOUT) as client:
        admits = Counted(client, "Admit")
        options = StepOptions(upstream="leased")
        assert [run_step_sync(client, str, n, options=options) for n in range(steps)] == [
            str(n) for n in range(steps)
        ]
    # Each Admit asks for the dispatches of the last lease (200 ms) and gets
    # them: 1, 2, 4, 8, ... Only a machine taking most of a lease per step
    # would need one Admit for every other dispatch.
    assert 1 <= admits.calls <= steps / 2
    with SquawkClient(daemon.target, call_timeout=TIMEOUT) as reader:
        assert _calls(reader, "leased") == steps  # every dispatch reported
