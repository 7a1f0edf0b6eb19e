"""The pacer's rules (squawk.policy.pacer), as tables over a fake clock.

Every expected number is worked out from the rule in the comment beside
it: GCRA spaces starts by 1 / rate (burst - 1 of them may start early),
CUBIC is botocore's curve with its constants written out here (beta 0.7,
scale 0.4), and the queue's short limit is max(5 ms, 4 slots).
"""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squawk.policy import (
    BreakerConfig,
    Criticality,
    Outcome,
    Pacer,
    PaceSample,
    PaceSource,
    PolicyInputError,
    RateLimitConfig,
    Reason,
    UpstreamConfig,
    UpstreamState,
    admit,
    is_idle,
    observe,
    pace,
    pacer_is_idle,
    pacer_snapshot,
    record_outcome,
    upstream_snapshot,
)
from squawk.policy.clocker import BUCKET, Clock
from squawk.policy.cubic import Learned
from squawk.policy.pacer import hold_at_most
from squawk.policy.ratelimit import Quota, RateLimitHint

MS = timedelta(milliseconds=1)
NOTHING = RateLimitConfig()
OK = PaceSample(throttled=False, success=True, counted=True)
THROTTLED = PaceSample(throttled=True, success=False, counted=True)
# A success whose report named its live admission (granted at 0): only such
# an outcome reaches the concurrency limit.
ADMITTED = OK._replace(admitted_at=0.0)


def _waits(config: RateLimitConfig, times: list[float], pacer: Pacer | None = None) -> list[int]:
    """The wait (ms) each call gets, asked at `times`; -1 when refused."""
    pacer = Pacer() if pacer is None else pacer
    out = []
    for now in times:
        pacer, granted = pace(pacer, config, now)
        out.append(granted.wait // MS if granted.allowed else -1)
    return out


def test_a_fresh_pacer_starts_every_call_at_once_and_keeps_its_state() -> None:
    pacer = Pacer()
    after, granted = pace(pacer, NOTHING, 0.0)
    assert granted == (True, timedelta(0), None, 1, None)
    assert after is pacer  # nothing to write on the hot path
    assert pacer_snapshot(pacer, NOTHING, 0.0).source is PaceSource.NONE


@pytest.mark.parametrize(
    ("config", "times", "waits"),
    [
        # rate 10: one slot is 100 ms; burst 1: only the first starts at once.
        (RateLimitConfig(rate=10), [0.0] * 4, [0, 100, 200, 300]),
        # burst 3: three start together, then one per slot (the 4th at
        # tat 0.3 - tolerance 0.2 = 100 ms).
        (RateLimitConfig(rate=10, burst=3), [0.0] * 5, [0, 0, 0, 100, 200]),
        # After a pause the burst is back: tat 0.5 <= 1.0.
        (RateLimitConfig(rate=10, burst=3), [0.0] * 5 + [1.0] * 3, [0, 0, 0, 100, 200, 0, 0, 0]),
        # Calls spaced wider than a slot never wait.
        (RateLimitConfig(rate=10), [0.0, 0.1, 0.2, 0.35], [0, 0, 0, 0]),
    ],
    ids=["rate", "burst", "burst refills", "spaced"],
)
def test_a_declared_rate_spaces_the_starts(
    config: RateLimitConfig, times: list[float], waits: list[int]
) -> None:
    assert _waits(config, times) == waits


def test_a_token_rate_charges_the_estimate_then_the_real_cost() -> None:
    # 100 units/s, a burst of 100: cost 100 empties it (token tat 1.0).
    config = RateLimitConfig(token_rate=100, token_burst=100, max_queue_delay=timedelta(seconds=5))
    p, first = pace(Pacer(), config, 0.0, cost=100)
    assert first.wait == timedelta(0)
    # 50 more: start = 1.0 + 50/100 - 100/100 = 0.5 s.
    p, second = pace(p, config, 0.0, cost=50)
    assert second.wait == 500 * MS
    # The first really cost 20: 80 units (0.8 s) come back. tat 1.5 - 0.8 = 0.7,
    # so another 50 starts at 0.7 + 0.5 - 1.0 = 0.2 s.
    p = observe(p, config, 0.0, OK._replace(cost=20, estimated=100))
    p, third = pace(p, config, 0.0, cost=50)
    assert third.wait == 200 * MS
    # A call that sends no estimate is charged the mean real cost (20 so
    # far): tat 1.2 -> start 1.2 + 0.2 - 1.0 = 0.4 s.
    p, unknown = pace(p, config, 0.0)
    assert unknown.wait == 400 * MS


def test_an_overspend_holds_starts_for_at_most_the_longest_wait_and_one_burst() -> None:
    config = RateLimitConfig(token_rate=100, token_burst=100)
    p, _ = pace(Pacer(), config, 0.0, cost=1)
    p = observe(p, config, 0.0, OK._replace(cost=1e9, estimated=1))
    # Capped at now + max_queue_delay 1 s + burst 100 / 100 = 2.0; a call
    # of 1 unit starts at 2.0 + 0.01 - 1.0 = 1.01 s, past the 1 s queue.
    assert not pace(p, config, 0.0, cost=1)[1].allowed
    assert pace(p, config, 0.02, cost=1)[1].wait == 990 * MS


def _hint(
    limit: float | None,
    remaining: float | None,
    reset: float | None,
    window: float | None = None,
    tokens: Quota | None = None,
    *,
    refills: bool = False,
) -> RateLimitHint:
    def td(value: float | None) -> timedelta | None:
        return None if value is None else timedelta(seconds=value)

    return RateLimitHint(Quota(limit, remaining, td(reset), td(window), refills), tokens)


# A window is paced at HEADER_HEADROOM = 0.95 of what it allows; a bucket
# at the least it refills, remaining being rounded down: (used - 1) / reset.
@pytest.mark.parametrize(
    ("hint", "rate"),
    [
        # A bucket that refills: (100 - 10 - 1) / 10 s, whatever is left.
        (_hint(100, 10, 10, refills=True), 8.9),
        (_hint(100, 40, 6, refills=True), 59 / 6),
        # The same numbers from a window that starts over: 10 left for 10 s.
        (_hint(100, 10, 10), 0.95 * 1.0),
        # A window early on: 4990 left over 3590 s.
        (_hint(5000, 4990, 3590), 0.95 * 4990 / 3590),
        # IETF RateLimit-Policy's window: 100 per 60 s beats 50 left for 100 s.
        (_hint(100, 50, 100, window=60), 0.95 * 100 / 60),
        # Only remaining and reset (no limit): 30 / 2 s.
        (_hint(None, 30, 2), 0.95 * 15.0),
        # Barely anything over a day: the floor of one call an hour,
        # spaced at most the hold bound apart (max_cool_down, 5 min).
        (_hint(None, 1, 86_400 * 5), 1 / 300),
    ],
    ids=[
        "bucket",
        "bucket mostly used",
        "window",
        "fixed window",
        "ietf window",
        "no limit",
        "floor",
    ],
)
def test_a_quota_in_the_headers_paces_the_upstream(hint: RateLimitHint, rate: float) -> None:
    p = observe(Pacer(), NOTHING, 0.0, OK._replace(hint=hint))
    view = pacer_snapshot(p, NOTHING, 0.0)
    assert view.source is PaceSource.HEADERS
    assert view.rate == pytest.approx(rate)


def test_a_header_pace_spaces_starts_and_lapses_after_quiet() -> None:
    # One call left: a burst of 1 (0.95 x 1, at least one), so starts are
    # spaced from the first (with more left they start together, below).
    p = observe(Pacer(), NOTHING, 0.0, OK._replace(hint=_hint(100, 1, 10, refills=True)))
    # (100 - 1 - 1) / 10 s = 9.8/s: slots of 102.04 ms, rounded up to whole ms.
    assert _waits(NOTHING, [0.0, 0.0, 0.0], p) == [0, 103, 205]
    assert pacer_snapshot(p, NOTHING, 29.999).source is PaceSource.HEADERS
    assert pacer_snapshot(p, NOTHING, 30.0).source is PaceSource.NONE
    assert pacer_is_idle(p, NOTHING, 30.0)


def test_a_header_pace_starts_what_the_quota_has_left_at_once() -> None:
    # GitHub: 4,900 of 5,000 left for an hour: 0.95 x 4900 / 3600 = 1.293/s,
    # and a burst of what that pace leaves of the 4,900 by the reset:
    # floor(4900 - 1.293 x 3600) = 245. A burst of 100 calls with 30 s
    # deadlines all start at once (a burst of 1 refused 96 of them).
    github = _hint(5000, 4900, 3600)
    p = observe(Pacer(), NOTHING, 0.0, OK._replace(hint=github))
    for _ in range(100):
        p, granted = pace(p, NOTHING, 0.0, deadline=timedelta(seconds=30))
        assert (granted.allowed, granted.wait) == (True, timedelta(0))
    # 3 left for 10 s: 0.285/s (slots of 3.509 s), which sends 2.85 of the 3
    # by the reset: no burst beyond the one start (a burst of 2 on top of
    # the pace would spend more than is left); the second start is a slot
    # later, past the 1 s queue.
    p = observe(Pacer(), NOTHING, 0.0, OK._replace(hint=_hint(100, 3, 10)))
    assert _waits(NOTHING, [0.0, 0.0, 0.0], p) == [0, -1, -1]


@pytest.mark.parametrize(
    ("max_cool_down", "held"),
    # The hold of a quota with nothing left: its 307 s reset, capped at the
    # upstream's max_cool_down (and at the 5 min the default and MAX_HOLD allow).
    [(timedelta(seconds=5), 5.0), (timedelta(minutes=5), 300.0), (timedelta(hours=1), 300.0)],
)
def test_nothing_remaining_holds_for_at_most_the_max_cool_down(
    max_cool_down: timedelta, held: float
) -> None:
    config = UpstreamConfig(max_cool_down=max_cool_down)
    spent = Outcome(True, hint=_hint(5000, 0, 307))
    state = record_outcome(UpstreamState(), config, 0.0, spent)
    assert admit(state, config, held - 1.001)[1].reason is Reason.UPSTREAM_SATURATED
    _, granted = admit(state, config, held)
    assert (granted.allowed, granted.wait) == (True, timedelta(0))


def test_nothing_remaining_holds_every_start_until_the_reset() -> None:
    p = observe(Pacer(), NOTHING, 0.0, THROTTLED._replace(hint=_hint(100, 0, 2)))
    refused = pace(p, NOTHING, 0.0)[1]
    assert not refused.allowed  # 2 s is past the 1 s queue
    assert pace(p, NOTHING, 1.5)[1].wait == 500 * MS


def test_an_empty_bucket_holds_starts_until_one_call_refills() -> None:
    # (101 - 0 - 1) / 2 s = 50/s: one call is back in 20 ms, not at the reset.
    p = observe(Pacer(), NOTHING, 0.0, THROTTLED._replace(hint=_hint(101, 0, 2, refills=True)))
    assert pace(p, NOTHING, 0.0)[1].wait == 20 * MS


def test_a_bucket_is_paced_at_the_largest_bound_read_within_a_second() -> None:
    def read(p: Pacer, now: float, remaining: float, reset: float) -> tuple[float, Pacer]:
        hint = _hint(100, remaining, reset, refills=True)
        p = observe(p, NOTHING, now, OK._replace(hint=hint))
        return pacer_snapshot(p, NOTHING, now).rate, p

    rate, p = read(Pacer(), 0.0, 40, 6)  # (60 - 1) / 6 s
    assert rate == pytest.approx(59 / 6)
    rate, p = read(p, 0.5, 45, 6)  # (55 - 1) / 6 s, lower: the first still holds
    assert rate == pytest.approx(59 / 6)
    rate, p = read(p, 1.6, 40, 12)  # 1.1 s after the last: (60 - 1) / 12 s
    assert rate == pytest.approx(59 / 12)


def test_a_full_bucket_says_nothing_of_its_rate() -> None:
    # Full, one used, or half: none of them is what limits the calls now.
    for full in (
        _hint(100, 100, 0, refills=True),
        _hint(100, 99, 0.01, refills=True),
        _hint(100, 50, 0.5, refills=True),
    ):
        p = observe(Pacer(), NOTHING, 0.0, OK._replace(hint=full))
        assert pacer_snapshot(p, NOTHING, 0.0).source is PaceSource.NONE


def test_a_token_quota_paces_by_cost() -> None:
    tokens = Quota(50_001, 0, timedelta(seconds=0.5), None, refills=True)
    hint = RateLimitHint(requests=None, tokens=tokens)
    p = observe(Pacer(), NOTHING, 0.0, OK._replace(hint=hint))
    view = pacer_snapshot(p, NOTHING, 0.0)
    # (50001 - 0 - 1) / 0.5 s; one token is back within a millisecond.
    assert (view.source, view.rate, view.token_rate) == (PaceSource.HEADERS, 0.0, 100_000)
    assert view.queue_delay <= MS
    # A burst of one second of tokens: two calls of 50,000 start at once,
    # the third when 50,000 more are back, 0.5 s later.
    waits = []
    for _ in range(3):
        p, granted = pace(p, NOTHING, 0.001, cost=50_000)
        waits.append(granted.wait)
    assert waits == [timedelta(0), timedelta(0), 500 * MS]


# CUBIC with AWS's constants for W_max = 10: K = cbrt(10 * (1 - 0.7) / 0.4)
# = cbrt(7.5) = 1.9574 s; rate(t) = 0.4 (t - K)^3 + 10.
K = 7.5 ** (1 / 3)


def _learned() -> Pacer:
    # Five successes in the bucket [0, 0.5): at least 5 / 0.5 = 10/s served;
    # the 429 at 0.2 arms the pacer, the one at 0.25 cuts with W_max = 10.
    p = Pacer()
    for _ in range(5):
        p = observe(p, NOTHING, 0.0, OK)
    p = observe(p, NOTHING, 0.2, THROTTLED)
    assert pacer_snapshot(p, NOTHING, 0.2).source is PaceSource.NONE
    return observe(p, NOTHING, 0.25, THROTTLED)


@pytest.mark.parametrize(
    ("after", "rate"),
    [
        (0.0, 7.0),  # beta x W_max
        (1.0, 10 - 0.4 * (K - 1) ** 3),  # 9.649
        (K, 10.0),  # back at W_max after K
        (K + 1, 10.2),  # past it, probing at 0.2: 0.2 x 1 + 10
        (K + 2, 11.6),  # 0.2 x 8 + 10
    ],
)
def test_the_learned_rate_follows_cubic_with_awss_constants(after: float, rate: float) -> None:
    view = pacer_snapshot(_learned(), NOTHING, 0.25 + after)
    assert view.source is PaceSource.LEARNED
    assert view.rate == pytest.approx(rate)


def test_the_learned_rate_is_capped_at_twice_the_success_rate() -> None:
    # K + 4: 0.2 * 64 + 10 = 22.8, over 2 x 10/s served.
    assert pacer_snapshot(_learned(), NOTHING, 0.25 + K + 4).rate == pytest.approx(20.0)


def test_the_pod_cuts_at_most_once_per_bucket() -> None:
    p = observe(_learned(), NOTHING, 0.5, THROTTLED)  # 0.25 s after the cut: no new cut
    assert pacer_snapshot(p, NOTHING, 1.25).rate == pytest.approx(10 - 0.4 * (K - 1) ** 3)
    # 0.55 s after: a cut. The 429 at 0.5 folded the bucket [0, 0.5), 5
    # successes = 10/s, into the smoothed rate: 0.8 x 10 = 8/s, so W_max 8.
    p = observe(p, NOTHING, 0.8, THROTTLED)
    assert pacer_snapshot(p, NOTHING, 0.8).rate == pytest.approx(0.7 * 8)


def test_a_cut_reads_what_the_upstream_served_not_the_rate_it_was_sent() -> None:
    # An upstream serving 10/s (a success every 0.1 s) and throttling the
    # rest. Each success entering a new bucket folds the last one: 6 / 0.5
    # = 12/s at 0.5 (it counts itself), then 5 / 0.5 = 10/s at 1.0, 1.5, 2.0:
    # smoothed 0.8 x 12 = 9.6, 9.92, 9.984, 9.9968. The 429 at 0.85 arms;
    # those at 1.45 and 2.05 cut from what was served: W_max 9.9968, so the
    # rate restarts at 0.7 x 9.9968 = 6.998. Cutting from the rate sent
    # (botocore's min(measured, current)) would compound beta: 4.9.
    p = Pacer()
    events = [(i / 10, OK) for i in range(21)] + [(t, THROTTLED) for t in (0.85, 1.45, 2.05)]
    for at, sample in sorted(events, key=lambda e: e[0]):
        p = observe(p, NOTHING, at, sample)
    assert pacer_snapshot(p, NOTHING, 2.05).rate == pytest.approx(0.7 * 9.9968)


def test_made_up_successes_do_not_lift_a_learned_pace() -> None:
    # Cut at 0.25 with W_max 10 (_learned). Grants at 0.5..0.9 count 5 in
    # the bucket [0.5, 1.0); the one at 1.0 folds 6 / 0.5 = 12/s, smoothed
    # from 0: 0.8 x 12 = 9.6/s granted.
    p = _learned()
    for at in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0):
        p, granted = pace(p, NOTHING, at)
        assert granted.allowed
    # One caller reports 1,000 successes at 1.05: 1998/s in [1.0, 1.5),
    # smoothed to 1599.36/s, far above what was admitted.
    for _ in range(1000):
        p = observe(p, NOTHING, 1.05, OK)
    # The 429 at 1.5 cuts from the success rate capped at the 9.6/s
    # granted, and from the 1.25 s since the last cut: the 6 calls granted
    # (not the 1,000 successes) plus what the pace held back below W_max 10
    # in that time, 0.1 x (K^4 - (K - 1.25)^4); the middle of the two.
    # Not 0.7 x 1599.36 = 1119.6/s.
    held_back = 0.1 * (K**4 - (K - 1.25) ** 4)
    w_max = (9.6 + (6 + held_back) / 1.25) / 2
    p = observe(p, NOTHING, 1.5, THROTTLED)
    assert w_max < 9.6
    assert pacer_snapshot(p, NOTHING, 1.5).rate == pytest.approx(0.7 * w_max)
    # And the curve stays within twice the rate granted: at K + 4 after
    # the cut, 0.2 x 64 + W_max is capped at 2 x 9.6 = 19.2.
    k = (w_max * 0.3 / 0.4) ** (1 / 3)
    assert 0.2 * 64 + w_max > 19.2
    assert pacer_snapshot(p, NOTHING, 1.5 + k + 4).rate == pytest.approx(19.2)


def test_a_cut_read_mid_bucket_rises_to_the_whole_bucket() -> None:
    # Three successes at 0.0; a bare 429 at 0.1 arms, the one at 0.2 cuts
    # from the 3 / 0.5 = 6/s the bucket [0, 0.5) had then. Four more
    # successes of that moment report after it (0.3..0.45): once the bucket
    # is complete (the success at 0.5 folds it), W_max rises to its 7 / 0.5
    # = 14/s, and the curve runs from the cut with K = cbrt(14 x 0.3 / 0.4).
    p = Pacer()
    for _ in range(3):
        p = observe(p, NOTHING, 0.0, OK)
    p = observe(observe(p, NOTHING, 0.1, THROTTLED), NOTHING, 0.2, THROTTLED)
    assert pacer_snapshot(p, NOTHING, 0.2).rate == pytest.approx(0.7 * 6)
    for at in (0.3, 0.35, 0.4, 0.45):
        p = observe(p, NOTHING, at, OK)
    p = observe(p, NOTHING, 0.5, OK)
    k = (14 * 0.3 / 0.4) ** (1 / 3)
    assert pacer_snapshot(p, NOTHING, 0.5).rate == pytest.approx(0.4 * (0.3 - k) ** 3 + 14)
    # A later bucket never lowers it: the next, with one success (2/s),
    # leaves W_max at 14; the rate is capped at twice the success rate,
    # 2 x (0.8 x 2 + 0.2 x 0.8 x 16) = 8.32.
    p = observe(p, NOTHING, 1.0, OK)
    assert p.learned.w_max == pytest.approx(14)
    assert pacer_snapshot(p, NOTHING, 1.0).rate == pytest.approx(8.32)


COOLING = PaceSample(True, False, True, retry_after=timedelta(seconds=1))


def _onset() -> Pacer:
    # Five successes in [0, 0.5), one at 0.5 folding them (6 / 0.5 = 12/s,
    # smoothed 0.8 x 12 = 9.6/s); 429s with Retry-After: 1 s at 0.6 (arming,
    # and cooling the pod until 1.6) and 0.65 (a call started before it,
    # still out: the cool-down until 1.65).
    p = Pacer()
    for at in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5):
        p = observe(p, NOTHING, at, OK)
    return observe(observe(p, NOTHING, 0.6, COOLING), NOTHING, 0.65, COOLING)


def test_the_cool_down_s_calls_are_released_at_the_rate_served_doubling() -> None:
    # The onset of an overload as the benchmark's executors met it: the
    # cool-down holds back every call, and all of them ask again when it
    # ends. The throttle during it does not cut (its call started before
    # it). From its end the pace releases them at the 9.6/s served before
    # the arming throttle, doubling each second, until a throttle cuts it:
    # before, they went out at once into an upstream that had refilled
    # one bucket, and 10-20 were throttled.
    p = _onset()
    assert p.learned.w_max == 0.0
    assert pacer_snapshot(p, NOTHING, 1.0).source is PaceSource.NONE
    for at, rate in ((1.65, 9.6), (2.65, 19.2), (3.15, 9.6 * 2**1.5)):
        view = pacer_snapshot(p, NOTHING, at)
        assert view.source is PaceSource.LEARNED
        assert view.rate == pytest.approx(rate)
    # Past `quiet` (30 s) after the last throttle it is off.
    assert pacer_snapshot(p, NOTHING, 30.65).source is PaceSource.NONE


@pytest.mark.parametrize(
    ("onset", "release"),
    # Ten: the bucket read 28/s; two: 12/s, within Poisson's noise at 10/s.
    [(10, 9.984), (2, 0.8 * 12 + 0.2 * 9.984)],
)
def test_a_bucket_that_held_the_onset_does_not_set_the_release(onset: int, release: float) -> None:
    # 10 successes a second from 0 to 1.9 (a bucket folds when the next
    # one's first success comes: 6, 5 and 5 of them, the smoothed rate
    # 9.6, 9.92, 9.984/s), then the overload's onset at 1.95: calls the
    # upstream served from its store at once, late in the bucket, and its
    # first 429 (Retry-After: 1 s) at 2.02, in the next. Ten of them make
    # the bucket read 28/s, over twice what came before: the release starts
    # at the 9.984/s served before it, not at the 24.4/s the bucket folds
    # into (0.8 x 28 + 0.2 x 9.984), which met the refilled upstream with
    # more than it serves. Two are a count's noise, and fold in as usual.
    p = Pacer()
    for i in range(20):
        p = observe(p, NOTHING, i / 10, OK)
    for i in range(onset):
        p = observe(p, NOTHING, 1.95 + i / 1000, OK)
    p = observe(p, NOTHING, 2.02, COOLING)
    view = pacer_snapshot(p, NOTHING, 3.02)
    assert view.source is PaceSource.LEARNED
    assert view.rate == pytest.approx(release)


def test_a_release_reserves_two_slots_at_most() -> None:
    # Every caller the cool-down held asks at its end: the release (9.6/s,
    # doubling) grants the first at once and the next a slot later, none
    # past two slots; the rest are refused, to come back at their turn. A start reserved further out
    # would go out after the throttle that ends the release, into an
    # upstream with nothing left. Once a cut measured the upstream, the
    # pace's queue is the usual one again.
    p = _onset()
    waits = []
    for _ in range(20):
        p, answer = pace(p, NOTHING, 1.7)
        if answer.allowed:
            waits.append(answer.wait.total_seconds())
    assert len(waits) >= 2
    assert max(waits) <= 2 / 9.6
    for i in range(16):
        p = observe(p, NOTHING, 1.7 + i / 20, OK)
    p = observe(p, NOTHING, 2.5, THROTTLED)
    assert p.learned.w_max > 0.0
    waits = []
    for _ in range(20):
        p, answer = pace(p, NOTHING, 2.6)
        if answer.allowed:
            waits.append(answer.wait.total_seconds())
    assert len(waits) > 3


def test_no_release_when_no_success_was_ever_reported() -> None:
    # A pod's first outcome is a 429 with Retry-After: nothing says what the
    # upstream serves, and a release from the 0.5/s floor would hold its
    # calls far under it for seconds. After the cool-down nothing paces.
    p = observe(Pacer(), NOTHING, 0.0, COOLING)
    assert pacer_snapshot(p, NOTHING, 1.5).source is PaceSource.NONE


def test_a_header_pace_spaces_the_calls_a_cool_down_held_not_a_release() -> None:
    # The headers announce 500 left of 1,000, refilled within 1 s: the
    # pace is theirs (475/s). A 429 with Retry-After arms the learned pace; after the
    # cool-down the headers' pace still spaces the calls, not a release
    # from the rate served before (which had read the demand, not the quota).
    hinted = OK._replace(hint=_hint(1000, 500, 1.0))
    p = Pacer()
    for at in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5):
        p = observe(p, NOTHING, at, hinted)
    assert pacer_snapshot(p, NOTHING, 0.55).source is PaceSource.HEADERS
    p = observe(p, NOTHING, 0.6, COOLING)
    assert p.learned.release > 0.0
    view = pacer_snapshot(p, NOTHING, 1.7)
    assert (view.source, view.rate) == (PaceSource.HEADERS, 475.0)


def test_a_throttle_whose_headers_say_the_quota_is_unused_discredits_them() -> None:
    # An upstream whose headers lie (a huge quota, nearly all left, reset
    # in 1 s) paces nothing real: 950,000/s. When a call the pod admitted
    # is answered 429 with the same headers, they do not describe the limit that throttled (a lie,
    # or GitHub's secondary limits): after the cool-down the release
    # paces the calls, at the 9.6/s served before, not the headers; each
    # further reading leaves them doubted until `quiet` (30 s) after the
    # throttle. Before, the calls the cool-down held went out at 950,000/s.
    lie = _hint(1_000_000, 999_999, 1.0)
    hinted = OK._replace(hint=lie)
    p = Pacer()
    for at in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5):
        p = observe(p, NOTHING, at, hinted)
    assert pacer_snapshot(p, NOTHING, 0.55).source is PaceSource.HEADERS
    # A 429 no admission names (anyone's report) leaves them in force.
    unadmitted = observe(p, NOTHING, 0.6, COOLING._replace(hint=lie))
    assert pacer_snapshot(unadmitted, NOTHING, 1.7).source is PaceSource.HEADERS
    p = observe(p, NOTHING, 0.6, COOLING._replace(hint=lie, admitted_at=0.55))
    p = observe(p, NOTHING, 1.7, hinted)
    view = pacer_snapshot(p, NOTHING, 1.7)
    assert view.source is PaceSource.LEARNED
    assert view.rate == pytest.approx(9.6 * 2**0.1)
    p = observe(p, NOTHING, 30.7, hinted)
    assert pacer_snapshot(p, NOTHING, 30.7).source is PaceSource.HEADERS


def test_the_release_s_first_cut_reads_its_cycle_from_the_arming_throttle() -> None:
    # Armed at 0 (the cool-down until 1), the release granted 44 calls and
    # 40 succeeded by 3.0, when a throttle cuts. Its bucket reads 28/s
    # (what the upstream had stored in the cool-down was served on top);
    # the 3 s since the arming throttle read 40 / 3 = 13.3/s: both met an
    # upstream with nothing left. W_max is the middle, and a bucket that
    # completes after it with more successes does not raise it (the first
    # cut of an episode read from its bucket alone does: see
    # test_a_cut_read_mid_bucket_rises_to_the_whole_bucket).
    learned = Learned(
        cut_at=0.0,
        throttled_at=0.0,
        paused_until=1.0,
        release=10.0,
        successes=Clock(at=3.0, events=0, rate=28.0),
        grants=Clock(at=3.0, events=0, rate=30.0),
        cycle=(40, 44),
    )
    p = observe(Pacer(learned=learned), NOTHING, 3.0, THROTTLED)
    middle = (28 + 40 / 3) / 2
    assert p.learned.w_max == pytest.approx(middle)
    for _ in range(20):
        p = observe(p, NOTHING, 3.1, OK)
    p = observe(p, NOTHING, 3.5, OK)
    assert p.learned.w_max == pytest.approx(middle)


def test_made_up_successes_in_the_cool_down_lift_neither_the_release_nor_its_cut() -> None:
    # As the onset above, but one caller reports 1,000 successes during the
    # cool-down: the release is what was served before the throttle, and
    # the release's cut is held to what the pace granted since.
    p = _onset()
    for _ in range(1000):
        p = observe(p, NOTHING, 1.0, OK)
    assert pacer_snapshot(p, NOTHING, 1.65).rate == pytest.approx(9.6)
    granted = 0
    at = 1.65
    while at < 3.2:
        p, answer = pace(p, NOTHING, at)
        if answer.allowed:
            granted += 1
            p = observe(p, NOTHING, at + answer.wait.total_seconds(), OK)
        at += 0.05
    p = observe(p, NOTHING, 3.2, THROTTLED)
    assert 0.0 < p.learned.w_max <= granted / BUCKET


def test_a_later_cut_takes_the_middle_of_its_bucket_and_its_cycle() -> None:
    # A cut at 0 at W_max 20 (K = cbrt(15)); 4 s later a throttle, the
    # bucket then reading 28/s: the upstream's bucket had stored calls, so
    # 28 overstates its rate. Over those 4 s the pace granted 84 calls and
    # 80 succeeded; below W_max it held back 0.1 x K^4 (its climb from 14
    # back to 20): (80 + 0.1 x K^4) / 4 understates the rate by what an
    # upstream's bucket lost to overflow meanwhile. W_max is the middle.
    k = 15 ** (1 / 3)
    learned = Learned(
        w_max=20.0,
        k=k,
        cut_at=0.0,
        throttled_at=0.0,
        successes=Clock(at=4.0, events=0, rate=28.0),
        cycle=(80, 84),
    )
    p = observe(Pacer(learned=learned), NOTHING, 4.0, THROTTLED)
    cycle = (80 + 0.1 * k**4) / 4
    assert cycle < 28
    assert p.learned.w_max == pytest.approx((28 + cycle) / 2)


def test_the_cool_down_of_the_arming_throttle_keeps_its_calls_in_its_bucket() -> None:
    # Five successes in [0, 0.5); the 429 at 0.45 arms and cools the pod for
    # its Retry-After, 1 s. Three calls still out succeed at 0.6, then one
    # throttles at 0.65: they count in the arming bucket (8 successes), not
    # in a bucket of their own that would read 3 / 0.5 = 6/s, and the
    # throttle, a call started before the cool-down, cuts nothing.
    p = Pacer()
    for at in (0.0, 0.1, 0.2, 0.3, 0.4):
        p = observe(p, NOTHING, at, OK)
    p = observe(p, NOTHING, 0.45, COOLING)
    for _ in range(3):
        p = observe(p, NOTHING, 0.6, OK)
    p = observe(p, NOTHING, 0.65, COOLING)
    assert (p.learned.successes.at, p.learned.successes.events) == (0.0, 8)
    assert p.learned.w_max == 0.0


def test_a_silent_stretch_is_no_reading() -> None:
    # 10/s measured and 5 successes in the bucket [0, 0.5); nothing reports
    # until 2.0 (say, a cool-down). That success folds the bucket as 6 / 0.5
    # = 12/s (botocore counts the folding call in), smoothed 0.8 x 12 + 0.2
    # x 10 = 11.6/s, not as 6 over the 2 s since (3/s): no call, no reading.
    p = Pacer(learned=Learned(successes=Clock(at=0.0, events=5, rate=10.0)))
    assert observe(p, NOTHING, 2.0, OK).learned.successes.rate == pytest.approx(11.6)


def test_a_learned_rate_decays_to_the_floor_once_nothing_succeeds() -> None:
    # 50/s served, then only 429s, one per bucket. Each bucket without a
    # success folds in as 0/s: measured 50 -> 0.2 x 50 = 10 -> 2 -> 0.4,
    # and each cut sets W_max to it (floored at 0.5): the rate restarts at
    # 0.7 x W_max, floored at 0.5/s. The first cut, 1.5 s after the last,
    # also reads that time: no success, and what the pace held back below
    # W_max 50 (K = cbrt(37.5)), 0.1 x (K^4 - (K - 1.5)^4) over 1.5 s; it
    # takes the middle of that and 10.
    k = 37.5 ** (1 / 3)
    learned = Learned(w_max=50.0, k=k, throttled_at=0.0, cut_at=-1.0, successes=Clock(0.0, 0, 50.0))
    p = Pacer(learned=learned)
    rates = []
    for at in (0.5, 1.0, 1.5):
        p = observe(p, NOTHING, at, THROTTLED)
        rates.append(pacer_snapshot(p, NOTHING, at).rate)
    cycle = 0.1 * (k**4 - (k - 1.5) ** 4) / 1.5
    assert cycle < 10
    assert rates == pytest.approx([0.7 * (10 + cycle) / 2, 1.4, 0.5])


def test_the_floor_when_nothing_was_served() -> None:
    # No success ever: W_max is the 0.5/s floor, and so is the rate.
    p = observe(observe(Pacer(), NOTHING, 0.0, THROTTLED), NOTHING, 0.0, THROTTLED)
    assert pacer_snapshot(p, NOTHING, 0.0).rate == pytest.approx(0.5)


def test_the_learned_rate_switches_off_after_quiet() -> None:
    p = _learned()
    assert pacer_snapshot(p, NOTHING, 30.24).source is PaceSource.LEARNED
    assert not pacer_is_idle(p, NOTHING, 30.24)
    assert pacer_snapshot(p, NOTHING, 30.25).source is PaceSource.NONE
    assert pacer_is_idle(p, NOTHING, 30.25)
    assert pace(p, NOTHING, 30.25)[1] == (True, timedelta(0), None, 1, None)


def test_learning_off_or_a_declared_rate_learns_nothing() -> None:
    off = RateLimitConfig(learn=False)
    twice = observe(observe(Pacer(), off, 0.0, THROTTLED), off, 0.0, THROTTLED)
    assert pacer_snapshot(twice, off, 0.0).source is PaceSource.NONE
    declared = RateLimitConfig(rate=5)
    twice = observe(observe(Pacer(), declared, 0.0, THROTTLED), declared, 0.0, THROTTLED)
    view = pacer_snapshot(twice, declared, 0.0)
    assert (view.source, view.rate) == (PaceSource.POLICY, 5.0)


def test_starts_are_fifo_between_executors() -> None:
    # rate 10: executor A asks three times at 0, B once at 0.05: B starts
    # after A's three (at 0.3 s, so it waits 250 ms), and A's fourth after B.
    config = RateLimitConfig(rate=10)
    p = Pacer()
    starts = []
    for who, now in [("a", 0.0), ("a", 0.0), ("a", 0.0), ("b", 0.05), ("a", 0.05)]:
        p, granted = pace(p, config, now)
        starts.append((who, round(now + granted.wait / timedelta(seconds=1), 3)))
    assert starts == [("a", 0.0), ("a", 0.1), ("a", 0.2), ("b", 0.3), ("a", 0.4)]


@pytest.mark.parametrize(
    ("deadline_ms", "allowed"),
    [(50, False), (100, False), (101, True), (None, True)],
)
def test_a_start_past_the_deadline_is_refused_at_once(
    deadline_ms: int | None, allowed: bool
) -> None:
    config = RateLimitConfig(rate=10)
    p, _ = pace(Pacer(), config, 0.0)
    deadline = None if deadline_ms is None else deadline_ms * MS
    after, answer = pace(p, config, 0.0, deadline=deadline)
    assert answer.allowed is allowed
    if not allowed:
        assert answer.wait == timedelta(0) and answer.permits == 0
        # No slot reserved: the next call gets the 100 ms the refused one would have.
        assert pace(after, config, 0.0)[1].wait == 100 * MS


def test_the_queue_turns_short_once_it_stays_busy() -> None:
    config = RateLimitConfig(rate=10)  # max_queue_delay 1 s
    p = Pacer()
    # At 0: waits of 0..1000 ms fit the 1 s queue; the 12th (1.1 s) does not.
    assert _waits(config, [0.0] * 12, p)[-2:] == [1000, -1]
    for _ in range(10):
        p, _ = pace(p, config, 0.0)
    # At 0.05 the queue has been busy 50 ms: still the long limit, and the
    # start at tat 1.0 (a 950 ms wait) fits it.
    p, granted = pace(p, config, 0.05)
    assert granted.wait == 950 * MS
    # At 0.15, busy for 100 ms: the short limit, max(5 ms, 4 x 100 ms) =
    # 400 ms, refuses the 950 ms wait (tat 1.1) that the long one would grant.
    assert not pace(p, config, 0.15)[1].allowed
    p, granted = pace(p, config, 0.75)
    assert granted.wait == 350 * MS
    # Once the queue drained (tat 1.2), the next call starts at once.
    assert pace(p, config, 1.3)[1].wait == timedelta(0)


def test_the_queue_turns_short_only_when_every_call_waited_past_the_target() -> None:
    # CoDel's rule. rate 10: slots of 100 ms, a short limit of max(5 ms,
    # 4 x 100 ms) = 400 ms, the long one 1 s.
    config = RateLimitConfig(rate=10)
    calls = [
        # Five at 0 wait 0..400 ms: the queue is busy, but no call waited
        # past 400 ms, so no interval has begun.
        *[(0.0, w) for w in (0, 100, 200, 300, 400)],
        # At 0.15 (busy 150 ms): 350 ms fits; the next, 450 ms, is the first
        # past the short limit: its interval begins, and the long limit grants it.
        (0.15, 350),
        (0.15, 450),
        (0.2, 500),  # 50 ms into the interval: still the long limit
        # 150 ms of calls all past 400 ms: the short queue is on; 500 > 400.
        (0.3, -1),
        # Waits of 300 and 350 ms fit the short queue, and it stays on: the
        # 450 ms that follows is refused (it leaves only when empty).
        (0.5, 300),
        (0.6, 300),
        (0.65, 350),
        (0.65, -1),
        # At 1.2 the queue is found empty (its last start was 1.0): off, so
        # a burst waits up to 500 ms again.
        *[(1.2, w) for w in (0, 100, 200, 300, 400, 500)],
    ]
    p = Pacer()
    waits = _waits(config, [t for t, _ in calls], p)
    assert waits == [w for _, w in calls]


def test_refused_callers_are_told_their_turn_jittered_upwards() -> None:
    config = RateLimitConfig(rate=10)
    p = Pacer()
    for _ in range(11):
        p, _ = pace(p, config, 0.0)
    # The first refused: its start would be 1.1 s; its turn comes a slot
    # later, 1.2 s; the second refused 1.3 s: refused callers queue too.
    p1, first = pace(p, config, 0.0)
    _, second = pace(p1, config, 0.0)
    assert (first.retry_after, second.retry_after) == (1200 * MS, 1300 * MS)
    # cooldown.spread: up to a fifth more, never less.
    waits = {pace(p, config, 0.0, rng=random.Random(seed))[1].retry_after for seed in range(50)}
    assert all(1200 * MS <= w <= 1440 * MS for w in waits if w is not None)
    assert len(waits) > 10


def test_permits_only_when_nothing_limits() -> None:
    assert pace(Pacer(), NOTHING, 0.0, permits=5)[1] == (True, timedelta(0), None, 5, None)
    assert pace(Pacer(), RateLimitConfig(rate=100), 0.0, permits=5)[1].permits == 1
    assert pace(_learned(), NOTHING, 0.3, permits=5)[1].permits == 1
    state, granted = admit(UpstreamState(), UpstreamConfig(), 0.0, permits=100)
    assert (granted.permits, granted.lease) == (100, 200 * MS)
    # One ratio-budget deposit per answer, not per permit: permits not yet
    # used are no calls, so the window holds one first call.
    assert state.budget.window.first == 1
    with pytest.raises(PolicyInputError, match="permits"):
        admit(UpstreamState(), UpstreamConfig(), 0.0, permits=101)


def test_unused_permits_earn_no_retries() -> None:
    # The default ratio budget: retries <= 20 % of the first calls in 10 s,
    # plus a floor of 10 a second (100 over the 10 s window). 10 answers of
    # 100 permits are 10 deposits: 0.2 x 10 + 100 = 102 retries, not the
    # 0.2 x 1000 + 100 = 300 a deposit per permit would allow.
    config = UpstreamConfig()
    state = UpstreamState()
    for _ in range(10):
        state, granted = admit(state, config, 0.0, permits=100)
        assert granted.permits == 100
    assert upstream_snapshot(state, config, 0.0).retries_left == 102


def test_a_half_open_breaker_grants_one_permit() -> None:
    config = UpstreamConfig(BreakerConfig(minimum_calls=1, open_for=timedelta(seconds=1)))
    state = record_outcome(UpstreamState(), config, 0.0, Outcome(False, 503))
    _, probe = admit(state, config, 1.0, permits=10)
    assert (probe.probe, probe.permits, probe.lease) == (True, 1, None)


def test_a_probe_the_pacer_refuses_takes_no_probe_slot() -> None:
    breaker = BreakerConfig(minimum_calls=1, open_for=timedelta(seconds=1), half_open_probes=1)
    config = UpstreamConfig(breaker, rate_limit=RateLimitConfig(rate=1))
    state, _ = admit(UpstreamState(), config, 0.0)
    state = record_outcome(state, config, 0.0, Outcome(False, 503))
    # Half-open at 1.0; the pace's next start is 1.0 too, then 2.0: the
    # second call's 1 s wait passes its 500 ms deadline.
    state, probe = admit(state, config, 1.0)
    assert probe.probe and probe.wait == timedelta(0)
    state = record_outcome(state, config, 1.0, Outcome(False, 499))  # not counted: slot back
    state, refused = admit(state, config, 1.0, deadline=500 * MS)
    assert refused.reason is Reason.UPSTREAM_SATURATED
    # The one probe slot is still free for a call the pace can start
    # (at 1.5, within the round, with the 500 ms left of its slot).
    _, later = admit(state, config, 1.5)
    assert (later.allowed, later.probe, later.wait) == (True, True, 500 * MS)


def test_admit_refuses_upstream_saturated_after_the_breaker() -> None:
    config = UpstreamConfig(rate_limit=RateLimitConfig(rate=1))
    state, _ = admit(UpstreamState(), config, 0.0)
    state, refused = admit(state, config, 0.0, deadline=500 * MS)
    assert (refused.allowed, refused.reason, refused.permits) == (
        False,
        Reason.UPSTREAM_SATURATED,
        0,
    )
    _, paced = admit(state, config, 0.0, deadline=2000 * MS)
    assert (paced.allowed, paced.wait) == (True, 1000 * MS)


def test_a_throttle_cools_the_pod_only_until_the_pacer_learned() -> None:
    config = UpstreamConfig()
    throttled = Outcome(False, 429, retry_after=timedelta(seconds=1))
    state = record_outcome(UpstreamState(), config, 0.0, throttled)
    assert admit(state, config, 0.5)[1].reason is Reason.UPSTREAM_COOLING_DOWN
    # One 429 only armed the pacer: after the cool-down nothing paces.
    assert admit(state, config, 1.0)[1].allowed
    assert not is_idle(state, config, 1.0)  # armed until quiet passes
    assert is_idle(state, config, 30.0)
    # The second teaches a rate (the 0.5/s floor: nothing served), and that
    # pace, not a second cool-down, answers it: one start now, the next 2 s
    # later, past the queue's limit, so refused as saturated.
    state = record_outcome(state, config, 1.0, throttled)
    state, first = admit(state, config, 1.5)
    assert first.allowed and first.wait == timedelta(0)
    assert admit(state, config, 1.5)[1].reason is Reason.UPSTREAM_SATURATED
    # Learned now: the next 429's Retry-After is the pacer's to answer.
    state = record_outcome(state, config, 2.0, throttled)
    state, paced = admit(state, config, 2.0)
    assert paced.reason is Reason.UPSTREAM_SATURATED  # the pace's answer, not a cool-down
    assert not is_idle(state, config, 31.9)
    # Under a declared rate a 429 says the declaration is wrong: it cools.
    declared = UpstreamConfig(rate_limit=RateLimitConfig(rate=100))
    state = record_outcome(UpstreamState(), declared, 0.0, throttled)
    state = record_outcome(state, declared, 0.5, throttled)
    assert admit(state, declared, 1.2)[1].reason is Reason.UPSTREAM_COOLING_DOWN


def test_a_cool_down_ends_into_the_release_not_a_herd() -> None:
    # Five successes at 0.0 (10/s, the pod's first bucket); the 429 at 0.05
    # (Retry-After 1 s) arms the pace and cools the pod until 1.05; one at
    # 0.1 (a call still out) until 1.1. Meanwhile every call is refused as
    # cooling down; from 1.1 the calls start 1 / 10 s apart, the third past
    # the queue's 1 s limit refused at once as saturated only later.
    config = UpstreamConfig()
    throttled = Outcome(False, 429, retry_after=timedelta(seconds=1))
    state = UpstreamState()
    for _ in range(5):
        state = record_outcome(state, config, 0.0, Outcome(True))
    state = record_outcome(state, config, 0.05, throttled)
    state = record_outcome(state, config, 0.1, throttled)
    assert admit(state, config, 0.2)[1].reason is Reason.UPSTREAM_COOLING_DOWN
    assert admit(state, config, 1.09)[1].reason is Reason.UPSTREAM_COOLING_DOWN
    waits = []
    for _ in range(3):
        state, answer = admit(state, config, 1.1, deadline=timedelta(seconds=10))
        assert answer.allowed
        waits.append(answer.wait)
    assert waits == [timedelta(0), 100 * MS, 200 * MS]


def test_a_short_cool_down_holds_the_sheddable_calls_not_the_critical_ones() -> None:
    # A 429 with Retry-After 1 s cools the pod. While a sheddable call asks
    # within the last second, a critical one takes the lane through the
    # cool-down (one start per answer); with no sheddable call asking, or a
    # cool-down past CLOSED_AFTER (the upstream closed), it is refused too.
    config = UpstreamConfig()
    cooled = record_outcome(
        UpstreamState(), config, 0.0, Outcome(False, 429, retry_after=timedelta(seconds=1))
    )
    _, alone = admit(cooled, config, 0.1, criticality=Criticality.CRITICAL)
    assert alone.reason is Reason.UPSTREAM_COOLING_DOWN
    state, shed = admit(cooled, config, 0.1, criticality=Criticality.SHEDDABLE)
    assert shed.reason is Reason.UPSTREAM_COOLING_DOWN
    _, critical = admit(state, config, 0.2, criticality=Criticality.CRITICAL, permits=8)
    assert (critical.allowed, critical.permits) == (True, 1)
    closed = record_outcome(
        UpstreamState(), config, 0.0, Outcome(False, 429, retry_after=timedelta(seconds=60))
    )
    state, _ = admit(closed, config, 0.1, criticality=Criticality.SHEDDABLE)
    _, refused = admit(state, config, 0.2, criticality=Criticality.CRITICAL)
    assert refused.reason is Reason.UPSTREAM_COOLING_DOWN


def test_a_closed_upstreams_cool_down_stays_a_cool_down_when_a_cut_follows() -> None:
    # Retry-After 300 s arms the pace and closes the upstream; a 1 s one cuts.
    # Past CLOSED_AFTER a throttle cools the pod even under a learned pace.
    config = UpstreamConfig()
    state = record_outcome(
        UpstreamState(), config, 0.0, Outcome(False, 429, retry_after=timedelta(seconds=300))
    )
    state = record_outcome(
        state, config, 0.1, Outcome(False, 429, retry_after=timedelta(seconds=1))
    )
    assert admit(state, config, 10.0)[1].reason is Reason.UPSTREAM_COOLING_DOWN


def test_a_hold_is_shortened_to_a_lower_cap_and_never_lengthened() -> None:
    # A quota spent for 30 s holds every start until then.
    p = observe(Pacer(), NOTHING, 0.0, THROTTLED._replace(hint=_hint(100, 0, 30.0)))
    assert p.quota.hold_until == 30.0
    assert hold_at_most(p, 10.0).quota.hold_until == 10.0
    assert hold_at_most(p, 200.0) is p


@pytest.mark.parametrize(
    ("retry_after_s", "cools"),
    # Past 2 s the upstream is closed, not full: the pod cools for it.
    [(1.0, False), (2.0, False), (2.001, True), (60.0, True)],
)
def test_a_long_retry_after_cools_the_pod_even_under_a_learned_pace(
    retry_after_s: float, cools: bool
) -> None:
    config = UpstreamConfig()
    state = UpstreamState(pacer=_learned())
    assert upstream_snapshot(state, config, 0.5).pace.source is PaceSource.LEARNED
    wait = timedelta(seconds=retry_after_s)
    state = record_outcome(state, config, 0.5, Outcome(False, 429, retry_after=wait))
    _, answer = admit(state, config, 0.5)
    if cools:
        assert (answer.reason, answer.retry_after) == (Reason.UPSTREAM_COOLING_DOWN, wait)
    else:
        assert answer.allowed


def test_a_throttle_that_carries_its_quota_is_answered_by_the_pacer_not_a_cool_down() -> None:
    config = UpstreamConfig()
    empty = _hint(21, 0, 0.5, refills=True)  # (21 - 0 - 1) / 0.5 = 40/s, nothing left
    throttled = Outcome(False, 429, hint=empty)
    state = record_outcome(UpstreamState(), config, 0.0, throttled)
    # No stop for the pod: the next start waits for one call to refill,
    # 1 / 40 s = 25 ms.
    state, paced = admit(state, config, 0.0)
    assert (paced.allowed, paced.wait) == (True, 25 * MS)
    # The same 429 without its quota, under that header pace, says the
    # headers' 40/s is too much: the learned pace cuts (to its floor, as
    # nothing was served), the lower pace is in force, and it answers the
    # throttle instead of a 1 s stop for the pod.
    bare = Outcome(False, 429, retry_after=timedelta(seconds=1))
    state = record_outcome(state, config, 0.1, bare)
    view = upstream_snapshot(state, config, 0.5)
    assert (view.pace.source, view.pace.rate) == (PaceSource.LEARNED, 0.5)
    state, first = admit(state, config, 0.5)
    assert first.allowed  # then one every 2 s: the next is past the 1 s queue
    assert admit(state, config, 0.5)[1].reason is Reason.UPSTREAM_SATURATED


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize(
    "quota",
    [_hint(5000, 4990, 3590), _hint(21, 0, 0.5, refills=True)],
    ids=["not spent", "spent"],
)
def test_a_throttles_retry_after_wins_over_the_quota_it_carries(
    status: int, quota: RateLimitHint
) -> None:
    # GitHub's secondary limits: a 403/429 with Retry-After: 60 while
    # x-ratelimit-remaining is not 0. "If the retry-after response header
    # is present, you should not retry your request until after that many
    # seconds has elapsed" (docs.github.com, "Rate limits for the REST
    # API"): the pod cools for it, as the fleet's store does
    # (squawk.policy.fleet.outcome), whatever the quota says.
    config = UpstreamConfig()
    throttled = Outcome(False, status, retry_after=timedelta(seconds=60), hint=quota)
    state = record_outcome(UpstreamState(), config, 0.0, throttled)
    refused = admit(state, config, 59.9)[1]
    assert (refused.allowed, refused.reason) == (False, Reason.UPSTREAM_COOLING_DOWN)
    assert admit(state, config, 60.0)[1].reason is not Reason.UPSTREAM_COOLING_DOWN


def test_headers_a_throttle_contradicted_are_no_unspent_quota() -> None:
    # The benchmark's lying dialect: every answer claims 999,999 of a
    # million left, and its 429s carry Retry-After: 1. The first throttle
    # cools the pod for its Retry-After (it arms the learned pace, and the
    # quota it carries is not spent: GitHub's secondary limits, above), and
    # discredits the headers (test_a_throttle_whose_headers_say_...). The
    # next one, in the release, is the learned pace's to answer, as a 429
    # without headers would be: headers already contradicted say nothing
    # of why the upstream refuses. Before, each of them stopped the pod for
    # a second, and each stop's release drew more throttles.
    config = UpstreamConfig()
    lie = _hint(1_000_000, 999_999, 1.0)
    throttled = Outcome(False, 429, retry_after=timedelta(seconds=1), hint=lie)
    state = UpstreamState()
    for i in range(10):
        state = record_outcome(state, config, i / 10, Outcome(True, hint=lie))
    state = record_outcome(state, config, 1.0, throttled, admitted_at=0.99)
    assert admit(state, config, 1.5)[1].reason is Reason.UPSTREAM_COOLING_DOWN
    state = record_outcome(state, config, 2.5, throttled, admitted_at=2.49)
    view = upstream_snapshot(state, config, 2.6)
    assert view.pace.source is PaceSource.LEARNED
    assert admit(state, config, 2.6)[1].reason is not Reason.UPSTREAM_COOLING_DOWN
    # A Retry-After past CLOSED_AFTER still cools the pod: the upstream is
    # closed, not full, whatever its headers.
    closed = Outcome(False, 429, retry_after=timedelta(seconds=60), hint=lie)
    state = record_outcome(state, config, 3.0, closed, admitted_at=2.99)
    assert admit(state, config, 3.1)[1].reason is Reason.UPSTREAM_COOLING_DOWN


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"rate": math.nan}, "rate"),
        ({"rate": math.inf}, "rate"),
        ({"rate": 0.0}, "rate"),
        ({"rate": -1.0}, "rate"),
        ({"rate": 1e7}, "rate"),
        # Below one a day: 1 / rate would overflow every wait.
        ({"rate": 1e-300}, "rate"),
        ({"rate": 1 / 86_400 * 0.99}, "rate"),
        ({"token_rate": 1e-300}, "token_rate"),
        ({"burst": 0}, "burst"),
        ({"burst": 10**7}, "burst"),
        ({"token_rate": 1e10}, "token_rate"),
        ({"token_rate": math.nan}, "token_rate"),
        ({"token_burst": -1.0}, "token_burst"),
        ({"quiet": timedelta(0)}, "quiet"),
        ({"max_queue_delay": timedelta(days=8)}, "max_queue_delay"),
    ],
)
def test_a_config_out_of_bounds_names_its_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(PolicyInputError) as info:
        RateLimitConfig(**fields)  # type: ignore[arg-type]
    assert info.value.field == field


def test_the_least_rates_pace_without_overflowing_a_wait() -> None:
    # One call a day: the second call's start is a day away under a hold
    # bound (max_cool_down) of a day, past the 1 s queue: refused, not a
    # crash.
    day = timedelta(days=1)
    calls = RateLimitConfig(rate=1 / 86_400, burst=1)
    p, first = pace(Pacer(), calls, 0.0, max_hold=day)
    assert first.wait == timedelta(0)
    p, second = pace(p, calls, 0.0, max_hold=day)
    assert not second.allowed
    assert pacer_snapshot(p, calls, 0.0, max_hold=day).queue_delay == day
    # One token unit a day and a burst of 1e9: a second call of 1e9 units
    # would start 1e9 days away, which no timedelta holds (the start is
    # capped at 14 days: refused).
    tokens = RateLimitConfig(token_rate=1 / 86_400, token_burst=1e9)
    p, first = pace(Pacer(), tokens, 0.0, cost=1e9)
    assert first.allowed
    p, second = pace(p, tokens, 0.0, cost=1e9)
    assert not second.allowed


@pytest.mark.parametrize(
    "outcome",
    [
        Outcome(True, cost=math.nan),
        Outcome(True, cost=-1.0),
        Outcome(True, estimated=2e9),
        Outcome(True, latency=-MS),
    ],
)
def test_an_outcome_out_of_bounds_names_its_field(outcome: Outcome) -> None:
    with pytest.raises(PolicyInputError):
        record_outcome(UpstreamState(), UpstreamConfig(), 0.0, outcome)


@pytest.mark.parametrize(
    "quota",
    [
        Quota(math.nan, None, timedelta(seconds=1), None),
        Quota(10, math.nan, timedelta(seconds=1), None),
        Quota(10, -5, timedelta(seconds=1), None),
        Quota(10, math.inf, timedelta(seconds=1), None),
        Quota(math.inf, 0, timedelta(0), None),
        Quota(None, None, None, None),
        Quota(-1, 0, timedelta(seconds=-5), timedelta(seconds=-1)),
    ],
)
def test_a_hostile_quota_is_ignored(quota: Quota) -> None:
    p = observe(Pacer(), NOTHING, 0.0, OK._replace(hint=RateLimitHint(quota, quota)))
    assert pacer_snapshot(p, NOTHING, 0.0).source is PaceSource.NONE


def test_a_reset_far_away_holds_for_at_most_five_minutes() -> None:
    far = Quota(1e300, 0, timedelta(days=10**5), None)
    p = observe(Pacer(), NOTHING, 0.0, THROTTLED._replace(hint=RateLimitHint(far, far)))
    assert not pace(p, NOTHING, 298.9)[1].allowed
    granted = pace(p, NOTHING, 300.0)[1]
    assert granted.allowed and granted.wait == timedelta(0)
    assert pacer_snapshot(p, NOTHING, 330.0).source is PaceSource.NONE


_EVENTS = st.lists(
    st.tuples(
        st.floats(0, 5),  # time step
        st.sampled_from(["pace", "ok", "throttled", "hint"]),
        st.floats(0, 1e9),  # cost, or a quota's number
        st.one_of(st.none(), st.integers(0, 5000)),  # deadline ms
    ),
    max_size=60,
)
_CONFIGS = st.sampled_from(
    [
        NOTHING,
        RateLimitConfig(rate=50, burst=10),
        RateLimitConfig(token_rate=1000, rate=5),
        RateLimitConfig(max_queue_delay=timedelta(milliseconds=100)),
    ]
)


@settings(max_examples=200, deadline=None)
@given(_CONFIGS, _EVENTS)
def test_waits_stay_within_their_bounds_and_no_pace_is_stuck(
    config: RateLimitConfig, events: list[tuple[float, str, float, int | None]]
) -> None:
    p, now = Pacer(), 0.0
    rng = random.Random(0)
    for step, kind, number, deadline_ms in events:
        now += step
        if kind == "pace":
            deadline = None if deadline_ms is None else deadline_ms * MS
            p, answer = pace(p, config, now, cost=number, deadline=deadline, rng=rng)
            if answer.allowed:
                assert timedelta(0) <= answer.wait <= config.max_queue_delay
                assert deadline is None or not answer.wait or answer.wait < deadline
            else:
                assert answer.retry_after is not None
                assert timedelta(0) < answer.retry_after <= timedelta(minutes=6)
        elif kind == "hint":
            quota = Quota(number, number / 2, timedelta(seconds=number % 100), None)
            p = observe(p, config, now, OK._replace(hint=RateLimitHint(quota, quota)))
        else:
            sample = OK if kind == "ok" else THROTTLED
            p = observe(p, config, now, sample._replace(cost=number % 1e6))
        view = pacer_snapshot(p, config, now)
        assert view.source is PaceSource.NONE or view.rate or view.token_rate or view.queue_delay
    # Left alone past quiet and the longest hold, only a declared rate paces,
    # and a call starts within the queue.
    later = now + 30 + 300 + 2
    assert pacer_snapshot(p, config, later).source in {PaceSource.NONE, PaceSource.POLICY}
    assert pace(p, config, later, cost=1)[1].allowed


def _slowing(config: RateLimitConfig = NOTHING) -> Pacer:
    """Ten 100 ms successes at 0 (baseline = fast mean = 0.1 s; 10 / 0.5 s
    = 20/s served so far), then two of 1 s. The first: fast mean 0.1 +
    0.1 x 0.9 = 0.19, not past 2 x baseline 0.1. The second: fast 0.19 +
    0.1 x 0.81 = 0.271, past 2 x 0.109: the limit switches on at 0.9 x
    (22/s served x 0.271 s) = 5.366, i.e. 5 calls."""
    p = Pacer()
    for _ in range(10):
        p = observe(p, config, 0.0, ADMITTED._replace(latency=100 * MS))
    p = observe(p, config, 0.1, ADMITTED._replace(latency=1000 * MS))
    assert pacer_snapshot(p, config, 0.1).concurrency_limit == 0
    return observe(p, config, 0.2, ADMITTED._replace(latency=1000 * MS))


def test_a_healthy_upstream_gets_no_concurrency_limit() -> None:
    p = Pacer()
    for i in range(100):
        p = observe(p, NOTHING, i / 10, ADMITTED._replace(latency=(100 + i % 30) * MS))
    assert pacer_snapshot(p, NOTHING, 10.0).concurrency_limit == 0
    assert pacer_is_idle(p, NOTHING, 10.0)


def test_microsecond_calls_that_double_by_noise_get_no_concurrency_limit() -> None:
    """A baseline of 20 us, then 50 calls of 100 us: five times the baseline
    (the fast mean passes 2 x the baseline after a few), but 80 us later
    than it, under SLOW_MIN (10 ms): no limit, so no call is shed."""
    p = Pacer()
    for _ in range(10):
        p = observe(p, NOTHING, 0.0, ADMITTED._replace(latency=timedelta(microseconds=20)))
    for i in range(50):
        p = observe(p, NOTHING, i / 100, ADMITTED._replace(latency=timedelta(microseconds=100)))
    assert pacer_snapshot(p, NOTHING, 0.5).concurrency_limit == 0
    assert all(pace(p, NOTHING, 0.5)[1].allowed for _ in range(10))
    # Calls of 21 ms over a 1 ms baseline: the n-th makes the fast mean
    # 21 - 20 x 0.9^n ms, judged against the baseline before it, 21 - 20 x
    # 0.99^(n-1): at n = 7, 11.43 - 2.17 = 9.26 ms past it; at n = 8, 12.39
    # - 2.36 = 10.03 ms: the limit switches on at the eighth (MIN_LIMIT, 2).
    q = Pacer()
    for _ in range(10):
        q = observe(q, NOTHING, 0.0, ADMITTED._replace(latency=1 * MS))
    for i in range(7):
        q = observe(q, NOTHING, i / 100, ADMITTED._replace(latency=21 * MS))
    assert pacer_snapshot(q, NOTHING, 0.07).concurrency_limit == 0
    q = observe(q, NOTHING, 0.07, ADMITTED._replace(latency=21 * MS))
    assert pacer_snapshot(q, NOTHING, 0.07).concurrency_limit == 2


def test_aimd_switches_on_when_the_upstream_slows_down() -> None:
    p = _slowing()
    view = pacer_snapshot(p, NOTHING, 0.2)
    assert (view.concurrency_limit, view.in_flight) == (5, 0)
    for _ in range(5):
        p, granted = pace(p, NOTHING, 0.3)
        assert granted.allowed and granted.wait == timedelta(0)
    p, full = pace(p, NOTHING, 0.3)
    # A slot frees about every 0.271 / 5.37 = 50 ms: at least 100 ms.
    assert (full.allowed, full.retry_after) == (False, 100 * MS)
    # A fast success with 5 in flight (>= half of 5.37): +1, and one fewer in flight.
    # (Admitted at 0.3, after the limit came on at 0.2: its slot is counted.)
    p = observe(p, NOTHING, 0.4, ADMITTED._replace(latency=100 * MS, admitted_at=0.3))
    assert pacer_snapshot(p, NOTHING, 0.4)[4:] == (6, 4)
    # A slow one 0.3 s after the last decrease: not again within a bucket;
    # at 0.8: x 0.9 -> 5.73, i.e. 5.
    p = observe(p, NOTHING, 0.5, ADMITTED._replace(latency=1000 * MS, admitted_at=0.3))
    assert pacer_snapshot(p, NOTHING, 0.5).concurrency_limit == 6
    p = observe(p, NOTHING, 0.8, ADMITTED._replace(latency=1000 * MS, admitted_at=0.3))
    assert pacer_snapshot(p, NOTHING, 0.8)[4:] == (5, 2)
    # Switched off after quiet without a slow call.
    assert pacer_snapshot(p, NOTHING, 30.79).concurrency_limit == 5
    assert pacer_snapshot(p, NOTHING, 30.8)[4:] == (0, 0)
    assert pace(p, NOTHING, 30.8)[1].allowed


def test_calls_never_reported_leave_the_count_after_two_epochs() -> None:
    config = RateLimitConfig(quiet=timedelta(hours=1))
    p = _slowing(config)  # the count's epoch starts at 0.2
    for _ in range(5):
        p, _ = pace(p, config, 0.3)
    assert not pace(p, config, 120.3)[1].allowed  # one epoch on: still counted
    assert pace(p, config, 240.2)[1].allowed  # two: forgotten


def test_concurrency_off_learns_no_limit() -> None:
    off = RateLimitConfig(concurrency=False)
    assert pacer_snapshot(_slowing(off), off, 0.2).concurrency_limit == 0


# -- the hold bound: no start spaced past the upstream's max_cool_down -------

# A generic quota (x-ratelimit-remaining: 1, x-ratelimit-reset: 86400) that
# does not refill: 0.95 x 1 / 86400 /s, raised to the floor of one call an
# hour (MIN_HEADER_RATE).
LIE = _hint(None, 1, 86_400)
# A true reading: 4000 of 5000 left for 2000 s, 0.95 x 2 = 1.9 calls/s.
TRUE = _hint(5000, 4000, 2000)


def _calls(state: UpstreamState, config: UpstreamConfig, start: float, end: float) -> int:
    """Calls granted to an executor that asks every 0.1 s from `start` to
    `end` and reports each as a success with the true headers."""
    granted, now = 0, start
    while now < end:
        state, answer = admit(state, config, now)
        if answer.allowed:
            granted += 1
            state = record_outcome(state, config, now, Outcome(True, hint=TRUE))
        now = round(now + 0.1, 6)
    return granted


def test_a_header_rate_read_wrong_once_costs_one_slot_of_the_true_one() -> None:
    config = UpstreamConfig()
    truth = record_outcome(UpstreamState(), config, 0.0, Outcome(True, hint=TRUE))
    lied = record_outcome(UpstreamState(), config, 0.0, Outcome(True, hint=LIE))
    lied, first = admit(lied, config, 0.0)
    assert first.allowed
    # The next success's true headers take over at once: the one call the
    # lie reserved is one slot of 1.9/s, not an hour. Over 90 s the lie
    # costs that one slot, a call or two, not 172 of 175 calls.
    lied = record_outcome(lied, config, 0.0, Outcome(True, hint=TRUE))
    honest = _calls(truth, config, 0.0, 90.0)
    assert _calls(lied, config, 0.1, 90.0) >= honest - 2


@pytest.mark.parametrize("max_cool_down", [60.0, 300.0, 3600.0])
def test_a_header_pace_never_spaces_starts_past_the_max_cool_down(max_cool_down: float) -> None:
    # The lie keeps coming: the pace of one call an hour is one call per
    # max_cool_down (and never past the 5 min a header's hold is held to).
    bound = min(max_cool_down, 300.0)
    config = UpstreamConfig(
        max_cool_down=timedelta(seconds=max_cool_down),
        rate_limit=RateLimitConfig(quiet=timedelta(hours=2)),
    )
    state = record_outcome(UpstreamState(), config, 0.0, Outcome(True, hint=LIE))
    state, first = admit(state, config, 0.0)
    assert first.allowed
    state = record_outcome(state, config, 0.0, Outcome(True, hint=LIE))
    _, refused = admit(state, config, bound - 1.001)
    assert refused.reason is Reason.UPSTREAM_SATURATED
    assert refused.retry_after is not None and refused.retry_after <= timedelta(seconds=bound)
    _, granted = admit(state, config, bound)
    assert granted.allowed


def test_a_lie_nothing_contradicts_holds_no_longer_than_its_reading() -> None:
    # The first two answers both lie (one call left for a day) and the pod
    # sends nothing more, so no true reading comes: the pace the lie set
    # lapses `quiet` after it, and so does every start it spaced. It held
    # the upstream for max_cool_down (5 min) before.
    config = UpstreamConfig()
    quiet = config.rate_limit.quiet.total_seconds()
    state = record_outcome(UpstreamState(), config, 0.0, Outcome(True, hint=LIE))
    state, first = admit(state, config, 0.0)
    assert first.allowed
    state = record_outcome(state, config, 0.1, Outcome(True, hint=LIE))
    state, refused = admit(state, config, 1.0)
    assert refused.reason is Reason.UPSTREAM_SATURATED
    assert refused.retry_after is not None
    assert refused.retry_after <= timedelta(seconds=quiet * 1.2)  # with its jitter
    _, granted = admit(state, config, 0.1 + quiet)
    assert granted.allowed and granted.wait == timedelta(0)


def _policy_rate(rate: float) -> UpstreamConfig:
    return UpstreamConfig(rate_limit=RateLimitConfig(rate=rate))


def test_a_reload_re_derives_the_reservations_under_the_new_rate() -> None:
    # `rate: 100`, a reload with a typo (`rate: 0.0000116`, a call a day)
    # fixed 5 s later: the call the typo's pace granted is one slot of 100/s
    # once the fix is in force, not a day.
    right, typo = _policy_rate(100), _policy_rate(0.0000116)
    state, _ = admit(UpstreamState(), right, 0.0)
    state, during = admit(state, typo, 1.0)
    assert during.allowed
    state, after = admit(state, right, 6.0)
    assert after.allowed and after.wait <= 10 * MS
    # ... and the next second starts its 100 calls: 5 ms apart, 10 ms slots.
    granted = 0
    for i in range(200):
        state, answer = admit(state, right, 6.0 + 0.005 * (i + 1))
        granted += answer.allowed
    assert granted >= 99


def test_a_declared_rate_slower_than_one_call_per_max_cool_down_spaces_by_it() -> None:
    # The typo left in force: one call per max_cool_down (5 min), not a day.
    typo = _policy_rate(0.0000116)
    state, first = admit(UpstreamState(), typo, 0.0)
    assert first.allowed
    _, refused = admit(state, typo, 298.9)
    assert refused.reason is Reason.UPSTREAM_SATURATED
    assert refused.retry_after is not None and refused.retry_after <= timedelta(minutes=5)
    assert admit(state, typo, 300.0)[1].allowed


def test_a_share_tiny_for_a_moment_costs_one_slot_of_the_next_share() -> None:
    # A fleet share of 1e-6 for one Admit (a reading torn or planted in the
    # store) of a declared 10/s: its grant is one slot at the next share,
    # 1 / (0.5 x 10) = 200 ms, not 1e5 s (the floor of fleet.share keeps a
    # share this small from being read at all; this is the pacer's own bound).
    config = _policy_rate(10)
    state, tiny = admit(UpstreamState(), config, 0.0, share=1e-6)
    assert tiny.allowed
    state, next_ = admit(state, config, 0.5, share=0.5)
    assert next_.allowed and next_.wait <= 200 * MS


def test_one_cost_outlier_moves_the_mean_cost_by_at_most_a_fifth() -> None:
    # 1000 token units/s; outcomes of cost 100 make the mean 100, which a
    # cost-less Admit is charged. One outcome of 1e9 counts as at most
    # COST_CLIP = 2 x the mean: 100 + 0.2 x (200 - 100) = 120.
    config = UpstreamConfig(rate_limit=RateLimitConfig(token_rate=1000, token_burst=1000))
    state = UpstreamState()
    for _ in range(5):
        state = record_outcome(state, config, 0.0, Outcome(True, cost=100.0, estimated=100.0))
    assert state.pacer.spacing.mean_cost == pytest.approx(100.0)
    state = record_outcome(state, config, 0.0, Outcome(True, cost=1e9, estimated=100.0))
    assert state.pacer.spacing.mean_cost == pytest.approx(120.0)
    # Cost-less Admits every 5 ms over 5 s: 5000 units / 120 = 41 calls and
    # the burst's 1000 / 120 = 8 (not 3 in all, as at a mean of 1e9) once
    # the outlier's own debt (at most the queue and one burst: 2 s) is paid.
    granted, now = 0, 10.0
    while now < 15.0:
        state, answer = admit(state, config, now)
        granted += answer.allowed
        now = round(now + 0.005, 6)
    assert granted >= 41


@pytest.mark.parametrize(
    ("criticality", "longest_ms"),
    [
        # rate 10 (a slot of 100 ms), the queue's limit 1 s: the waits each
        # level may be given are the limit's whole, half and quarter.
        (Criticality.CRITICAL_PLUS, 1000),
        (Criticality.CRITICAL, 1000),
        (Criticality.SHEDDABLE_PLUS, 500),
        (Criticality.SHEDDABLE, 200),  # 250 ms: the slot at 300 ms is past it
    ],
)
def test_the_lower_levels_are_given_shorter_waits(
    criticality: Criticality, longest_ms: int
) -> None:
    config = RateLimitConfig(rate=10)
    p, waits = Pacer(), []
    for _ in range(12):
        p, granted = pace(p, config, 0.0, criticality=criticality)
        if not granted.allowed:
            break
        waits.append(granted.wait // MS)
    assert waits[-1] == longest_ms
    assert granted.allowed is False and granted.shed is not None


def test_a_call_that_sends_no_level_takes_the_policys() -> None:
    # rate 10, the queue's limit 1 s; the policy's default SHEDDABLE gives
    # a call without a level a quarter of it (the slot at 300 ms is past
    # 250 ms), while a call that says CRITICAL takes the lane ahead of them.
    config = RateLimitConfig(rate=10, criticality=Criticality.SHEDDABLE)
    p, waits = Pacer(), []
    for _ in range(12):
        p, granted = pace(p, config, 0.0)
        if not granted.allowed:
            break
        waits.append(granted.wait // MS)
    assert waits[-1] == 200
    _, critical = pace(p, config, 0.0, criticality=Criticality.CRITICAL)
    assert (critical.allowed, critical.wait) == (True, timedelta(0))


@pytest.mark.parametrize(
    ("level", "wait_ms"),
    [
        # Sheddable calls asking: a critical call starts ahead of their
        # queue (200 ms of grants), at the lane's next slot.
        (Criticality.CRITICAL_PLUS, 0),
        (Criticality.CRITICAL, 0),
        # The sheddable levels wait behind the queue, or are shed.
        (Criticality.SHEDDABLE_PLUS, 300),
        (Criticality.SHEDDABLE, None),
    ],
)
def test_a_critical_call_starts_ahead_of_the_sheddable_queue(
    level: Criticality, wait_ms: int | None
) -> None:
    config = RateLimitConfig(rate=10)
    p = Pacer()
    for _ in range(10):
        p, _ = pace(p, config, 0.0, criticality=Criticality.SHEDDABLE)
    _, call = pace(p, config, 0.0, criticality=level)
    if wait_ms is None:
        assert not call.allowed
    else:
        assert (call.allowed, call.wait) == (True, wait_ms * MS)


def test_the_lane_spaces_critical_calls_and_pushes_the_sheddable_ones_back() -> None:
    config = RateLimitConfig(rate=10)
    p, _ = pace(Pacer(), config, 0.0, criticality=Criticality.SHEDDABLE)  # starts at 0
    p, _ = pace(p, config, 0.0, criticality=Criticality.SHEDDABLE)  # at 100 ms
    # Two critical calls: the lane's slots, at once and 100 ms later.
    p, first = pace(p, config, 0.0, criticality=Criticality.CRITICAL)
    p, second = pace(p, config, 0.0, criticality=Criticality.CRITICAL)
    assert (first.wait, second.wait) == (timedelta(0), 100 * MS)
    # Each took a slot of the pace: the next sheddable call starts at 400 ms,
    # not 200 ms, so four calls start in the pace's first 400 ms.
    _, shed_next = pace(p, config, 0.0, criticality=Criticality.SHEDDABLE_PLUS)
    assert shed_next.wait == 400 * MS


def test_with_no_sheddable_call_asking_the_lane_is_closed() -> None:
    # Every call of one level (none sends a criticality): FIFO, as before.
    config = RateLimitConfig(rate=10)
    p = Pacer()
    for _ in range(3):
        p, _ = pace(p, config, 0.0)
    _, fourth = pace(p, config, 0.0)
    assert fourth.wait == 300 * MS
    # A sheddable call a second before (LOWER_S) no longer opens it.
    p, _ = pace(Pacer(), config, 0.0, criticality=Criticality.SHEDDABLE)
    p, _ = pace(p, config, 1.05)
    _, after = pace(p, config, 1.05)
    assert after.wait == 100 * MS


def test_a_spent_quota_holds_every_call_critical_ones_too() -> None:
    # A quota the headers said is spent (its reset 0.5 s away) refuses the
    # critical call too: the upstream would.
    spent = observe(Pacer(), NOTHING, 0.0, THROTTLED._replace(hint=_hint(100, 0, 0.5)))
    spent, _ = pace(spent, NOTHING, 0.0, criticality=Criticality.SHEDDABLE)
    _, critical = pace(spent, NOTHING, 0.0, criticality=Criticality.CRITICAL)
    assert (critical.allowed, critical.wait) == (True, 500 * MS)


def test_critical_plus_waits_past_the_short_queue() -> None:
    # rate 10: six calls at 0 take the starts to 500 ms, one more at 50 ms
    # to 600 ms; a queue past the short limit (four slots, 400 ms) for 100
    # ms turns the short queue on. At 200 ms a CRITICAL call's 500 ms wait
    # is past it and refused; a CRITICAL_PLUS one may wait the whole 1 s.
    config = RateLimitConfig(rate=10)
    p = Pacer()
    for _ in range(6):
        p, _ = pace(p, config, 0.0)
    p, _ = pace(p, config, 0.05)
    p, critical = pace(p, config, 0.2)
    assert p.queue.short_on
    assert critical.shed is not None and critical.shed.limit == pytest.approx(0.4)
    _, plus = pace(p, config, 0.2, criticality=Criticality.CRITICAL_PLUS)
    assert (plus.allowed, plus.wait) == (True, 500 * MS)


def test_the_lanes_queue_holds_critical_calls_up_to_the_whole_queue_limit() -> None:
    # The lane's queue is the critical calls' alone: they wait up to
    # max_queue_delay (1 s), a slot apart, and past it are refused.
    config = RateLimitConfig(rate=10)
    p, _ = pace(Pacer(), config, 0.0, criticality=Criticality.SHEDDABLE)
    waits = []
    for _ in range(15):
        p, granted = pace(p, config, 0.0, criticality=Criticality.CRITICAL)
        if not granted.allowed:
            break
        waits.append(granted.wait // MS)
    assert waits == [100 * i for i in range(11)]
    assert granted.shed is not None and granted.shed.limit == 1.0


_ANY = st.one_of(
    st.none(), st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e300, -1.0, 0.0])
)


@settings(max_examples=200, deadline=None)
@given(
    limit=_ANY,
    remaining=_ANY,
    reset=st.one_of(st.none(), st.floats(0.0, 1e6)),
    refills=st.booleans(),
)
def test_no_throttled_reading_doubts_the_headers_past_quiet(
    limit: float | None, remaining: float | None, reset: float | None, refills: bool
) -> None:
    # Whatever an admitted call's 429 carries (NaN, infinities, 1e300,
    # negatives, nothing), the headers are doubted for at most `quiet`
    # (30 s) after it, and the pacer still answers.
    hint = _hint(limit, remaining, reset, refills=refills)
    p = observe(Pacer(), NOTHING, 5.0, COOLING._replace(hint=hint, admitted_at=4.9))
    assert p.quota.doubted_until <= 5.0 + NOTHING._quiet_s
    assert pace(p, NOTHING, 5.1)[1] is not None
    assert pacer_snapshot(p, NOTHING, 40.0).source is not None
