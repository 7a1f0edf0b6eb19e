"""One thread for the analyzers' CPU work, so no request holds the event loop.

Every call the daemon serves (health checks and DecideRetry included) runs
on one asyncio loop. Converting a large Struct, checking it and analysing
it is bounded (see `bounds` and `budget`) but can still take tens of
milliseconds, so AnalyzeError and CheckDispatch hand that work to a worker
and await it; the loop keeps answering meanwhile. The analyzer keeps two:
one for analyses, one for CheckDispatch calls too large for the loop, so
a stream of analyses never delays the check made before every dispatch.

One thread, not a pool: the GIL lets one thread run Python at a time, and
each extra busy thread is one more the loop must wait behind (CPython
hands the GIL over every 5 ms), so a pool would add latency, not
throughput. Work queues in arrival order. Each step runs in a copy of the
caller's context, so the current analysis's budget (a context variable)
and the trace context go with it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["Worker"]

P = ParamSpec("P")
T = TypeVar("T")


class Worker:
    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` on the worker thread; its exception is raised here."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="squawk-analysis")
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def close(self) -> None:
        """Stop taking work; a step already running finishes on its own."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
