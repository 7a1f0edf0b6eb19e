"""The concurrency limit for an upstream that slows down rather than rejects.

Netflix concurrency-limits' AIMDLimit: +1 when a call succeeds with at
least half the limit in flight, x BACKOFF on a slow call (at most once per
bucket), within MIN_LIMIT..MAX_LIMIT. AIMDLimit's drop signal is a
timeout; an outcome says nothing of one, so slowness stands in for it. It
is switched on only by evidence, never limiting a healthy upstream: a call
is slow past SLOW_FACTOR times the baseline latency (a slow mean), and the
limit comes on when the fast mean passes that too, at BACKOFF x what the
upstream holds then (Little's law: the rate served x the latency). It goes
off after `quiet` without a slow call. docs/upstreams.md §Pacing tells the
rule as a user sees it.

The calls in flight are counted only while the limit is on, in two epochs
of FLIGHT_EPOCH (squawk.policy.flight), so a call whose outcome never comes leaves the count after
one to two epochs. Only the outcome of a call the pod admitted reaches this
machine (the daemon ties each outcome to its admission, and an admission
lives FLIGHT_EPOCH, the least time its count is kept): an outcome nobody
admitted neither frees a slot nor moves the limit. Of those, only a call
admitted while the limit was on, after it last came on, frees a slot: the
calls already out when it came on were never counted. So the count is never
below the admitted calls still out, and the limit holds however many
outcomes are reported, true or made up (Netflix's limiter frees a slot
only through the listener its acquire returned, for the same reason).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .clocker import BUCKET
from .flight import FLIGHT_EPOCH, one_fewer, roll

__all__ = [
    "BACKOFF",
    "FLIGHT_EPOCH",
    "MAX_LIMIT",
    "MIN_LIMIT",
    "SLOW_FACTOR",
    "SLOW_MIN",
    "Limit",
    "in_flight",
    "limited",
    "observe",
    "started",
]

BACKOFF = 0.9
MIN_LIMIT = 2
MAX_LIMIT = 1_000
SLOW_FACTOR = 2.0
# ... and only when it is also this much (seconds) past the baseline: a call
# of microseconds doubles by scheduling noise alone (a healthy loopback
# upstream's 20 us becomes 60 us), and outcomes the clients send in batches
# (up to 50 ms late) keep such calls counted in flight long after they
# ended, so a limit learned from their latency would shed a healthy
# upstream. Netflix's AIMDLimit backs off only at an absolute timeout (5 s
# by default); this floor keeps the relative rule for calls that slow down
# by a measurable amount.
SLOW_MIN = 0.01
# The latency's means: fast (the upstream now) and slow (its baseline).
LATENCY_FAST_WEIGHT = 0.1
LATENCY_BASE_WEIGHT = 0.01


class Limit(NamedTuple):
    # The limit (0 = never on).
    limit: float = 0.0
    # The calls admitted and not reported in this epoch and the one before,
    # and the epoch's start.
    flight: int = 0
    flight_old: int = 0
    epoch_at: float = -math.inf
    # The last slow call, the last decrease.
    slow_at: float = -math.inf
    decreased_at: float = -math.inf
    # The latency's fast and slow means (seconds).
    latency_fast: float = 0.0
    latency_base: float = 0.0
    # When the count last began (the limit came on): a call admitted
    # before then was not counted, and its outcome frees no slot.
    on_at: float = -math.inf


def limited(limit: Limit, now: float, quiet: float) -> bool:
    """Whether the limit is on at `now`."""
    return limit.limit > 0.0 and now - limit.slow_at < quiet


def in_flight(limit: Limit, now: float) -> tuple[int, int, float]:
    """(old, current, epoch start) at `now`: an epoch over rolls the count
    (squawk.policy.flight)."""
    return roll(limit.flight, limit.flight_old, limit.epoch_at, now)


def started(limit: Limit, now: float) -> Limit:
    """`limit` after a call was admitted at `now` while it is on."""
    old, current, epoch = in_flight(limit, now)
    return Limit(limit.limit, current + 1, old, epoch, *limit[4:])


def observe(
    limit: Limit,
    now: float,
    quiet: float,
    latency: float | None,
    success: bool,
    served: float,
    admitted_at: float,
) -> Limit:
    """`limit` after the outcome at `now` of a call the pod admitted at
    `admitted_at` (an outcome no live admission names never comes here).
    `latency`: the call's, in seconds, None when it says nothing of the
    upstream's speed (none sent, a verdict IGNORED, a throttle); `served`:
    the success rate (calls/s)."""
    on = limited(limit, now, quiet)
    value, flight, old, epoch, slow_at, decreased_at, fast, base, on_at = limit
    if on and admitted_at > on_at:
        old, flight, epoch = in_flight(limit, now)
        old, flight = one_fewer(old, flight)
    elif not on and latency is None:
        return limit
    if latency is not None and not base:
        fast = base = latency
    elif latency is not None:
        fast = fast + LATENCY_FAST_WEIGHT * (latency - fast)
        slow = _slower(latency, base)
        if slow:
            slow_at = now
        if not on:
            if slow and _slower(fast, base):
                # Evidence: the mean itself doubled. Start from the calls the
                # upstream holds now (Little's law), cut once.
                value = min(max(BACKOFF * (served * fast), MIN_LIMIT), MAX_LIMIT)
                old, flight, epoch, decreased_at, on_at = 0, 0, now, now, now
            elif slow and value:
                # A limit learned before comes back on: the calls out now
                # were admitted while it was off, uncounted.
                old, flight, epoch, on_at = 0, 0, now, now
        elif slow:
            if now - decreased_at >= BUCKET:
                value, decreased_at = max(value * BACKOFF, MIN_LIMIT), now
        elif success and 2 * (old + flight + 1) >= value:
            value = min(value + 1.0, MAX_LIMIT)
        # The baseline moves last: both tests above read it before this call.
        base = base + LATENCY_BASE_WEIGHT * (latency - base)
    return Limit(value, flight, old, epoch, slow_at, decreased_at, fast, base, on_at)


def _slower(latency: float, base: float) -> bool:
    """Whether `latency` is slow against the baseline `base` (seconds)."""
    return latency > SLOW_FACTOR * base and latency - base > SLOW_MIN
