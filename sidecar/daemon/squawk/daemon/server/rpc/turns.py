"""Turns at the event loop for the calls whose work grows with their request.

A batch, a report or a large body to parse is work in slices of about
SLICE_S; between two it gives the loop back, and only one such call works
at a time while the others wait their turn, first come first served.

Why turns and not only slices: the loop runs every ready task once per
round, so with eight large calls in flight, each yielding after a slice, a
health check waits behind eight slices at each of the few loop steps its
answer takes. With four batches and four reports of 1,000 items of 64
headers each in flight, each yielding every 32 items, health checks waited
100-160 ms at the median and 230-400 ms at the 95th percentile (on a shared
2-core machine); taking turns, some 12 ms and 30-55 ms.

The alternative, a thread pool, does not help here: the work is Python
holding the GIL, and it changes the upstreams' state, which only the loop
may touch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["SLICE_S", "Turn", "Turns"]

# A slice's length: what a health check waits for, per loop step, behind
# the large calls (some 30 decisions or outcomes of 64 headers each).
SLICE_S = 0.002


class Turn:
    """One call's turn: `pause()` between two pieces of its work."""

    __slots__ = ("_held", "_lock", "_slice_s", "_until")

    def __init__(self, lock: asyncio.Lock, slice_s: float) -> None:
        self._lock = lock
        self._slice_s = slice_s
        self._held = False
        self._until = 0.0

    async def pause(self) -> None:
        """Let the next large call in line have its turn, and the loop a
        round, once this slice has run its time. Raises CancelledError
        there once the caller has gone."""
        if time.perf_counter() < self._until:
            return
        # Queue behind the calls waiting for a turn (none: the turn stays).
        self._leave()
        await self._lock.acquire()
        self._held = True
        # A round of the loop with the turn held: health checks and small
        # calls run, a large call that arrives queues. Yielding with the
        # turn given back instead would let every large call in flight
        # take it in the same round, one after the other.
        await asyncio.sleep(0)
        self._until = time.perf_counter() + self._slice_s

    async def _take(self) -> None:
        await self._lock.acquire()
        self._held = True
        self._until = time.perf_counter() + self._slice_s

    def _leave(self) -> None:
        if self._held:
            self._held = False
            self._lock.release()


class Turns:
    """The queue of the large calls of one server."""

    def __init__(self, slice_s: float = SLICE_S) -> None:
        self._lock = asyncio.Lock()
        self._slice_s = slice_s

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[Turn]:
        """Wait for a turn; it ends with the block (awaiting anything but
        `pause()` inside it would hold up every other large call)."""
        turn = Turn(self._lock, self._slice_s)
        await turn._take()
        try:
            yield turn
        finally:
            turn._leave()
