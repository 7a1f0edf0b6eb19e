"""One executor process of the dispatch row (dispatch.py): steps through the
Python client's runner at a fixed rate, counting every RPC it sends.

Each dispatch is `squawk_client.run_step` with `upstream` set, around a step
that only awaits `asyncio.sleep(0)`, so the executor itself stays cheap and
the upstream is always healthy: whatever the daemon is asked per dispatch
(Admit, ReportOutcome, and whatever the runner batches or leases) is what a
real executor's healthy dispatch costs it. Arrivals are Poisson at `--rate`
(seeded), each dispatch a task of its own, timed from when it was due, not
when it started (an open loop: a slow daemon cannot slow the offered load).

The window is set by the driver with signals, so it lines up with the
driver's reads of the daemon's CPU: SIGUSR1 starts it (the counters are
read), SIGUSR2 ends it (read again, the dispatches stop, the client closes,
which flushes anything it queued, and the result is written as JSON to
`--out`). `--ready` is created once a first dispatch has finished. Run as
`python -m bench.executor`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc

from squawk_client import AsyncSquawkClient, StepOptions, run_step

__all__ = ["CountedStub", "Tally", "main"]

# Dispatches in flight past which a due one is skipped and counted `missed`:
# the client's 50 ms deadlines bound each dispatch, so only a stalled
# executor gets here, and it must not grow without bound.
MAX_IN_FLIGHT = 2_000
# The longest the executor waits for its last dispatches and the flush.
DRAIN_S = 5.0
CAPABILITY = "search_hotels"
# The step's deadline: sent with Admit, as a runner with a deadline does.
STEP_DEADLINE = timedelta(seconds=10)


class Tally:
    """RPCs sent (by method), those that ended in an error (by method and
    status: the client then fell back), and the finished dispatches."""

    def __init__(self) -> None:
        self.sent: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.dispatched = 0
        self.step_errors = 0
        self.missed = 0
        self.latencies: list[float] = []

    def snapshot(self) -> dict[str, Any]:
        return {
            "sent": dict(self.sent),
            "failed": dict(self.failed),
            "dispatched": self.dispatched,
            "step_errors": self.step_errors,
            "missed": self.missed,
            "latencies": len(self.latencies),
        }


class CountedStub:
    """The client's stub, each method's calls counted in `tally`.

    Wraps the multicallables so every path of the client (a runner's Admit,
    a batched ReportOutcome, a DecideRetry) is counted where it leaves the
    process, whatever the client does above it.
    """

    def __init__(self, stub: object, tally: Tally) -> None:
        self._stub = stub
        self._tally = tally

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        call = getattr(self._stub, name)
        tally = self._tally

        async def counted(*args: Any, **kwargs: Any) -> Any:
            tally.sent[name] += 1
            try:
                return await call(*args, **kwargs)
            except grpc.RpcError as exc:
                tally.failed[f"{name} {exc.code().name}"] += 1
                raise

        return counted


def _since(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """The window's counts: `after` minus `before`."""

    def minus(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        return {k: v - b.get(k, 0) for k, v in a.items() if v - b.get(k, 0)}

    return {
        "sent": minus(after["sent"], before["sent"]),
        "failed": minus(after["failed"], before["failed"]),
        **{k: after[k] - before[k] for k in ("dispatched", "step_errors", "missed")},
    }


async def _step(_: int) -> None:
    await asyncio.sleep(0)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    tally = Tally()
    marks: dict[str, dict[str, Any]] = {}
    ended = asyncio.Event()
    window: list[float] = []

    def mark(name: str) -> None:
        marks[name] = tally.snapshot()
        window.append(loop.time())
        if name == "end":
            ended.set()

    loop.add_signal_handler(signal.SIGUSR1, mark, "start")
    loop.add_signal_handler(signal.SIGUSR2, mark, "end")
    rng = random.Random(args.seed)
    names: Sequence[str] = args.upstreams.split(",")
    client = AsyncSquawkClient(args.target)
    client._stub = CountedStub(client._stub, tally)  # type: ignore[assignment]
    if args.no_lease:
        # The baseline of the paced row: one Admit per dispatch, as before leases.
        client._policy.leases.wanted = lambda key: 1  # type: ignore[method-assign]
    in_flight: set[asyncio.Task[None]] = set()

    async def dispatch(n: int, due: float) -> None:
        options = StepOptions(
            upstream=names[n % len(names)], capability=CAPABILITY, deadline=STEP_DEADLINE
        )
        try:
            await run_step(client, _step, n, options=options)
        except Exception:
            tally.step_errors += 1
            return
        tally.dispatched += 1
        if "start" in marks and "end" not in marks:
            tally.latencies.append(loop.time() - due)
        if tally.dispatched == 1:
            Path(args.ready).touch()

    n, due = 0, loop.time()
    while not ended.is_set():
        due += rng.expovariate(args.rate)
        wait = due - loop.time()
        if wait > 0:
            # SIGUSR2 is seen within one gap between arrivals (4 ms at 250/s).
            await asyncio.sleep(wait)
            if ended.is_set():
                break
        if len(in_flight) >= MAX_IN_FLIGHT:
            tally.missed += 1
            continue
        task = loop.create_task(dispatch(n, due))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
        n += 1
    if in_flight:
        await asyncio.wait(in_flight, timeout=DRAIN_S)
    await asyncio.wait_for(client.close(), DRAIN_S)
    if "start" not in marks:
        raise SystemExit("the window ended before it started")
    latencies = sorted(tally.latencies)
    return {
        **_since(marks["end"], marks["start"]),
        "window_s": window[-1] - window[0],
        "latency_ms": [round(x * 1000, 4) for x in latencies],
        # The whole run's RPCs, warm-up and the closing flush included: what
        # the daemon saw, for a check against its own counters.
        "sent_total": dict(tally.sent),
        "failed_total": dict(tally.failed),
        "dispatched_total": tally.dispatched,
    }


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", required=True)
    p.add_argument("--rate", type=float, required=True, help="dispatches/s")
    p.add_argument("--upstreams", required=True, help="comma-separated; dispatch n goes to n mod")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ready", required=True, help="created after the first dispatch")
    p.add_argument("--out", required=True, help="the result, as JSON")
    p.add_argument("--no-lease", action="store_true", help="ask one permit per dispatch")
    args = p.parse_args(argv)
    started = time.monotonic()
    result = asyncio.run(run(args))
    result["run_s"] = round(time.monotonic() - started, 3)
    Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
