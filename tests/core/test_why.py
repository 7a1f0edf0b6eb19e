"""The causes the event history shows (squawk.policy.why): each names the
rule that fired, with its numbers and the policy's own setting names, and
the outcome that moved the state. Expected texts are written out here."""

from __future__ import annotations

from datetime import timedelta

import pytest

from squawk.policy import BreakerState, Outcome, PaceSource, Quota, RateLimitHint
from squawk.policy.breaker import Breaker, BreakerConfig, record
from squawk.policy.fleet import Restore
from squawk.policy.outcome import Verdict
from squawk.policy.why import (
    breaker_cause,
    fleet_breaker_cause,
    outcome_text,
    pace_cause,
    restored_cause,
)

CONFIG = BreakerConfig(
    failure_ratio=0.5,
    minimum_calls=4,
    open_for=timedelta(seconds=30),
    half_open_probes=2,
    close_ratio=0.5,
)


@pytest.mark.parametrize(
    ("outcome", "text"),
    [
        (Outcome(True, 200), "a success"),
        (Outcome(False, 503), "HTTP 503"),
        (Outcome(False, 0, transport_failure=True), "a transport failure"),
        (Outcome(False, 0), "a transport failure"),
        (
            Outcome(False, 429, retry_after=timedelta(seconds=30)),
            "HTTP 429 (throttled), Retry-After 30 s",
        ),
        (Outcome(False, 529), "HTTP 529 (throttled)"),
        (
            Outcome(False, 503, retry_after=timedelta(milliseconds=250)),
            "HTTP 503 (throttled), Retry-After 250 ms",
        ),
        (
            Outcome(False, 400, refused_retry=True),
            "HTTP 400 (throttled), pushback refusing a retry",
        ),
        (Outcome(False, 503, cancelled=True), "a cancelled call"),
    ],
)
def test_an_outcome_is_shown_by_its_status_and_hint(outcome: Outcome, text: str) -> None:
    assert outcome_text(outcome) == text


def _tripped() -> Breaker:
    """A CLOSED breaker after 1 success and 3 failures: the fourth call trips it."""
    breaker = Breaker()
    for i, verdict in enumerate([Verdict.SUCCESS, Verdict.FAILURE, Verdict.FAILURE]):
        breaker = record(breaker, CONFIG, float(i), verdict)
    assert breaker.state is BreakerState.CLOSED
    breaker = record(breaker, CONFIG, 3.0, Verdict.FAILURE)
    assert breaker.state is BreakerState.OPEN
    return breaker


def test_a_trip_names_the_window_the_ratio_and_the_minimum() -> None:
    assert breaker_cause(_tripped(), BreakerState.CLOSED, CONFIG) == (
        "3 of 4 calls in the window failed (75%): at or over failure_ratio 50% with minimum_calls 4"
    )


def test_half_opening_names_open_for_and_the_probes() -> None:
    half = Breaker(BreakerState.HALF_OPEN)
    assert breaker_cause(half, BreakerState.OPEN, CONFIG) == (
        "open for 30 s (open_for): up to 2 probes go through"
    )


def test_a_failed_round_names_its_probes_and_close_ratio() -> None:
    half = Breaker(BreakerState.HALF_OPEN)
    half = record(half, CONFIG, 0.0, Verdict.FAILURE)
    opened = record(half, CONFIG, 0.1, Verdict.FAILURE)
    assert opened.state is BreakerState.OPEN
    assert breaker_cause(opened, BreakerState.HALF_OPEN, CONFIG) == (
        "2 of 2 probes failed: under close_ratio 50% succeeded"
    )


def test_closing_names_close_ratio() -> None:
    assert breaker_cause(Breaker(), BreakerState.HALF_OPEN, CONFIG) == (
        "the probes succeeded at or over close_ratio 50% of 2"
    )


def test_a_disabled_breaker_says_so() -> None:
    off = BreakerConfig(enabled=False)
    assert breaker_cause(Breaker(), BreakerState.OPEN, off) == (
        "the breaker is disabled (circuit_breaker.enabled: false)"
    )


def test_the_fleets_trip_counts_its_failing_pods() -> None:
    got = fleet_breaker_cause(BreakerState.OPEN, BreakerState.CLOSED, 20, 12, 3, CONFIG)
    assert got == (
        "12 of 20 calls in the window failed (60%): at or over failure_ratio 50% "
        "with minimum_calls 4, from 3 pods"
    )
    one = fleet_breaker_cause(BreakerState.OPEN, BreakerState.CLOSED, 4, 4, 1, CONFIG)
    assert one.endswith(", from 1 pod")
    assert fleet_breaker_cause(BreakerState.OPEN, BreakerState.HALF_OPEN, 2, 2, 0, CONFIG) == (
        "2 of 2 probes across the fleet failed"
    )
    assert fleet_breaker_cause(BreakerState.HALF_OPEN, BreakerState.OPEN, 0, 0, 0, CONFIG).endswith(
        "(across the fleet)"
    )


_READ = RateLimitHint(
    Quota(100, 10, timedelta(seconds=1), None),
    Quota(40_000, 1_500.4, timedelta(milliseconds=250), None),
)


@pytest.mark.parametrize(
    ("source", "last", "text"),
    [
        (
            PaceSource.HEADERS,
            Outcome(True, 200, hint=_READ),
            "read from the upstream's rate-limit headers: requests 10 of 100 left, "
            "resetting in 1 s; tokens 1,500 of 40,000 left, resetting in 250 ms",
        ),
        (
            PaceSource.HEADERS,
            Outcome(True, 200, hint=RateLimitHint(Quota(None, 0, None, None), None)),
            "read from the upstream's rate-limit headers: requests 0 left",
        ),
        (
            PaceSource.LEARNED,
            Outcome(False, 429, retry_after=timedelta(seconds=1)),
            "learned from the upstream's throttling (429, 503 with Retry-After); "
            "last: HTTP 429 (throttled), Retry-After 1 s",
        ),
        # What the last outcome says only where it is the pace's cause.
        (
            PaceSource.LEARNED,
            Outcome(True, 200, hint=_READ),
            "learned from the upstream's throttling (429, 503 with Retry-After)",
        ),
        (PaceSource.POLICY, None, "the rate declared in the policy (rate_limit.rate)"),
    ],
)
def test_a_pace_says_what_it_read(source: PaceSource, last: Outcome | None, text: str) -> None:
    assert pace_cause(source, last) == text


@pytest.mark.parametrize(
    ("restore", "what"),
    [
        (Restore(3, 50.0, 110.0), "OPEN breaker (50 s left) and cool-down (110 s left)"),
        (Restore(3, 0.0, 2.5), "cool-down (2.5 s left)"),
    ],
)
def test_caution_written_back_says_what_the_store_had_lost(restore: Restore, what: str) -> None:
    assert restored_cause(restore) == (
        f"the store had lost the fleet's {what} this pod still held (flushed or restarted)"
    )
