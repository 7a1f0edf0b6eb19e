"""How late the event loop runs: the daemon's own measure of a stalled loop.

Every call waits on the one event loop, so anything that holds it (a long
callback, or another thread holding the interpreter, such as a span export
encoding a large batch) delays every answer by the same amount. A timer
that asks to wake every PERIOD_S and records how much later it woke sees
those stalls directly, whatever their cause.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["PERIOD_S", "watch_loop_lag"]

# 40 wake-ups a second: a stall of 25 ms or more is always seen, shorter
# ones in proportion to their length; each wake-up costs a few microseconds.
PERIOD_S = 0.025


async def watch_loop_lag(observe: Callable[[float], None], period_s: float = PERIOD_S) -> None:
    """Call `observe(seconds late)` after every period, until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + period_s
        await asyncio.sleep(period_s)
        observe(max(loop.time() - due, 0.0))
