"""Time in the stateful core: a sliding window of buckets, and time left.

`now` is always a float of seconds from a monotonic clock the caller
passes in (the server's `time.monotonic()`, a test's fake clock); nothing
here reads a clock, and only differences between two `now`s mean anything.

The window is resilience4j's time-based sliding window (and Finagle's
WindowedAdder): time is cut into buckets of `span / buckets` seconds,
numbered from the clock's zero (bucket k covers [k, k + 1) times that
width), and at `now` the window holds the bucket `now` falls in and the
`buckets - 1` before it. Older buckets roll out whole, so an event stays
counted for between `span - span / buckets` and `span` after it happened.
The alternative, a timestamp per event, is exact but grows with traffic;
a window of buckets is bounded by `buckets` (at most MAX_BUCKETS).

A `now` earlier than a bucket already written counts as that bucket: calls
reported out of order never bring an expired event back or drop a new one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

__all__ = [
    "EMPTY",
    "Window",
    "added",
    "expires_at",
    "joined",
    "rolled",
    "seconds",
    "shown_seconds",
    "time_left",
]

_ONE_MS = timedelta(milliseconds=1)
# Float noise in `until - now` (two large clock readings) is far below this;
# a real microsecond left still rounds up to a whole millisecond.
_NOISE_MS = 1e-6


@dataclass(frozen=True, slots=True)
class Window:
    """Two counters per bucket; what they count is the owner's business
    (the breaker: calls and failures; the ratio budget: deposits and
    withdrawals)."""

    # The non-empty buckets, oldest first: (bucket number, first, second).
    slots: tuple[tuple[int, int, int], ...] = ()
    # The sums of each counter over `slots`, kept so reading them is O(1).
    first: int = 0
    second: int = 0


EMPTY = Window()


def seconds(value: timedelta) -> float:
    return value.total_seconds()


def _bucket(now: float, span: float, buckets: int) -> int:
    return math.floor(now * buckets / span)


def rolled(window: Window, now: float, span: float, buckets: int) -> Window:
    """`window` with the buckets older than `span` at `now` dropped."""
    if not window.slots:
        return window
    current = max(_bucket(now, span, buckets), window.slots[-1][0])
    oldest = current - buckets + 1
    if window.slots[0][0] >= oldest:
        return window
    kept = tuple(slot for slot in window.slots if slot[0] >= oldest)
    return Window(kept, sum(slot[1] for slot in kept), sum(slot[2] for slot in kept))


def added(window: Window, now: float, span: float, buckets: int, first: int, second: int) -> Window:
    """`window` rolled to `now`, with the two counts added to `now`'s bucket."""
    window = rolled(window, now, span, buckets)
    number = _bucket(now, span, buckets)
    slots = window.slots
    if slots and slots[-1][0] >= number:
        last = slots[-1]
        slots = (*slots[:-1], (last[0], last[1] + first, last[2] + second))
    else:
        slots = (*slots, (number, first, second))
    return Window(slots, window.first + first, window.second + second)


def joined(a: Window, b: Window) -> Window:
    """The counts of two windows of the same span and buckets, bucket by
    bucket (a delta sent and lost, and the one gathered meanwhile)."""
    if not a.slots:
        return b
    if not b.slots:
        return a
    sums: dict[int, tuple[int, int]] = {}
    for number, first, second in (*a.slots, *b.slots):
        was = sums.get(number, (0, 0))
        sums[number] = (was[0] + first, was[1] + second)
    slots = tuple((n, *sums[n]) for n in sorted(sums))
    return Window(slots, a.first + b.first, a.second + b.second)


def expires_at(number: int, span: float, buckets: int) -> float:
    """The moment bucket `number` rolls out of the window."""
    return (number + buckets) * span / buckets


def time_left(until: float, now: float) -> timedelta:
    """The time from `now` to `until` in whole milliseconds, rounded up (so a
    wait never ends before the moment it waits for); zero once it is past."""
    ms = (until - now) * 1000.0
    if not ms > _NOISE_MS:
        return timedelta(0)
    return math.ceil(ms - _NOISE_MS) * _ONE_MS


def shown_seconds(s: float) -> str:
    """A duration for people: whole milliseconds below a second, seconds to
    three digits below 100 s, whole seconds above."""
    if s < 1.0:
        return f"{round(s * 1000)} ms"
    if s < 100.0:
        return f"{s:.3g} s"
    return f"{round(s)} s"
