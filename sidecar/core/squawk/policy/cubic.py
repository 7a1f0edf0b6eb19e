"""The rate learned from throttling: CUBIC, as the AWS SDKs' adaptive mode.

botocore/retries/throttling.py's CubicCalculator (BETA, SCALE), with
adaptive.py's RateClocker (squawk.policy.clocker) and bucket.py's floor
(MIN_RATE), the rate capped at twice the rate served. After a cut at
W_max, rate(t) = SCALE (t - K)^3 + W_max with K = cbrt(W_max (1 - BETA) /
SCALE), so it restarts at BETA W_max. docs/upstreams.md §Pacing (item 3)
tells the rules; two deviations, because one pace serves the whole pod:

- it cuts at most once per bucket: every 429 of a pod cutting the rate
  would collapse it to the floor in a second (TCP reacts once per round
  trip);
- W_max is the measured *success* rate, what the upstream served (its
  capacity while it throttles), not botocore's send rate capped by the
  current rate, which compounds BETA on every cut. Every outcome moves
  its clock and a bucket without a success folds in as 0/s, so an
  upstream that stops serving decays W_max to the floor, as botocore's
  min(measured, current) would. Nothing ties a reported success to an
  admitted call, so once a bucket of the pace's own grants is measured
  (botocore's measured_tx_rate) the success rate is read as at most that.

The first throttle after `quiet` only arms it (the shared cool-down answers
that one); it switches off after `quiet` without a throttle (botocore's
stays on for good).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .clocker import BUCKET, Clock, bucket_of, tick
from .limits import MAX_RATE

__all__ = [
    "BETA",
    "MIN_RATE",
    "SCALE",
    "Learned",
    "granted",
    "learning",
    "observe",
    "rate",
    "served",
]

BETA = 0.7
SCALE = 0.4
MIN_RATE = 0.5


class Learned(NamedTuple):
    # CUBIC's W_max (0 = never cut), K, the last cut, the last throttle.
    w_max: float = 0.0
    k: float = 0.0
    cut_at: float = -math.inf
    throttled_at: float = -math.inf
    # Until when outcomes count in the bucket of the throttle that armed
    # the pace (its cool-down; see _cut).
    paused_until: float = -math.inf
    # The success rate, and the rate the learned pace granted.
    successes: Clock = Clock()
    grants: Clock = Clock()


def learning(learned: Learned, now: float, quiet: float) -> bool:
    """Whether the learned pace is in force at `now`."""
    return learned.w_max > 0.0 and now - learned.throttled_at < quiet


def rate(learned: Learned, now: float) -> float:
    """CUBIC's rate at `now`, floored and capped."""
    r = SCALE * (now - learned.cut_at - learned.k) ** 3 + learned.w_max
    r = min(r, 2.0 * _checked(learned, served(learned)), MAX_RATE)
    return max(r, MIN_RATE)


def served(learned: Learned) -> float:
    """The success rate: the smoothed one, or the current bucket's so far
    if more (a lower bound of its rate, which sees a change that began
    within the bucket); at least MIN_RATE."""
    return _served_rate(learned.successes)


def granted(learned: Learned, now: float) -> Learned:
    """`learned` after the learned pace granted a call at `now`."""
    return Learned(*learned[:6], tick(learned.grants, bucket_of(now), 1))


def observe(
    learned: Learned, now: float, quiet: float, success: bool, throttled: bool, hold: float
) -> Learned:
    """`learned` after one outcome at `now`; `hold`: a throttle's
    Retry-After (seconds, 0 = none), already bounded."""
    after = _measure(learned, now, 1 if success else 0)
    if throttled:
        after = _cut(learned, after, now, quiet, hold)
    return after


def _measure(learned: Learned, now: float, add: int) -> Learned:
    # Every outcome moves the clock, a failure adding 0.
    bucket = bucket_of(now)
    old = learned.successes
    if now < learned.paused_until:
        bucket = min(bucket, old.at)  # see _cut
    successes = tick(old, bucket, add)
    if successes is old:
        return learned
    learned = Learned(*learned[:5], successes, learned.grants)
    if old.at != -math.inf and bucket > old.at and learned.w_max > 0.0 and learned.cut_at >= old.at:
        # The bucket of the last cut is complete: its successes are what
        # the upstream served while it throttled, the reading the cut took
        # only a part of (the throttle came before the successes of the
        # same moment were reported). W_max rises to it, held to what the
        # pace granted as a cut is: otherwise successes no Admit granted
        # would lift it without bound.
        w_max = min(_checked(learned, old.events / BUCKET), MAX_RATE)
        if w_max > learned.w_max:
            learned = _with_w_max(learned, w_max)
    return learned


def _cut(before: Learned, learned: Learned, now: float, quiet: float, hold: float) -> Learned:
    # `before`: the state before this outcome; `learned`: after its measure.
    learned = learned._replace(throttled_at=now)
    if now - before.throttled_at >= quiet:
        # The first throttle after a quiet period only arms the pace: the
        # shared cool-down answers it, and one 429 among healthy calls is
        # no rate to learn from (it would pace the pod at the floor).
        learned = learned._replace(w_max=0.0)
        if hold:
            # The cool-down it starts stops the pod's calls: until it ends,
            # only the calls still out report, and a bucket of theirs would
            # read a fraction of what the upstream serves, so the first cut
            # after it would pace the pod far below it. They count in this
            # bucket.
            learned = learned._replace(paused_until=now + hold)
        return learned
    if now - before.cut_at < BUCKET:
        return learned
    # W_max: what the upstream served, as just measured; while learning, no
    # more than the pace granted.
    w_max = _served_rate(learned.successes)
    if learning(before, now, quiet):
        w_max = _checked(before, w_max)
    else:
        # A new episode: grants counted in an old one say nothing now.
        learned = learned._replace(grants=Clock())
    return _with_w_max(learned, min(w_max, MAX_RATE))._replace(cut_at=now)


def _with_w_max(learned: Learned, w_max: float) -> Learned:
    return learned._replace(w_max=w_max, k=(w_max * (1.0 - BETA) / SCALE) ** (1.0 / 3.0))


def _checked(learned: Learned, rate_served: float) -> float:
    """`rate_served`, learning, at most the rate the learned pace granted
    (once a whole bucket of its grants was measured)."""
    grants = learned.grants
    if grants.rate <= 0.0:
        return rate_served
    return max(min(rate_served, max(grants.rate, grants.events / BUCKET)), MIN_RATE)


def _served_rate(clock: Clock) -> float:
    return max(clock.rate, clock.events / BUCKET, MIN_RATE)
