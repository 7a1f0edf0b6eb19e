"""The event history: a bounded ring of what changed, and why (issue 36).

Each breaker transition and pace change (more kinds to come: cool-downs,
shed bursts, lease revocations, fleet caution) is kept with its time, its
key and its cause, in arrival order, numbered from 1. Readers page through
it by number (`after`), optionally for one upstream; a reader that falls
behind the ring's start is told so (`lost`), never shown a gap silently.

Bounded twice over: the ring holds at most `capacity` events whatever
happens, and every string in an event has passed the observer's one
redaction gate (shown_text) before it gets here, so a flood of names costs
the ring its oldest events, never memory, and no secret reaches a reader.
No I/O: the clock is the caller's.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Mapping
from typing import NamedTuple

__all__ = ["CAPACITY", "MAX_PAGE", "Event", "EventRing", "Page"]

# Events kept: a day of one transition a minute on each of a few hundred
# upstreams would not fit, an hour of an incident does.
CAPACITY = 4096
MAX_PAGE = 500


class Event(NamedTuple):
    seq: int
    at: float  # wall seconds
    kind: str  # "breaker", "fleet_breaker", "pace"
    profile: str
    upstream: str
    # What changed and why, as shown strings: e.g. {"from": "CLOSED", "to":
    # "OPEN"} or {"from": "none 0/s", "to": "learned 14.2/s"}.
    detail: Mapping[str, str]


class Page(NamedTuple):
    events: tuple[Event, ...]
    # The number to ask `after` next time (the last event's, or `after`).
    next_after: int
    # Events past `after` the ring no longer holds (the reader fell behind).
    lost: int


class EventRing:
    def __init__(self, capacity: int = CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._events: deque[Event] = deque(maxlen=capacity)
        self._numbers = itertools.count(1)

    def add(
        self, at: float, kind: str, profile: str, upstream: str, detail: Mapping[str, str]
    ) -> Event:
        event = Event(next(self._numbers), at, kind, profile, upstream, dict(detail))
        self._events.append(event)
        return event

    def page(self, after: int = 0, upstream: str | None = None, limit: int = 100) -> Page:
        """The events numbered past `after` (for `upstream` alone, when
        given), oldest first, at most `limit` (1..MAX_PAGE)."""
        limit = max(1, min(limit, MAX_PAGE))
        first = self._events[0].seq if self._events else after + 1
        lost = max(0, first - after - 1)
        found: list[Event] = []
        last = after
        for event in self._events:
            if event.seq <= after:
                continue
            last = event.seq
            if upstream is None or event.upstream == upstream:
                found.append(event)
                if len(found) == limit:
                    break
        return Page(tuple(found), last, lost)

    def __len__(self) -> int:
        return len(self._events)
