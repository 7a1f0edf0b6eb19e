"""The circuit breaker's transitions, each a table over a fake clock."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from types import MappingProxyType

import pytest

from squawk.policy import (
    BreakerConfig,
    BreakerState,
    Outcome,
    PolicyInputError,
    RatioBudgetConfig,
    Reason,
    UpstreamConfig,
    builtin_policy,
    builtin_profile,
    counts_as_failure,
)
from squawk.policy.breaker import CLOSED, admit, record
from squawk.policy.outcome import Verdict
from upstream_pod import BAD_INPUT, OUTAGE, SUCCESS, Pod

# Room for every retry and deposit, so only the breaker decides here.
_BUDGET = RatioBudgetConfig(ratio=1.0, min_per_second=1000)


def pod(**breaker: object) -> Pod:
    return Pod(UpstreamConfig(circuit_breaker=BreakerConfig(**breaker), retry_budget=_BUDGET))  # type: ignore[arg-type]


def opened(at: float = 0.0, **breaker: object) -> Pod:
    """A pod whose breaker opened at `at` on 10 failures in a row (the defaults)."""
    p = pod(**breaker).at(at)
    p.call(OUTAGE, times=10)
    assert p.view().breaker_state is BreakerState.OPEN
    return p


@pytest.mark.parametrize(
    ("status", "transport", "counts"),
    [
        (0, True, True),
        (0, False, True),  # no status at all: decide() reads it as a transport failure
        (408, False, True),
        (429, False, True),
        (500, False, True),
        (503, False, True),
        (599, False, True),
        (400, False, False),
        (401, False, False),
        (403, False, False),
        (404, False, False),
        (422, False, False),
        (302, False, False),
    ],
)
def test_what_the_default_profile_retries_counts(
    status: int, transport: bool, counts: bool
) -> None:
    assert counts_as_failure(status, transport) is counts
    config = builtin_policy().profile("default").for_upstream("")
    failed = Outcome(success=False, http_status=status, transport_failure=transport)
    assert (config.verdict(failed) is Verdict.FAILURE) is counts


@pytest.mark.parametrize(
    ("base", "extra", "status", "counts"),
    [
        # "llm" retries 429, 500, 502, 503, 504 and 529 only.
        ("llm", (), 501, False),
        ("llm", (), 507, False),
        ("llm", (), 408, False),
        ("llm", (), 503, True),
        ("llm", (), 529, True),
        ("llm", (), 0, True),
        # retryable_statuses adds to the set, and what it adds counts...
        ("default", (404,), 404, True),
        ("llm", (501,), 501, True),
        # ... unless the status is terminal too: decide() never retries it.
        ("default", (401,), 401, False),
    ],
)
def test_what_a_profile_retries_is_what_counts(
    base: str, extra: tuple[int, ...], status: int, counts: bool
) -> None:
    # gRFC A6 counts "a failed RPC whose status is in retryableStatusCodes".
    profile = builtin_profile(base, "p")
    profile = replace(profile, transient_statuses=profile.transient_statuses | set(extra))
    upstreams = {"api": UpstreamConfig(circuit_breaker=BreakerConfig(open_for=timedelta(1)))}
    profile = replace(profile, upstreams=MappingProxyType(upstreams))
    failed = Outcome(success=False, http_status=status)
    for config in (profile.for_upstream(""), profile.for_upstream("api")):
        assert (config.verdict(failed) is Verdict.FAILURE) is counts


def play(p: Pod, timeline: str) -> None:
    """One admitted call per letter: S succeeds, F fails with a 503."""
    for letter in timeline:
        p.call(SUCCESS if letter == "S" else OUTAGE)


@pytest.mark.parametrize(
    ("timeline", "state"),
    [
        ("SSSSSFFFFF", BreakerState.OPEN),  # 10 calls, 5 failed: both thresholds, exactly
        ("FFFFFSSSSS", BreakerState.OPEN),  # the order within the window does not matter
        ("SSSSSSFFFF", BreakerState.CLOSED),  # ratio 0.4
        ("SSSSFFFFF", BreakerState.CLOSED),  # 9 calls: below minimum_calls
        ("FFFFFFFFF", BreakerState.CLOSED),  # 9 calls, all failed
        ("FFFFFFFFFS", BreakerState.OPEN),  # the tenth call, a success, reaches minimum_calls
    ],
)
def test_closed_opens_at_the_thresholds_and_not_below(timeline: str, state: BreakerState) -> None:
    p = pod()
    play(p, timeline)
    assert p.view().breaker_state is state


def test_a_ratio_read_from_a_decimal_opens_at_exactly_that_share() -> None:
    # 0.3 * 10 is 3.0000000000000004 in floats; 3 of 10 must still be 0.3.
    p = pod(failure_ratio=0.3)
    play(p, "SSSSSSSFFF")
    assert p.view().breaker_state is BreakerState.OPEN


@pytest.mark.parametrize(
    "ignored",
    [
        BAD_INPUT,
        Outcome(success=False, http_status=401),
        Outcome(success=False, http_status=503, cancelled=True),
    ],
)
def test_user_errors_and_cancellations_are_not_counted(ignored: Outcome) -> None:
    p = pod()
    p.call(ignored, times=20)
    p.call(OUTAGE, times=9)
    view = p.view()
    assert (view.breaker_state, view.calls, view.failures) == (BreakerState.CLOSED, 9, 9)


@pytest.mark.parametrize(
    ("later", "allowed", "retry_after_ms"),
    [(0.0, False, 30_000), (10.5, False, 19_500), (29.999, False, 1), (30.0, True, None)],
)
def test_open_refuses_until_open_for_has_passed(
    later: float, allowed: bool, retry_after_ms: int | None
) -> None:
    p = opened(at=100.0)
    admission = p.at(100.0 + later).admit()
    assert admission.allowed is allowed
    if allowed:
        assert (admission.breaker_state, admission.probe) == (BreakerState.HALF_OPEN, True)
    else:
        assert (admission.reason, admission.breaker_state) == (
            Reason.CIRCUIT_OPEN,
            BreakerState.OPEN,
        )
        assert admission.retry_after == timedelta(milliseconds=retry_after_ms or 0)


@pytest.mark.parametrize("probes", [1, 3, 5])
def test_half_open_admits_exactly_half_open_probes(probes: int) -> None:
    p = opened(half_open_probes=probes).at(30.0)
    assert all(p.admit().probe for _ in range(probes))
    refused = p.admit()
    assert (refused.allowed, refused.reason, refused.breaker_state) == (
        False,
        Reason.CIRCUIT_OPEN,
        BreakerState.HALF_OPEN,
    )
    # Until the round would restart unjudged: open_for after it began.
    assert refused.retry_after == timedelta(seconds=30)


@pytest.mark.parametrize(
    ("successes", "failures", "state"),
    [
        (5, 0, BreakerState.CLOSED),
        (3, 2, BreakerState.CLOSED),  # 3 / 5 = 0.6, exactly close_ratio
        (2, 3, BreakerState.OPEN),
        (0, 5, BreakerState.OPEN),
        (3, 1, BreakerState.HALF_OPEN),  # 4 of 5 outcomes in: no verdict yet
    ],
)
def test_half_open_closes_at_close_ratio_and_reopens_below(
    successes: int, failures: int, state: BreakerState
) -> None:
    p = opened().at(30.0)
    for _ in range(5):
        assert p.admit().probe
    for outcome in [SUCCESS] * successes + [OUTAGE] * failures:
        p.report(outcome)
    assert p.view().breaker_state is state
    if state is BreakerState.OPEN:
        # Open again for a whole open_for from the verdict.
        assert p.view().breaker_retry_after == timedelta(seconds=30)


def test_closing_starts_a_fresh_window() -> None:
    p = opened().at(30.0)
    p.call(SUCCESS, times=5)
    assert p.view().breaker_state is BreakerState.CLOSED
    # The ten failures that opened it are gone: nine more do not reopen it.
    p.call(OUTAGE, times=9)
    assert (p.view().breaker_state, p.view().calls) == (BreakerState.CLOSED, 9)


def test_a_half_open_round_without_a_verdict_starts_over() -> None:
    p = opened().at(30.0)
    for _ in range(5):
        assert p.admit().probe
    p.report(SUCCESS)  # one verdict of five; the other four probes never report
    assert not p.at(59.999).admit().allowed
    p.at(60.0)
    assert all(p.admit().probe for _ in range(5))
    assert not p.admit().allowed
    assert (p.view().calls, p.view().probes) == (0, 5)  # the old tally is gone too


def test_an_uncounted_outcome_gives_its_probe_slot_back() -> None:
    # resilience4j's shouldReleasePermissionWhenExceptionIgnored: a probe
    # that ends in an ignored outcome releases its permission.
    p = opened().at(30.0)
    for _ in range(5):
        assert p.admit().probe
    assert not p.admit().allowed
    p.report(BAD_INPUT)
    assert p.admit().probe
    assert not p.admit().allowed
    assert (p.view().breaker_state, p.view().calls) == (BreakerState.HALF_OPEN, 0)


def test_uncounted_outcomes_give_back_at_most_one_round_of_slots() -> None:
    # Anyone can report a 4xx: a round gives back at most half_open_probes
    # slots, so it admits at most twice its probes, and none of it closes it.
    p = opened().at(30.0)
    admitted = 0
    for _ in range(50):
        while p.admit().allowed:
            admitted += 1
        p.report(BAD_INPUT)
    assert admitted == 10
    assert p.view().breaker_state is BreakerState.HALF_OPEN
    # A slot given back is never one no probe held: no outcome, no slot.
    q = opened().at(30.0)
    q.report(BAD_INPUT)
    assert sum(q.admit().allowed for _ in range(6)) == 5


def test_a_disabled_breaker_never_opens() -> None:
    config = BreakerConfig(enabled=False, minimum_calls=1)
    breaker = record(CLOSED, config, 0.0, Verdict.FAILURE)
    assert breaker.state is BreakerState.CLOSED
    assert admit(breaker, config, 0.0)[1:] == (True, False)


@pytest.mark.parametrize(
    ("timeline", "shown"),
    [
        # The window it tripped on: 2 successes, then 8 failures of 10.
        ("SS" + "F" * 8, (10, 8)),
        # The defaults' ten failures in a row.
        ("F" * 10, (10, 10)),
    ],
)
def test_an_open_breaker_shows_the_outcomes_that_opened_it(
    timeline: str, shown: tuple[int, int]
) -> None:
    p = pod()
    play(p, timeline)
    view = p.at(29.0).view()
    assert (view.breaker_state, (view.calls, view.failures)) == (BreakerState.OPEN, shown)


def test_a_reopened_breaker_shows_the_round_that_failed() -> None:
    p = opened().at(30.0)
    for outcome in [SUCCESS] * 2 + [OUTAGE] * 3:  # 2 of 5 < close_ratio 0.6
        assert p.admit().probe
        p.report(outcome)
    view = p.view()
    assert (view.breaker_state, view.calls, view.failures) == (BreakerState.OPEN, 5, 3)


def test_outcomes_reported_while_open_are_dropped() -> None:
    p = opened()
    p.at(1.0).report(SUCCESS)
    p.report(SUCCESS)
    assert p.view().breaker_state is BreakerState.OPEN
    assert (p.view().calls, p.view().failures) == (10, 10)  # still the window that opened it
    view = p.at(30.0).view()
    assert (view.breaker_state, view.calls) == (BreakerState.HALF_OPEN, 0)


@pytest.mark.parametrize(
    ("tenth_call_at", "state"),
    [(59.999, BreakerState.OPEN), (60.0, BreakerState.CLOSED)],
)
def test_old_buckets_roll_out_of_the_window(tenth_call_at: float, state: BreakerState) -> None:
    p = pod().at(0.0)
    p.call(OUTAGE, times=9)  # bucket 0: [0 s, 6 s)
    p.at(tenth_call_at).call(OUTAGE)
    assert p.view().breaker_state is state


@pytest.mark.parametrize(
    ("failed_at", "still_counted_at", "gone_at"),
    [
        (0.0, 59.999, 60.0),  # at a bucket's start: counted for the whole window
        (5.9, 59.999, 60.0),  # late in bucket 0: leaves with it, 54.1 s later
        (6.0, 65.999, 66.0),  # bucket 1
    ],
)
def test_a_failure_stays_between_window_minus_one_bucket_and_window(
    failed_at: float, still_counted_at: float, gone_at: float
) -> None:
    base = 600_000.0  # a monotonic clock long after boot, on a bucket edge
    p = pod().at(base + failed_at)
    p.call(OUTAGE)
    assert p.at(base + still_counted_at).view().failures == 1
    assert p.at(base + gone_at).view().failures == 0


def test_a_window_need_not_divide_evenly_into_buckets() -> None:
    p = pod(window=timedelta(seconds=60), buckets=7)
    p.call(OUTAGE, times=10)
    assert p.view().breaker_state is BreakerState.OPEN


def test_a_disabled_breaker_admits_everything() -> None:
    p = pod(enabled=False)
    p.call(OUTAGE, times=100)
    admission = p.admit()
    assert (admission.allowed, admission.breaker_state) == (True, BreakerState.CLOSED)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("failure_ratio", 0.0),
        ("failure_ratio", 1.5),
        ("failure_ratio", float("nan")),
        ("close_ratio", 0.0),
        ("minimum_calls", 0),
        ("half_open_probes", 0),
        ("buckets", 0),
        ("buckets", 1001),
        ("window", timedelta(0)),
        ("open_for", timedelta(seconds=-1)),
    ],
)
def test_a_config_out_of_bounds_names_the_field(field: str, value: object) -> None:
    with pytest.raises(PolicyInputError) as info:
        BreakerConfig(**{field: value})  # type: ignore[arg-type]
    assert info.value.field == field
