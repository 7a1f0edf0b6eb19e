"""The pacer's queue: how long a paced call may wait, and where a refused
one comes back.

A grant's wait is at most `max_queue_delay`, or, while the short queue is
on, max(CODEL_TARGET, SHORT_SLOTS slots). The short queue comes on once
every call for CODEL_INTERVAL would have waited past the short limit and
goes off only when the queue is found empty: CoDel's rule (Nichols &
Jacobson, 2012), with its target also counted in slots (at 50 calls/s one
slot is already 20 ms) and the hysteresis of Facebook's "Fail at Scale"
(leaving as soon as one call fits would let the backlog form again every
interval). Facebook's adaptive LIFO is not taken: a grant is already a
reserved start, and the short queue bounds what LIFO would skip.

A release (squawk.policy.cubic: the calls a cool-down held, let out at a
rate that doubles until a throttle cuts it) probes past the rate the
upstream last served, and a start reserved at its rate goes out after the
throttle that ends it, into an upstream with nothing left: its grants wait
at most RELEASE_SLOTS slots. With four, the release's end drew two or three
throttles more in the benchmark's 10x overload.

A refused caller is told to come back at its turn had every caller refused
before it come back in order (the refused queue's end), at least
CODEL_INTERVAL away so refused callers do not spin. docs/upstreams.md
§Pacing tells the rules as a user sees them.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .shed import ShedCause

__all__ = [
    "CODEL_INTERVAL",
    "CODEL_TARGET",
    "RELEASE_SLOTS",
    "SHORT_SLOTS",
    "Queue",
    "arrive",
    "refuse",
    "refused_by",
    "releasing",
]

CODEL_TARGET = 0.005
CODEL_INTERVAL = 0.1
SHORT_SLOTS = 4
RELEASE_SLOTS = 2


class Queue(NamedTuple):
    # Since when every call has waited past the short limit (+inf once one
    # did not), and whether the short queue is on.
    above_since: float = math.inf
    short_on: bool = False
    # The refused queue's end: when the last refused caller was told to
    # come back; reset whenever the queue is found empty.
    shed_until: float = -math.inf


_EMPTY = Queue()


def arrive(
    queue: Queue, now: float, wait: float, empty: bool, slot: float, max_wait: float
) -> tuple[Queue, float]:
    """(queue, longest): the queue after a call that would wait `wait`
    seconds at `now` (`empty`: it would start at once), and the longest
    wait it grants."""
    if empty:
        return _EMPTY, max_wait
    short = min(max(CODEL_TARGET, SHORT_SLOTS * slot), max_wait)
    above = min(queue.above_since, now) if wait > short else math.inf
    short_on = queue.short_on or now - above >= CODEL_INTERVAL
    return Queue(above, short_on, queue.shed_until), short if short_on else max_wait


def releasing(longest: float, slot: float) -> float:
    """The longest wait a release grants, given the queue's `longest`."""
    return min(longest, max(CODEL_TARGET, RELEASE_SLOTS * slot))


def refuse(queue: Queue, now: float, start: float, slot: float) -> tuple[Queue, float]:
    """(queue, seconds): the queue after refusing a call that would start
    at `start`, and how long until the refused caller's turn."""
    shed = max(queue.shed_until, start) + slot
    return queue._replace(shed_until=shed), max(shed - now, CODEL_INTERVAL)


def refused_by(
    wait: float, longest: float, short_on: bool, deadline: float | None
) -> tuple[ShedCause, float, float | None]:
    """(cause, limit, past): what refused a start `wait` seconds away: the
    queue's limit when the wait passes it (with the deadline it passes too),
    else the deadline (seconds; None = none)."""
    late = deadline is not None and wait >= deadline
    if wait > longest:
        cause = ShedCause.SHORT_QUEUE if short_on else ShedCause.QUEUE
        return cause, longest, deadline if late else None
    assert deadline is not None  # refused within the queue: the deadline
    return ShedCause.DEADLINE, deadline, None
