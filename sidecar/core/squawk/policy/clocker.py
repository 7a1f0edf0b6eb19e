"""A rate measured in buckets, as botocore's RateClocker measures one.

Events are counted in BUCKET-second buckets; on entering a new bucket the
count is folded into a smoothed rate (weight SMOOTHING) as a rate over one
bucket. botocore spreads a count over every bucket since the last one;
here a stretch in which no event arrived is no reading at all, so a
pause (a hold, a cool-down) does not read as a slow rate. The learned pace
keeps two (squawk.policy.cubic): the successes the upstream served, and
the calls the pace itself granted.
"""

from __future__ import annotations

import math
from typing import NamedTuple

__all__ = ["BUCKET", "SMOOTHING", "Clock", "Tally", "bucket_of", "count", "share", "tick"]

BUCKET = 0.5
SMOOTHING = 0.8


class Clock(NamedTuple):
    # The bucket being counted (its start), and the events in it so far.
    at: float = -math.inf
    events: int = 0
    # The smoothed rate of the buckets before it, per second; and that rate
    # before the last bucket was folded in (see squawk.policy.cubic's release).
    rate: float = 0.0
    before: float = 0.0


def bucket_of(now: float) -> float:
    """The start of the bucket `now` falls in."""
    return math.floor(now / BUCKET) * BUCKET


def tick(clock: Clock, bucket: float, add: int) -> Clock:
    """`clock` after `add` events (0 or more) in `bucket`: the count so far
    is folded when `bucket` is a new one, the events counted in the old."""
    count = clock.events + add
    if clock.at == -math.inf:
        return clock._replace(at=bucket, events=count)
    if bucket > clock.at:
        folded = SMOOTHING * (count / BUCKET) + (1.0 - SMOOTHING) * clock.rate
        return Clock(bucket, 0, folded, clock.rate)
    if add:
        return clock._replace(events=count)
    return clock


class Tally(NamedTuple):
    """Outcomes and the throttles among them: of the bucket at `at` and of
    the one before it (a share over one bucket alone would start from
    nothing twice a second)."""

    at: float = -math.inf
    outcomes: int = 0
    throttles: int = 0
    before_outcomes: int = 0
    before_throttles: int = 0


def count(tally: Tally, bucket: float, throttled: bool) -> Tally:
    """`tally` after one outcome in `bucket` (at or after tally.at)."""
    hit = 1 if throttled else 0
    if bucket > tally.at:
        if bucket - tally.at > BUCKET:  # the bucket before it was empty
            return Tally(bucket, 1, hit)
        return Tally(bucket, 1, hit, tally.outcomes, tally.throttles)
    return tally._replace(outcomes=tally.outcomes + 1, throttles=tally.throttles + hit)


def share(tally: Tally, least: int = 1) -> float | None:
    """The share of throttles among the tally's outcomes, or None with fewer
    than `least` outcomes."""
    outcomes = tally.outcomes + tally.before_outcomes
    if outcomes < least:
        return None
    return (tally.throttles + tally.before_throttles) / outcomes
