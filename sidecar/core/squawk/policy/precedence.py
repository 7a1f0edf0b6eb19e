"""Critical calls ahead of sheddable ones: the pace's priority lane.

Google's rule for criticality (the SRE book, "Handling Overload"): a
level is rejected only once every lower level is rejected already. The
short queue's limits per level (squawk.policy.pacer._longest) shed the
sheddable calls first, but a grant is a start already promised: a critical
call arriving behind the sheddable grants of the queue waited for them.

So while a sheddable call (SHEDDABLE or SHEDDABLE_PLUS) asked within
LOWER_S, a critical one (CRITICAL or CRITICAL_PLUS) takes the lane: it
starts at the pace's next slot among the critical calls alone (a GCRA of
their own at the pace's rate), not behind the queue. A quota the
upstream's headers said is spent still holds every call, as the upstream
would refuse them, and a cool-down refuses every call before the pace is
asked: the upstream asked every caller to wait.
The shared spacing still counts its start, so the sheddable calls after
it start a slot later: over any stretch the pod starts no more than the
pace, and at any moment at most the sheddable grants already queued (the
short queue keeps them to about one slot) over it.

With no sheddable call asking (every call of one level, as when no caller
sends a criticality) the lane is closed and every call is spaced alike.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .types import Criticality

__all__ = ["LOWER_S", "NO_LANE", "Lane", "asked", "is_idle", "opens", "start", "started"]

# A sheddable call asked within this long: the critical calls take the lane.
# Ten of the short queue's intervals: a flood that stops closes it within a
# second, one that goes on keeps it open between its calls.
LOWER_S = 1.0


class Lane(NamedTuple):
    # When a call below CRITICAL last asked.
    sheddable_at: float = -math.inf
    # The critical calls' own theoretical arrival time (GCRA, burst 1).
    tat: float = -math.inf


NO_LANE = Lane()


def asked(lane: Lane, level: Criticality, now: float) -> Lane:
    """`lane` after a call of `level` asked at `now`."""
    if level < Criticality.SHEDDABLE_PLUS or lane.sheddable_at >= now:
        return lane
    return lane._replace(sheddable_at=now)


def opens(lane: Lane, level: Criticality, now: float) -> bool:
    """Whether a call of `level` takes the lane at `now`."""
    return level < Criticality.SHEDDABLE_PLUS and now - lane.sheddable_at <= LOWER_S


def start(lane: Lane, rate: float, at: float) -> float:
    """The lane's start for a critical call that may start from `at`: the
    next slot of the critical calls alone at `rate` (0: no pace)."""
    if not rate:
        return at
    return max(at, lane.tat)


def started(lane: Lane, rate: float, at: float) -> Lane:
    """`lane` after a critical call was granted a start `at` at `rate`."""
    if not rate:
        return lane
    return lane._replace(tat=max(lane.tat, at) + 1.0 / rate)


def is_idle(lane: Lane, now: float) -> bool:
    """Whether a fresh Lane() would do as `lane` from `now` on."""
    return now - lane.sheddable_at > LOWER_S and lane.tat <= now
