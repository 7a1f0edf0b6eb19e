"""The rate learned from throttling: CUBIC, as the AWS SDKs' adaptive mode.

botocore/retries/throttling.py's CubicCalculator (BETA, SCALE), with
adaptive.py's RateClocker (squawk.policy.clocker) and bucket.py's floor
(MIN_RATE), the rate capped at twice the rate served. After a cut at
W_max, rate(t) = SCALE (t - K)^3 + W_max with K = cbrt(W_max (1 - BETA) /
SCALE), so it restarts at BETA W_max (past W_max it probes at PROBE).
docs/upstreams.md §Pacing (item 3) tells the rules; three deviations,
because one pace serves the whole pod:

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
- a cut after the first of an episode reads the capacity two ways: the
  successes of its bucket, which overstate it by what the upstream's own
  bucket had stored, and the successes since the last cut, plus what the
  pace held back below W_max, which understate it by what that bucket
  lost to overflow while the pace sent less; W_max is the middle. The
  bucket's reading alone put W_max 10-25 % over a token bucket's rate, so
  the pace met it again within two seconds of every cut.

The first throttle after `quiet` only arms it (the shared cool-down answers
that one); it switches off after `quiet` without a throttle (botocore's
stays on for good). A cool-down holds back every call the pod asks for
while it lasts, and all of them come back when it ends. So an arming
throttle with a Retry-After sets a release: from the cool-down's end, the
pace is the rate the upstream served before the throttle (the smoothed
rate of the buckets before it; the throttle's own bucket holds what the
upstream had stored, served on top of its rate), doubling every
RELEASE_DOUBLING seconds, as TCP's slow start after a timeout. A throttle
during the cool-down answers a call started before it, and does not cut;
the release's first throttle does, reading its cycle from the arming
throttle. Released at once, the held-back calls met an upstream that had
refilled one bucket: in the benchmark's 10x overload, 10-20 throttles in a
second, and a cut from them that paced the pod at 0.6 x C for seconds.

A throttle is not always a quota. An upstream overloaded for everyone (a
storm of 529 overloaded_error, a provider-wide 503) rejects a share of the
calls whatever their rate: cutting the pod's pace lowers what it serves and
not the share rejected, so every further throttle would cut again, down to
the floor, and shed the steps the retries would have completed (AWS's
adaptive mode collapses so on rate-independent throttling). A cut is
therefore a test: a quota's throttles stop once the pace is under it, so the
share of throttles among the outcomes after a cut (SETTLE after it, at least
JUDGED of them) must fall to under DROP of the share that prompted it. When
it does not, the throttles are not a capacity: the learned pace switches
off and, while throttles go on at about that share, stays off; the retry
policy, the retry budget and the breaker answer them. A share well above it
(a quota reached on top of the overload) cuts again.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .clocker import BUCKET, SMOOTHING, Clock, Tally, bucket_of, count, share, tick
from .limits import MAX_RATE

__all__ = [
    "BETA",
    "DROP",
    "JUDGED",
    "MIN_RATE",
    "ONSET",
    "OVERLOAD",
    "RELEASE_DOUBLING",
    "RISE",
    "SCALE",
    "SETTLE",
    "THROTTLES",
    "Learned",
    "granted",
    "in_force",
    "learning",
    "observe",
    "rate",
    "releasing",
    "served",
]

BETA = 0.7
SCALE = 0.4
MIN_RATE = 0.5
# A cut is judged on the outcomes reported from SETTLE after it (the calls
# started before it have answered and their batches are in): at least
# JUDGED of them, or THROTTLES throttles among them, the sooner (a test
# cut sheds while it lasts). A quota's share of throttles falls under DROP
# of the share that prompted the cut (to about none, the pace being under
# it); a random overload's stays where it was.
SETTLE = BUCKET / 2
JUDGED = 8
THROTTLES = 3
DROP = 0.5
RISE = 2.0
OVERLOAD = 0.3
# A share of throttles over the last two buckets (of 2 x JUDGED outcomes
# at least) REARM of the way from the overload's to all is a quota reached
# on top of it (at 0.5, 13 of 16 or more: once in 400 by chance).
REARM = 0.6
# A cut reads the capacity over the time since the last one once it is
# CYCLE long (see _cycle_rate); past W_max the curve probes for more at
# PROBE, not SCALE (see rate).
CYCLE = 2 * BUCKET
PROBE = 0.2
# An armed pace's release doubles every RELEASE_DOUBLING seconds (at most
# RELEASE_DOUBLINGS times: past that it no longer binds anything).
RELEASE_DOUBLING = 1.0
RELEASE_DOUBLINGS = 32
# A bucket that served ONSET times the rate before it held an overload's
# onset (see _before): by chance, at 10/s, once in thirty.
ONSET = 2.0


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
    # Throttles among the outcomes of the last two buckets; the first cut of
    # this episode (the test), the share of throttles that prompted it, and
    # the outcomes and throttles since (from SETTLE after it; None once
    # judged a quota).
    recent: Tally = Tally()
    tested_at: float = -math.inf
    cut_share: float = 0.0
    since_cut: tuple[int, int] | None = None
    # The share of throttles a cut did not lower (0 = none seen): the
    # upstream is overloaded, not full; and when the last such throttle came.
    overload: float = 0.0
    # The successes reported and the calls a pace granted since the last
    # cut (see _cycle_rate).
    cycle: tuple[int, int] = (0, 0)
    # The rate an armed pace releases the calls its cool-down held back at
    # (the success rate when it was armed; 0 = none, see in_force).
    release: float = 0.0
    # The last cut read a cycle, not only its bucket (see _measure).
    read_cycle: bool = False


def learning(learned: Learned, now: float, quiet: float) -> bool:
    """Whether the learned pace is in force at `now`."""
    return learned.w_max > 0.0 and now - learned.throttled_at < quiet


def in_force(learned: Learned, now: float, quiet: float) -> float:
    """The learned pace in force at `now` (calls/s; 0.0 = none): CUBIC's
    rate while learning, else an armed pace's release."""
    if now - learned.throttled_at >= quiet:
        return 0.0
    if learned.w_max > 0.0:
        return rate(learned, now)
    if learned.release > 0.0 and now >= learned.paused_until:
        # From the end of the cool-down on: the cool-down answers the
        # arming throttle (squawk.policy.upstream), the release what follows.
        doublings = min((now - learned.paused_until) / RELEASE_DOUBLING, RELEASE_DOUBLINGS)
        return min(learned.release * math.pow(2.0, doublings), MAX_RATE)
    return 0.0


def releasing(learned: Learned, now: float, quiet: float) -> bool:
    """Whether the learned pace in force at `now` is an armed pace's
    release (no cut has measured the upstream since the cool-down)."""
    return learned.w_max == 0.0 and in_force(learned, now, quiet) > 0.0


def rate(learned: Learned, now: float) -> float:
    """CUBIC's rate at `now`, floored and capped. Past W_max (a capacity
    measured, see _cut) the curve probes at PROBE: an upstream's bucket
    hides an overshoot for seconds, then throttles it all at once, and the
    gentler the probe the less it overshoots by then."""
    t = now - learned.cut_at - learned.k
    r = (SCALE if t < 0.0 else PROBE) * t**3 + learned.w_max
    r = min(r, 2.0 * _checked(learned, served(learned)), MAX_RATE)
    return max(r, MIN_RATE)


def served(learned: Learned) -> float:
    """The success rate: the smoothed one, or the current bucket's so far
    if more (a lower bound of its rate, which sees a change that began
    within the bucket); at least MIN_RATE."""
    return _served_rate(learned.successes)


def granted(learned: Learned, now: float, by_learned: bool) -> Learned:
    """`learned` after a pace granted a call at `now`; `by_learned`: the
    learned pace was the one in force."""
    successes, grants = learned.cycle
    if not by_learned:
        return learned._replace(cycle=(successes, grants + 1))
    return learned._replace(
        grants=tick(learned.grants, bucket_of(now), 1), cycle=(successes, grants + 1)
    )


def observe(
    learned: Learned, now: float, quiet: float, served: bool, throttled: bool, hold: float
) -> Learned:
    """`learned` after one outcome at `now`: `served` when the upstream
    answered it and no quota refused it (PaceSample.passed), `throttled`
    when a quota did; `hold`: a throttle's Retry-After (seconds, 0 = none),
    already bounded."""
    after = _measure(learned, now, 1 if served else 0)
    after = _tally(after, now, throttled)
    if throttled:
        after = _cut(learned, after, now, quiet, hold)
    return after


def overloaded(learned: Learned, now: float, quiet: float) -> bool:
    """Whether the upstream's throttles at `now` are an overload, not a
    quota: a cut did not lower their share, and they went on since."""
    return learned.overload > 0.0 and now - learned.throttled_at < quiet


def _tally(learned: Learned, now: float, throttled: bool) -> Learned:
    recent = count(learned.recent, bucket_of(now), throttled)
    since_cut = learned.since_cut
    if since_cut is not None and learned.w_max > 0.0 and now >= learned.tested_at + SETTLE:
        outcomes, throttles = since_cut
        since_cut = (outcomes + 1, throttles + throttled)
        if _judged(learned, since_cut):
            since_cut = None  # a quota: the test is over
    return learned._replace(recent=recent, since_cut=since_cut)


def _judged(learned: Learned, since_cut: tuple[int, int]) -> bool | None:
    """Whether the outcomes after the test cut say a quota, once they can
    be judged (None: not yet). An overload is THROTTLES throttles at about
    the share before the cut (from DROP to RISE of it), and at least
    OVERLOAD of the calls: a share that fell is a quota the cut brought the
    pace under, one that rose a capacity that fell, and a small one may be
    a quota the cut did not reach yet (its share before the cut read low:
    the cool-down of the first throttle refilled the bucket). With fewer
    throttles, JUDGED outcomes at a share under DROP of the one before, or
    4 x JUDGED at any share, say a quota: the throttles stopped."""
    outcomes, throttles = since_cut
    before = learned.cut_share
    after = throttles / outcomes if outcomes else 0.0
    if throttles >= THROTTLES:
        about = DROP * before <= after <= max(RISE * before, before + RISE / 10)
        return not (about and after >= OVERLOAD)
    if outcomes >= 4 * JUDGED or (outcomes >= JUDGED and after < DROP * before):
        return True
    return None


def _measure(learned: Learned, now: float, add: int) -> Learned:
    # Every outcome moves the clock, a failure adding 0.
    bucket = bucket_of(now)
    old = learned.successes
    if now < learned.paused_until:
        bucket = min(bucket, old.at)  # see _cut
    successes = tick(old, bucket, add)
    if successes is old:
        return learned
    done, grants = learned.cycle
    learned = learned._replace(successes=successes, cycle=(done + add, grants))
    if old.at != -math.inf and bucket > old.at and learned.w_max > 0.0 and learned.cut_at >= old.at:
        # The bucket of an episode's first cut is complete: its successes
        # are what the upstream served while it throttled, the reading the
        # cut took only a part of (the throttle came before the successes
        # of the same moment were reported, and the arming throttle's
        # cool-down kept them in it). W_max rises to it. Not held to the
        # grants: the calls of that bucket started before any learned pace
        # did; made-up successes can lift it only until the next throttle,
        # whose cut is held to what the pace granted. A later cut reads a
        # whole cycle (see _cut) and does not rise.
        w_max = min(old.events / BUCKET, MAX_RATE)
        if learned.cut_at == learned.tested_at and w_max > learned.w_max and not learned.read_cycle:
            learned = _with_w_max(learned, w_max)
    return learned


def _cut(before: Learned, learned: Learned, now: float, quiet: float, hold: float) -> Learned:
    # `before`: the state before this outcome; `learned`: after its measure.
    learned = learned._replace(throttled_at=now)
    now_share = share(learned.recent)
    if overloaded(before, now, quiet):
        rearm = before.overload + REARM * (1.0 - before.overload)
        heard = share(learned.recent, 2 * JUDGED)
        if heard is None or heard < rearm:
            return learned  # the overload goes on: not learned from
        learned = learned._replace(overload=0.0)  # a quota on top of it: cut
    elif learning(before, now, quiet):
        since_cut = learned.since_cut
        if since_cut is not None and _judged(before, since_cut) is False:
            # The cut did not lower the share of throttles: not a quota.
            outcomes, throttles = since_cut
            return learned._replace(w_max=0.0, overload=max(before.cut_share, throttles / outcomes))
    if now - before.throttled_at >= quiet:
        # The first throttle after a quiet period only arms the pace: the
        # shared cool-down answers it, and one 429 among healthy calls is
        # no rate to learn from (it would pace the pod at the floor).
        learned = learned._replace(
            w_max=0.0, paused_until=-math.inf, release=0.0, read_cycle=False, cycle=(0, 0)
        )
        if hold:
            # The cool-down it starts stops the pod's calls: until it ends,
            # only the calls still out report, and a bucket of theirs would
            # read a fraction of what the upstream serves, so the first cut
            # after it would pace the pod far below it. They count in this
            # bucket. The calls it holds back are released at the rate
            # served before it (see in_force), and the release's first cut
            # reads a cycle from this throttle, as from a cut (_cycle_rate).
            learned = learned._replace(
                paused_until=now + hold,
                release=_before(learned.successes),
                cut_at=now,
                grants=Clock(),
            )
        return learned
    if before.release and now < before.paused_until:
        # A call started before the cool-down: the upstream's answer to the
        # same moment as the throttle that armed the pace, not to its release.
        return learned._replace(paused_until=max(before.paused_until, now + hold))
    if now - before.cut_at < BUCKET:
        return learned
    # W_max: what the upstream served, as just measured; while learning, no
    # more than the pace granted.
    w_max = _served_rate(learned.successes)
    read_cycle = False
    if learning(before, now, quiet):
        # The bucket's reading is at least the capacity (what the upstream
        # had stored was served on top), the cycle's at most (what it
        # refilled while the pace sent less was lost when it overflowed):
        # the middle.
        w_max = _checked(before, w_max)
        w_max = min(w_max, (w_max + _cycle_rate(before, now, True)) / 2.0)
    else:
        # A new episode: grants counted in an old one say nothing now, and
        # its first cut is the test of the throttles (see _judged).
        learned = learned._replace(
            grants=Clock(),
            cut_share=now_share or 0.0,
            since_cut=(0, 0),
            tested_at=now,
        )
        if before.release:
            # The release met the upstream with nothing left, as the
            # arming throttle did: a cycle, read as a later cut reads one
            # (and not raised to its bucket after, see _measure).
            cycle = _cycle_rate(before, now, False)
            read_cycle = cycle < math.inf
            w_max = _checked(before, w_max)
            w_max = min(w_max, (w_max + cycle) / 2.0)
    return _with_w_max(learned, min(w_max, MAX_RATE))._replace(
        cut_at=now, cycle=(0, 0), release=0.0, read_cycle=read_cycle
    )


def _cycle_rate(learned: Learned, now: float, curve: bool) -> float:
    """What the upstream could serve, read over the time since the last
    cut, or since the throttle that armed the pace (`curve` False): the
    successes since (held to what the pace granted), plus what the curve
    itself held back below W_max while it climbed back to it. The last cut
    (or the arming throttle) and this one both met the upstream with
    nothing left, so what it refilled in between was served, or held back
    by the pace (and kept in its bucket, served later, or lost to a small
    one: counted once either way). A cut during the arming throttle's
    cool-down (with no release: nothing was measured before it) reads its
    cycle from the cool-down's end: nothing was sent, and the measure
    counts what reported meanwhile in the arming bucket. math.inf when the
    cycle is too short to say."""
    since = max(learned.cut_at, learned.paused_until) if curve else learned.cut_at
    elapsed = now - since
    if elapsed < CYCLE:
        return math.inf
    successes, grants = learned.cycle
    held_back = 0.0
    if curve:
        k = learned.k
        a, b = min(since - learned.cut_at, k), min(now - learned.cut_at, k)
        held_back = SCALE / 4.0 * ((k - a) ** 4 - (k - b) ** 4)
    return max((min(successes, grants) + held_back) / elapsed, MIN_RATE)


def _with_w_max(learned: Learned, w_max: float) -> Learned:
    return learned._replace(w_max=w_max, k=(w_max * (1.0 - BETA) / SCALE) ** (1.0 / 3.0))


def _checked(learned: Learned, rate_served: float) -> float:
    """`rate_served`, learning, at most the rate the learned pace granted
    (once a whole bucket of its grants was measured)."""
    grants = learned.grants
    if grants.rate <= 0.0:
        return rate_served
    return max(min(rate_served, max(grants.rate, grants.events / BUCKET)), MIN_RATE)


def _before(clock: Clock) -> float:
    """The success rate of the buckets before the current one, without the
    last of them if it served ONSET times what came before it; the current
    one's so far when none came before (a pod's first calls); 0.0 (no
    release) when no success was reported yet: nothing says what the
    upstream serves, and a release from the floor would hold a healthy
    upstream's pod under it for seconds.

    Such a bucket holds the overload's onset, whose first calls the
    upstream served from its store at once (an onset late in a bucket
    throttles in the next): read into the release, it started at 42/s
    against a true 20/s in one run of the benchmark's lying dialect, and
    met the refilled upstream at once, as the held-back calls did before
    there was a release. Not the lower of the two always: at 10/s, a half
    second's count varies by a third, and a release started low sheds the
    light tenants (squawk.policy.fair) its first seconds could serve."""
    last = (clock.rate - (1.0 - SMOOTHING) * clock.before) / SMOOTHING
    onset = clock.before > 0.0 and last > ONSET * clock.before
    measured = (clock.before if onset else clock.rate) or clock.events / BUCKET
    return max(measured, MIN_RATE) if measured else 0.0


def _served_rate(clock: Clock) -> float:
    return max(clock.rate, clock.events / BUCKET, MIN_RATE)
