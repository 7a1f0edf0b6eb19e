"""The fleet store's outage machine: whether Redis is up, as a pure function
of (state, event, now).

An outage begins at a connection error, or at LATE_IN_A_ROW syncs in a row
later than the store's deadline; it ends when the reconnect pings answer in
time (as many in a row). Meanwhile the answers this pod gave from its own
state alone are counted, for the line that says the outage ended. The
store feeds the events and acts on the change (its log lines, its
`on_up` callback, the reconnect task); this module does neither.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

__all__ = ["LATE_IN_A_ROW", "UP", "Event", "Outage", "step", "timed"]

# Late syncs in a row that count as an outage (and pings in time in a row
# that end one).
LATE_IN_A_ROW = 3


class Event(enum.Enum):
    # A sync's round trip came within the deadline, or later.
    ON_TIME = enum.auto()
    LATE = enum.auto()
    # Redis could not be reached (a connection error, a timeout).
    FAILED = enum.auto()
    # The reconnect pings answered in time: the store is back.
    ANSWERED = enum.auto()
    # A call was answered; marked LOCAL when the store is away.
    LOCAL_ANSWER = enum.auto()


class Outage(NamedTuple):
    up: bool = True
    # Late syncs in a row, up to now.
    late: int = 0
    # When the last outage began (the store's clock).
    since: float = 0.0
    # Answers given from the pod's own state since it began.
    local: int = 0


UP = Outage()


def timed(took: float, late_s: float) -> Event:
    """A sync's round trip of `took` seconds, as an event."""
    return Event.LATE if took > late_s else Event.ON_TIME


def step(state: Outage, event: Event, now: float) -> Outage:
    """The state after `event` at `now`."""
    if event is Event.ON_TIME:
        return state._replace(late=0)
    if event is Event.LATE:
        state = state._replace(late=state.late + 1)
        if state.late < LATE_IN_A_ROW:
            return state
        event = Event.FAILED
    if event is Event.FAILED:
        return Outage(False, 0, now, 0) if state.up else state
    if event is Event.ANSWERED:
        return state._replace(up=True)
    # LOCAL_ANSWER: counted only while away.
    return state if state.up else state._replace(local=state.local + 1)
