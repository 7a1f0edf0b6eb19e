"""The pacer's rules (squawk.policy.pacer), as tables over a fake clock."""

from __future__ import annotations

from datetime import timedelta

from squawk.policy import Pacer, PaceSource, RateLimitConfig, pace, pacer_snapshot

NOTHING = RateLimitConfig()


def test_a_fresh_pacer_starts_every_call_at_once() -> None:
    pacer, granted = pace(Pacer(), NOTHING, 0.0)
    assert granted.allowed and granted.wait == timedelta(0) and granted.permits == 1
    assert pacer_snapshot(pacer, NOTHING, 0.0).source is PaceSource.NONE
