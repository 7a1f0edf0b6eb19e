"""The fleet: what one pod does with the counts every pod shares.

(Being written: the sync design of the Redis store. Only the display type
is here so far.)
"""

from __future__ import annotations

from datetime import timedelta
from typing import NamedTuple

from .types import BreakerState

__all__ = ["FleetSnapshot"]


class FleetSnapshot(NamedTuple):
    """The fleet's view of one upstream as this pod last read it, for display."""

    # The fleet-wide breaker's state.
    breaker_state: BreakerState
    # CLOSED: calls and failures in the fleet's window, across every pod.
    # HALF_OPEN: the round's probe outcomes tallied, and the failures among them.
    calls: int
    failures: int
    # CLOSED: the distinct pods with a failure in the window (the quorum's count).
    failing_pods: int
    # HALF_OPEN: probe slots taken fleet-wide this round.
    probes: int
    # OPEN: until it half-opens. HALF_OPEN: until the round restarts. CLOSED: None.
    breaker_retry_after: timedelta | None
    # The fleet's shared cool-down left; zero when none.
    cooldown_left: timedelta
    # The retries the fleet's budget would grant now (retry_budget.retries_left's
    # meaning, over every pod's calls and retries).
    retries_left: int
    # This pod's share of the upstream's rate, a fraction in (0, 1]; 1.0 when
    # the fleet does not divide it (no rate to share, or this pod alone).
    pace_share: float
    # The pods that asked for the upstream in the last sync interval.
    pods: int
    # How old this view is: the time since the sync that read it.
    age: timedelta
