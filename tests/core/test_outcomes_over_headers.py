"""Headers are hints (squawk.policy.header_quota, squawk.policy.pacer):
a header pace that meets throttles is corrected down, one that leaves the
quota unused is corrected up, and a reset written in whole seconds is read
as the coarse number it is.

Each provider's dialect at 10x overload is judged against the issue's
goals in tests/bench/test_pacer_overload.py (the outcome benchmark's
simulation); these are the single rules, each with its own upstream.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from squawk.policy import (
    Outcome,
    Pacer,
    PaceSample,
    PaceSource,
    Quota,
    RateLimitConfig,
    RateLimitHint,
    UpstreamConfig,
    UpstreamState,
    admit,
    observe,
    pace,
    pacer_snapshot,
    record_outcome,
    upstream_snapshot,
)


def test_a_quota_claimed_far_past_what_the_upstream_serves_is_corrected_down() -> None:
    # Every answer claims a quota of 1e12 calls refilled in a millisecond
    # (the hostile audit's header); the upstream serves 10/s and refuses
    # the rest with a 429. Trusted, the header pace lets every call through
    # (the audit saw 1,200 refusals a second); corrected by the refusals,
    # the pod's attempts come down to about what is served.
    config = UpstreamConfig()
    lie = RateLimitHint(Quota(1e12, 0.0, timedelta(milliseconds=1), None, refills=True), None)
    state = UpstreamState()
    tokens, last, sent, refused = 1.0, 0.0, 0, 0
    for i in range(2000):  # 100 calls/s offered for 20 s
        now = i / 100
        state, answer = admit(state, config, now, deadline=timedelta(seconds=10))
        if not answer.allowed:
            continue
        start = now + answer.wait.total_seconds()
        tokens, last = min(1.0, tokens + (start - last) * 10.0), start
        sent += 1
        if tokens >= 1.0:
            tokens -= 1.0
            outcome = Outcome(True, hint=lie)
        else:
            refused += 1
            outcome = Outcome(False, 429, hint=lie)
        state = record_outcome(state, config, start + 0.01, outcome)
    # The upstream's own figures: 10/s served for 20 s.
    assert sent <= 1.3 * 10 * 20
    assert refused <= 0.25 * sent
    assert upstream_snapshot(state, config, 20.0).pace.source is PaceSource.LEARNED


def test_a_whole_second_reset_is_read_as_a_second_wide() -> None:
    # Anthropic writes its reset in whole seconds: 12:00:01Z read at
    # 12:00:00.9 says "full again within 0.1 to 1.1 s". With 19 of 20 used,
    # the least refill rate it proves is (19 - 1) / 1.1 s, not 18 / 0.1 s
    # = 180/s (ten times the bucket's 20/s, which the pod then sent).
    config = UpstreamConfig()
    headers = Quota(20.0, 1.0, timedelta(seconds=0.1), None, refills=True, grain=1.0)
    state = record_outcome(
        UpstreamState(), config, 0.0, Outcome(True, hint=RateLimitHint(headers, None))
    )
    view = upstream_snapshot(state, config, 0.0).pace
    assert view.source is PaceSource.HEADERS
    assert view.rate == pytest.approx(18 / 1.1)


def _reading(
    limit: float, remaining: float, reset: float, *, refills: bool, grain: float = 0.0
) -> RateLimitHint:
    quota = Quota(limit, remaining, timedelta(seconds=reset), None, refills, grain)
    return RateLimitHint(quota, None)


def _rate(pacer: Pacer, now: float) -> float:
    return pacer_snapshot(pacer, RateLimitConfig(), now).rate


def test_a_quota_left_unused_while_calls_wait_lifts_the_pace_and_only_then() -> None:
    # A bucket of 20 whose reset is written in whole seconds (Anthropic's):
    # 0 s read at (20 - 5 - 1) / (0 + 1) = 14/s, then read at least half
    # full every 0.1 s: the pace leaves it unused. While calls wait for the
    # pace (one asked 10 times a slot), it rises by a quarter each 0.5 s;
    # while none waits, the demand is what leaves it unused, and it stays.
    # A reset written to the millisecond proves its rate: it does not rise.
    config = RateLimitConfig()
    base = observe(Pacer(), config, 0.0, _ok(_reading(20, 5, 0, refills=True, grain=1.0)))
    full = _ok(_reading(20, 16, 0, refills=True, grain=1.0))
    fine = observe(Pacer(), config, 0.0, _ok(_reading(20, 5, 0.75, refills=True, grain=0.001)))
    exact = _ok(_reading(20, 16, 0.2, refills=True, grain=0.001))
    idle, busy = base, base
    for i in range(1, 21):  # 2 s of readings
        now = i / 10
        idle = observe(idle, config, now, full)
        for _ in range(10):
            busy, _ = pace(busy, config, now, deadline=timedelta(seconds=30))
            fine, _ = pace(fine, config, now, deadline=timedelta(seconds=30))
        busy = observe(busy, config, now, full)
        fine = observe(fine, config, now, exact)
    assert _rate(idle, 2.0) == pytest.approx(14)
    # Rises at 0.5 s steps of waiting calls (the first waits are at 0.1):
    # 1.25^3 at least.
    assert _rate(busy, 2.0) >= 14 * 1.25**3
    assert _rate(fine, 2.0) == pytest.approx(14 / 0.751)


def test_a_quota_read_a_call_lower_now_and_then_still_lifts_the_pace() -> None:
    # As above, but the readings say 16 and 15 left by turns (whole calls,
    # and the calls in flight when each was written): the quota is not
    # draining, and the pace rises at the same 0.5 s steps. Before, each
    # reading a call lower than at the last rise started the 0.5 s over, and
    # the Anthropic dialect's pace took 4 s to climb from 8 to 20/s at 10x.
    # A quota that does drain (20, 19, 19, 18, ... 10 left: 2.5 calls each
    # 0.5 s, more than DRAIN) rises at most once.
    config = RateLimitConfig()
    base = observe(Pacer(), config, 0.0, _ok(_reading(20, 5, 0, refills=True, grain=1.0)))
    busy, draining = base, base
    for i in range(1, 21):
        now = i / 10
        for _ in range(10):
            busy, _ = pace(busy, config, now, deadline=timedelta(seconds=30))
            draining, _ = pace(draining, config, now, deadline=timedelta(seconds=30))
        left = 16 - i % 2
        busy = observe(busy, config, now, _ok(_reading(20, left, 0, refills=True, grain=1.0)))
        lower = 20 - i // 2
        reading = _ok(_reading(20, lower, 0, refills=True, grain=1.0))
        draining = observe(draining, config, now, reading)
    assert _rate(busy, 2.0) >= 14 * 1.25**3
    assert _rate(draining, 2.0) <= 14 * 1.25


def test_a_spent_quotas_hold_ends_when_a_reading_has_calls_left() -> None:
    # An IETF-style window spent, reset written as 1 s (rounded up): nothing
    # starts for up to 1 s. A reading 0.2 s later with 19 left (the window
    # started over) ends that hold at once: it was the quota's own.
    config = RateLimitConfig()
    spent = observe(Pacer(), config, 0.0, _ok(_reading(20, 0, 1, refills=False)))
    assert pace(spent, config, 0.2)[1].wait == timedelta(milliseconds=800)
    again = observe(spent, config, 0.2, _ok(_reading(20, 19, 1, refills=False)))
    assert pace(again, config, 0.2)[1].wait == timedelta(0)


def test_one_reading_that_lies_low_is_masked_by_the_readings_before_it() -> None:
    # A window read at 0.95 x 20 / 1 s = 19/s, then one answer saying one
    # call left for a day: the pace stays the largest of the last readings
    # (a lone lie cannot space the next start 5 minutes away).
    config = RateLimitConfig()
    p = observe(Pacer(), config, 0.0, _ok(_reading(1000, 20, 1, refills=False)))
    p = observe(p, config, 0.1, _ok(_reading(1000, 1, 86400, refills=False)))
    assert _rate(p, 0.1) == pytest.approx(0.95 * 20 / 1)


def _ok(hint: RateLimitHint) -> PaceSample:
    return PaceSample(throttled=False, success=True, counted=True, hint=hint)
