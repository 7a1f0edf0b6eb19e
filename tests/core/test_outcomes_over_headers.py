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
    PaceSource,
    Quota,
    RateLimitHint,
    UpstreamConfig,
    UpstreamState,
    admit,
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
