"""The fleet's view, as one pod holds it: each upstream it syncs (`Tracked`),
and the rules for which of what a sync read a call may still decide by.

Pure: the sync link (fleet_link.py) writes each record, the store's calls
read it; both pass `now` from the store's one clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from squawk.policy import BreakerState, Profile
from squawk.policy.fleet import NO_DELTA, Delta, FleetView, pace_share

__all__ = ["LEASE_SYNCS", "STALE_SYNCS", "Tracked", "busy", "current", "holds", "share"]

# A pace share holds for this many sync intervals without a new reading.
LEASE_SYNCS = 10
# A view no sync renewed for this many intervals is stale (see current).
STALE_SYNCS = 10


@dataclass(slots=True)
class Tracked:
    """One upstream as this pod syncs it."""

    profile: Profile
    upstream: str
    keys: list[str]
    touched: float
    delta: Delta = NO_DELTA
    view: FleetView | None = None
    # The last view a sync read, kept for its pace share's lease when the
    # view itself is dropped (see current and share).
    leased: FleetView | None = None
    # When the last sync that landed was sent.
    synced_at: float = -math.inf
    # The pace's demand: the running mean the last sync reported
    # (squawk.policy.fleet.demand), and when that sync was made.
    demand: float = 0.0
    measured_at: float = -math.inf


def current(tracked: Tracked, now: float, up: bool, interval_s: float) -> FleetView | None:
    """The view a call may decide by: one no sync renews (Redis away, or
    the upstream quiet) keeps only its caution until that ends on its own
    time; a stale CLOSED or HALF_OPEN view says nothing of the fleet now,
    and the pod's own state decides (its half-open round included). A
    dropped view is dropped from the record."""
    view = tracked.view
    if view is None:
        return None
    stale = not up or now - view.at > STALE_SYNCS * interval_s
    if stale and not holds(view, now):
        tracked.view = view = None
    return view


def share(tracked: Tracked | None, now: float, up: bool, fallback: float | None) -> float:
    """The part of a shared rate this pod paces by: its lease's while it
    holds, even once the view it came with is dropped (Redis away); past
    it, without a reading, `fallback` (or the whole rate when unset). A
    name not read yet while Redis answers paces by the whole rate: its
    first sync comes at once."""
    leased = None if tracked is None else tracked.leased
    return pace_share(leased, now, fallback if leased is not None or not up else None)


def busy(view: FleetView | None, now: float) -> bool:
    """Whether a view needs every sync: anything but a plain CLOSED fleet."""
    if view is None:
        return False
    return view.reading.state is not BreakerState.CLOSED or view.probes > 0 or holds(view, now)


def holds(view: FleetView | None, now: float) -> bool:
    """Whether a view still holds caution of its own: an OPEN fleet breaker
    (until it half-opens) or a cool-down, each bounded by its rule."""
    if view is None:
        return False
    opened = view.reading.state is BreakerState.OPEN and now < view.until
    return opened or now < view.cool_until
