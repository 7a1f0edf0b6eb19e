"""The event history: a bounded ring of what changed, and why (issue 36).

Each breaker transition (the pod's and the fleet's), pace change,
cool-down begun and burst of refused Admits (more kinds to come: lease
revocations, fleet caution) is kept with its time, its key and its cause, in arrival order,
numbered from 1. Readers page through
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
from typing import NamedTuple

__all__ = ["CAPACITY", "KINDS", "MAX_PAGE", "Event", "EventRing", "Page"]

# Events kept: a day of one transition a minute on each of a few hundred
# upstreams would not fit, an hour of an incident does.
CAPACITY = 4096
MAX_PAGE = 500
KINDS = ("breaker", "fleet_breaker", "pace", "cool_down", "shed", "fleet_caution")


class Event(NamedTuple):
    seq: int
    at: float  # wall seconds
    kind: str  # one of KINDS
    profile: str
    upstream: str
    # The state before and after, as shown strings: "CLOSED" -> "OPEN",
    # "none 0/s" -> "learned 14.2/s"; a cool-down has only `after` ("cooling").
    before: str
    after: str
    # Why, in the policy's words (squawk.policy.why), or "" when unknown.
    cause: str = ""
    # When the state it entered ends by itself (wall seconds): an OPEN
    # breaker's half-open, a cool-down's end; None when nothing ends it.
    until: float | None = None


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
        self,
        at: float,
        kind: str,
        profile: str,
        upstream: str,
        before: str,
        after: str,
        cause: str = "",
        until: float | None = None,
    ) -> Event:
        event = Event(next(self._numbers), at, kind, profile, upstream, before, after, cause, until)
        self._events.append(event)
        return event

    def page(
        self,
        after: int = 0,
        upstream: str | None = None,
        limit: int = 100,
        profile: str | None = None,
    ) -> Page:
        """The events numbered past `after` (for `upstream` and `profile`
        alone, when given), oldest first, at most `limit` (1..MAX_PAGE)."""
        limit = max(1, min(limit, MAX_PAGE))
        # A copy taken in one step (the metrics port reads from its own
        # thread while the event loop adds).
        held = tuple(self._events)
        first = held[0].seq if held else after + 1
        lost = max(0, first - after - 1)
        found: list[Event] = []
        last = after
        # Numbers are consecutive: the first past `after` is found by index.
        for event in held[max(0, after - first + 1) :]:
            last = event.seq
            if (upstream is None or event.upstream == upstream) and (
                profile is None or event.profile == profile
            ):
                found.append(event)
                if len(found) == limit:
                    break
        return Page(tuple(found), last, lost)

    def before(
        self, number: int, upstream: str, profile: str, count: int = 10
    ) -> tuple[Event, ...]:
        """The latest `count` events of (`profile`, `upstream`) numbered at
        most `number`, oldest first."""
        found: list[Event] = []
        for event in reversed(tuple(self._events)):
            if event.seq > number or event.upstream != upstream or event.profile != profile:
                continue
            found.append(event)
            if len(found) == count:
                break
        return tuple(reversed(found))

    @property
    def last(self) -> int:
        """The number of the latest event (0 before the first)."""
        return self._events[-1].seq if self._events else 0

    def __len__(self) -> int:
        return len(self._events)
