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

__all__ = ["BUCKET", "SMOOTHING", "Clock", "bucket_of", "tick"]

BUCKET = 0.5
SMOOTHING = 0.8


class Clock(NamedTuple):
    # The bucket being counted (its start), and the events in it so far.
    at: float = -math.inf
    events: int = 0
    # The smoothed rate of the buckets before it, per second.
    rate: float = 0.0


def bucket_of(now: float) -> float:
    """The start of the bucket `now` falls in."""
    return math.floor(now / BUCKET) * BUCKET


def tick(clock: Clock, bucket: float, add: int) -> Clock:
    """`clock` after `add` events (0 or more) in `bucket`: the count so far
    is folded when `bucket` is a new one, the events counted in the old."""
    count = clock.events + add
    if clock.at == -math.inf:
        return Clock(bucket, count, clock.rate)
    if bucket > clock.at:
        return Clock(bucket, 0, SMOOTHING * (count / BUCKET) + (1.0 - SMOOTHING) * clock.rate)
    if add:
        return Clock(clock.at, count, clock.rate)
    return clock
