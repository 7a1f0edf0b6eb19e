"""One executor of the outcome benchmark, in Python (asyncio, httpx).

Poisson arrivals of steps at the rates of its phases; each step is one
distinct GET to the upstream, run through `squawk_client.run_step` (modes
"stateless" and "pod") or a tenacity-style loop (mode "none"). When its last
step ends it writes, as JSON: each step as [start, end, ok, reason,
attempts, undecided] (wall seconds; undecided: any of its Squawk calls was
answered by the fallback or failed open) and, per wall second, [Squawk
calls, calls the daemon did not decide]. The config is one JSON argument, the same for the
Go and TypeScript executors.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import random
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine
from datetime import timedelta
from typing import Any

import httpx

from squawk.policy import Criticality
from squawk_client import AsyncSquawkClient, StepError, StepFailed, StepOptions, run_step

# The step a Squawk call belongs to: [whether any of its calls was undecided].
STEP_UNDECIDED: contextvars.ContextVar[list[bool]] = contextvars.ContextVar("step_undecided")
# The default profile's backoff bounds, for the loop without Squawk.
BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 10.0


class CountingClient(AsyncSquawkClient):
    """The client, counting per wall second the RPCs it sends and those that
    ended in an error: a call the daemon did not decide (the client then
    answered from its fallback, or failed open)."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.calls: defaultdict[int, list[int]] = defaultdict(lambda: [0, 0])
        self._stub = _CountingStub(self._stub, self.calls)  # type: ignore[assignment]


class _CountingStub:
    def __init__(self, stub: Any, calls: defaultdict[int, list[int]]) -> None:
        self._stub = stub
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            failed = True
            try:
                reply = await method(*args, **kwargs)
                failed = False
                return reply
            finally:
                row = self._calls[int(time.time())]
                row[0] += 1
                row[1] += failed
                if failed and (flag := STEP_UNDECIDED.get(None)) is not None:
                    flag[0] = True

        return counted


async def tenacity(
    attempt: Callable[[], Awaitable[object]],
    max_attempts: int,
    deadline_s: float,
    rng: random.Random,
) -> tuple[bool, str]:
    """The loop a team writes without Squawk: full-jitter exponential backoff,
    the Retry-After when the answer has one, the same budget and deadline."""
    started = time.monotonic()
    n = 1
    while True:
        try:
            await attempt()
            return True, ""
        except Exception as exc:
            if n >= max_attempts:
                return False, "ATTEMPTS_EXHAUSTED"
            wait = rng.uniform(0, min(BACKOFF_MAX_S, BACKOFF_INITIAL_S * 2 ** (n - 1)))
            if isinstance(exc, StepError):
                with contextlib.suppress(ValueError):
                    wait = max(0.0, float(exc.headers.get("retry-after", "")))
            if time.monotonic() - started + wait > deadline_s:
                return False, "DEADLINE_EXCEEDED"
            await asyncio.sleep(wait)
            n += 1


async def started(cfg: dict[str, Any]) -> float:
    """Say ready, then wait for the wall time the first phase starts at."""
    with open(cfg["ready"], "w") as f:
        f.write("ready\n")
    while True:
        with contextlib.suppress(FileNotFoundError, ValueError), open(cfg["start"]) as f:
            return float(f.read())
        await asyncio.sleep(0.01)


async def arrivals(
    cfg: dict[str, Any], rng: random.Random, one: Callable[[str], Coroutine[Any, Any, None]]
) -> None:
    """Once the first phase starts, start `one(step_id)` at Poisson arrivals
    at each phase's rate; return when every step has ended."""
    t0 = await started(cfg)
    tasks: set[asyncio.Task[None]] = set()
    n = 0
    for offset, until, rate in cfg["phases"]:
        start, end = t0 + offset, t0 + until
        if rate <= 0:
            continue
        t = start + rng.expovariate(rate)
        while t < end:
            if (d := t - time.time()) > 0:
                await asyncio.sleep(d)
            n += 1
            task = asyncio.create_task(one(f"{cfg['id']}-{n}"))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            t += rng.expovariate(rate)
    while tasks:
        await asyncio.gather(*tasks)


async def main(cfg: dict[str, Any]) -> None:
    ident: str = cfg["id"]
    mode: str = cfg["mode"]
    deadline_s = float(cfg["deadline_s"])
    max_attempts = int(cfg["max_attempts"])
    rng = random.Random(cfg["seed"])
    steps: list[list[Any]] = []
    client = CountingClient(cfg["daemon"]) if mode != "none" else None
    limits = httpx.Limits(max_connections=1024, max_keepalive_connections=1024)
    async with httpx.AsyncClient(limits=limits, timeout=deadline_s) as http:

        async def one(step_id: str) -> None:
            start = time.time()
            attempts = 0
            undecided = [False]
            STEP_UNDECIDED.set(undecided)  # this task's own context

            async def call(sid: str) -> httpx.Headers:
                nonlocal attempts
                attempts += 1
                try:
                    r = await http.get(
                        cfg["url"], params={"step": sid}, headers={"x-executor": ident}
                    )
                except httpx.HTTPError as exc:
                    raise StepError(str(exc), transport_failure=True) from exc
                if r.status_code != 200:
                    raise StepError(
                        f"HTTP {r.status_code}",
                        http_status=r.status_code,
                        body=r.content,
                        headers=dict(r.headers),
                    )
                return r.headers

            ok, reason = True, ""
            try:
                if client is None:
                    ok, reason = await tenacity(
                        lambda: call(step_id), max_attempts, deadline_s, rng
                    )
                else:
                    options = StepOptions(
                        max_attempts=max_attempts,
                        deadline=timedelta(seconds=deadline_s),
                        upstream=cfg["upstream"] if mode == "pod" else "",
                        criticality=Criticality[cfg["criticality"]]
                        if "criticality" in cfg
                        else None,
                        fairness_key=cfg.get("fairness_key", ""),
                        fairness_weight=float(cfg.get("fairness_weight", 0.0)),
                    )
                    await asyncio.wait_for(
                        run_step(client, call, step_id, options=options, headers_of=lambda h: h),
                        deadline_s,
                    )
            except StepFailed as exc:
                ok, reason = False, exc.decision.reason.name
            except TimeoutError:
                ok, reason = False, "DEADLINE_EXCEEDED"
            except Exception as exc:
                ok, reason = False, type(exc).__name__
            steps.append([start, time.time(), ok, reason, attempts, undecided[0]])

        await arrivals(cfg, rng, one)
    calls: dict[int, list[int]] = {}
    if client is not None:
        calls = dict(client.calls)
        await client.close()
    with open(cfg["out"], "w") as f:
        json.dump({"id": ident, "steps": steps, "calls": calls}, f)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
