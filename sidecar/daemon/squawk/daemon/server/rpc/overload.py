"""The daemon's own overload: which calls it sheds before deciding them.

Envoy's overload manager reads its resource monitors once an interval and
scales its actions by their pressure; this is that shape, with the one
pressure a Python gRPC server lets the daemon see. Calls queue in the
transport before any method runs, so the event loop's own lag stays under
20 ms while every caller's deadline passes (bench/REPORT.md, "The daemon's
own overload"); what shows the queue is how late calls reach their method.
A call that arrives with under BEHIND_S of its deadline left is answered
"not decided" at once (boundary.py); the share of such calls in an
INTERVAL sets the level of the next:

- level 1 (at least LOW of them behind): AnalyzeError and Classify are
  shed, the calls that cost the most and that nothing waits on to send;
- level 2 (at least HIGH): DecideRetryBatch too.

Admit, ReportOutcome and DecideRetry are never shed by the level, only
each by its own deadline: the level is raised by callers' deadlines, which
a caller chooses, so it may move other callers' diagnosis and batches to
their clients' fallback, never an upstream's pacing, breaker or budget.
The level falls by one each interval under LOW, so a shed stops within
two intervals of the daemon catching up.

Pure: the caller passes the clock and keeps the state.
"""

from __future__ import annotations

import math
from enum import IntEnum
from typing import NamedTuple

__all__ = [
    "HIGH",
    "INTERVAL",
    "LOW",
    "MIN_CALLS",
    "Overload",
    "Shed",
    "arrived",
    "shed_class",
    "sheds",
]

# Envoy's overload manager refreshes its monitors every 250 ms by default.
INTERVAL = 0.25
# The shares of an interval's calls arriving behind that raise the level;
# an interval of fewer calls than MIN_CALLS says nothing (one late call of
# three is a caller's short deadline, not a queue).
LOW = 0.05
HIGH = 0.2
MIN_CALLS = 16


class Shed(IntEnum):
    """The order calls are shed in: a level sheds every class below it."""

    DIAGNOSIS = 0  # AnalyzeError, Classify
    BATCH = 1  # DecideRetryBatch
    DISPATCH = 2  # Admit, ReportOutcome, DecideRetry, and the rest: never


_CLASSES = {
    "AnalyzeError": Shed.DIAGNOSIS,
    "Classify": Shed.DIAGNOSIS,
    "DecideRetryBatch": Shed.BATCH,
}


def shed_class(rpc: str) -> Shed:
    """Where `rpc` comes in the order of shedding."""
    return _CLASSES.get(rpc, Shed.DISPATCH)


class Overload(NamedTuple):
    # The current interval: its start, its calls and those that arrived behind.
    started: float = -math.inf
    calls: int = 0
    behind: int = 0
    # The level the intervals before set (0: nothing shed).
    level: int = 0


def arrived(state: Overload, now: float, behind: bool) -> Overload:
    """`state` after a call reached its method at `now`; `behind`: with
    too little of its deadline left to be decided."""
    if now - state.started >= INTERVAL:
        state = _next(state, now)
    return state._replace(calls=state.calls + 1, behind=state.behind + behind)


def sheds(state: Overload, rpc: Shed) -> bool:
    """Whether a call of class `rpc` is shed at the level in force."""
    return rpc < min(state.level, Shed.DISPATCH)


def _next(state: Overload, now: float) -> Overload:
    level = _level(state.calls, state.behind)
    if level < state.level:
        # Falls by one per interval: an interval without a call (the whole
        # gap since the last one) counts as quiet.
        quiet = int((now - state.started) / INTERVAL) if state.started > -math.inf else 0
        level = max(level, state.level - max(quiet, 1))
    return Overload(now, 0, 0, level)


def _level(calls: int, behind: int) -> int:
    if calls < MIN_CALLS:
        return 0
    share = behind / calls
    return 2 if share >= HIGH else 1 if share >= LOW else 0
