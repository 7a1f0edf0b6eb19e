"""One thread for the analyzers' CPU work, so no request holds the event loop.

Every call the daemon serves (health checks and DecideRetry included) runs
on one asyncio loop. Converting a large Struct, checking it and analysing
it is bounded (see `bounds` and `budget`) but can still take tens of
milliseconds, so AnalyzeError and CheckDispatch hand that work to this
thread and await it; the loop keeps answering meanwhile. (A CheckDispatch
small enough to cost less than the handoff is checked on the loop: see
`wire.dispatch_small`.)

One thread, not a pool: the GIL lets one thread run Python at a time, and
each extra busy thread is one more the loop must wait behind, so a pool
would add latency, not throughput. Work queues in arrival order. Each step
runs in a copy of the caller's context, so the current analysis's budget
(a context variable) and the trace context go with it.

While the worker computes, the loop gets the GIL back only when CPython
asks the worker to hand it over, every `sys.getswitchinterval()` (5 ms by
default), and on a busy machine the worker may be descheduled holding it.
Measured with this module's stream test on a loaded 2-core machine: the
slowest health check went from 120-170 ms at 5 ms to 16-80 ms at 1 ms,
with no loss of throughput. So the first worker to start lowers the
interval to SWITCH_INTERVAL_S (never raises it). It is process-wide: the
daemon is the process, and the daemon lowers it at start too (the span
export thread competes for the GIL the same way).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["SWITCH_INTERVAL_S", "Worker", "lower_switch_interval"]

SWITCH_INTERVAL_S = 0.001

P = ParamSpec("P")
T = TypeVar("T")


def lower_switch_interval() -> None:
    """Make any thread holding the GIL hand it to the loop within SWITCH_INTERVAL_S."""
    if sys.getswitchinterval() > SWITCH_INTERVAL_S:
        sys.setswitchinterval(SWITCH_INTERVAL_S)


class Worker:
    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` on the worker thread; its exception is raised here."""
        if self._pool is None:
            lower_switch_interval()
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="squawk-analysis")
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def close(self) -> None:
        """Stop taking work; a step already running finishes on its own."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
