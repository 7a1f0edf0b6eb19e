"""One upstream's shared state: admit's order, the cool-down, guard_retry.

The breaker and the budget have their own tables (test_breaker.py,
test_retry_budget.py); this file checks how the three combine, over a
fake monotonic clock, and the one promise guard_retry makes whatever
happened before: it never turns anything into a RETRY and never shortens
a RETRY's wait.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squawk.policy import (
    Action,
    BreakerConfig,
    BreakerState,
    Decision,
    Outcome,
    PolicyInputError,
    RateLimitConfig,
    RatioBudgetConfig,
    Reason,
    TokenBucketConfig,
    UpstreamConfig,
    UpstreamState,
    builtin_policy,
    is_idle,
    record_outcome,
)
from squawk.policy.limits import MAX_RETRY_AFTER
from squawk.policy.timing import seconds
from upstream_pod import (
    BAD_INPUT,
    CORRECT,
    FAIL,
    OUTAGE,
    RETRY,
    SUCCESS,
    Pod,
    failure,
    retry_decision,
)

MS = timedelta(milliseconds=1)


@pytest.mark.parametrize(
    ("later", "allowed", "left_ms"),
    [(0.0, False, 5000), (2.0, False, 3000), (4.9995, False, 1), (5.0, True, None)],
)
def test_a_retry_after_cools_the_upstream_down_for_every_caller(
    later: float, allowed: bool, left_ms: int | None
) -> None:
    p = Pod().at(100.0)
    p.call(failure(429, retry_after=5))
    admission = p.at(100.0 + later).admit()
    assert admission.allowed is allowed
    if not allowed:
        assert admission.reason is Reason.UPSTREAM_COOLING_DOWN
        assert admission.retry_after == left_ms * MS if left_ms else None


@pytest.mark.parametrize(
    ("hints", "cooling_ends"),
    [
        ([(0.0, 5.0), (1.0, 1.0)], 5.0),  # a shorter hint later never cuts it short
        ([(0.0, 5.0), (2.0, 10.0)], 12.0),  # a longer one extends it
        ([(0.0, 1.0), (3.0, 1.0)], 4.0),  # one that starts after the first ended
    ],
)
def test_the_later_end_wins(hints: list[tuple[float, float]], cooling_ends: float) -> None:
    # Without a learned pace: once the pacer paces by what it learned, its
    # cut answers a throttle instead (test_pacer.py).
    p = Pod(UpstreamConfig(rate_limit=RateLimitConfig(learn=False)))
    for at, wait in hints:
        p.at(at).report(failure(503, retry_after=wait))
    assert not p.at(cooling_ends - 0.001).admit().allowed
    assert p.at(cooling_ends).admit().allowed


@pytest.mark.parametrize(
    ("config", "outcome"),
    [
        (UpstreamConfig(share_retry_after=False), failure(503, retry_after=5)),
        (UpstreamConfig(), Outcome(success=False, http_status=413, retry_after=5 * MS * 1000)),
        (UpstreamConfig(), Outcome(success=True, retry_after=5 * MS * 1000)),
    ],
    ids=["share_retry_after false", "a 4xx speaks for its caller", "a success"],
)
def test_hints_that_are_not_shared(config: UpstreamConfig, outcome: Outcome) -> None:
    p = Pod(config)
    p.report(outcome)
    assert p.admit().allowed
    assert p.view().cooldown_left == timedelta(0)


MINUTE = timedelta(minutes=1)


@pytest.mark.parametrize(
    ("max_cool_down", "hint_s", "cooling"),
    [
        # The default: five minutes, whatever one answer asks for.
        (None, 86_400, 5 * MINUTE),
        (None, 10 * 86_400, 5 * MINUTE),
        (None, 60, MINUTE),  # a shorter hint is kept as it is
        (10 * MS * 1000, 30, 10 * MS * 1000),
        (MAX_RETRY_AFTER, 10 * 86_400, MAX_RETRY_AFTER),  # and never past a day
    ],
)
def test_a_shared_cool_down_is_capped_by_max_cool_down(
    max_cool_down: timedelta | None, hint_s: float, cooling: timedelta
) -> None:
    # One Retry-After: 86400 cooled every executor (and, on Redis, every
    # pod) for a day, and nothing but time could end it.
    config = (
        UpstreamConfig() if max_cool_down is None else UpstreamConfig(max_cool_down=max_cool_down)
    )
    p = Pod(config)
    p.report(failure(503, retry_after=hint_s))
    assert p.view().cooldown_left == cooling
    assert not p.at(seconds(cooling) - 0.001).admit().allowed
    assert p.at(seconds(cooling)).admit().allowed


@pytest.mark.parametrize("bad", [timedelta(0), 999 * MS, MAX_RETRY_AFTER + MS, -MINUTE])
def test_max_cool_down_is_bounded(bad: timedelta) -> None:
    with pytest.raises(PolicyInputError, match="between 1s and 24h") as refused:
        UpstreamConfig(max_cool_down=bad)
    assert refused.value.field == "max_cool_down"


def test_the_cool_down_refuses_before_the_breaker_and_takes_no_probe() -> None:
    p = Pod(UpstreamConfig(BreakerConfig(half_open_probes=1)))
    p.call(OUTAGE, times=10)
    p.at(29.0).report(failure(503, retry_after=2))  # reported while OPEN: the breaker drops it
    cooling = p.at(30.0).admit()
    assert (cooling.reason, cooling.breaker_state) == (
        Reason.UPSTREAM_COOLING_DOWN,
        BreakerState.HALF_OPEN,
    )
    probe = p.at(31.0).admit()
    assert (probe.allowed, probe.probe) == (True, True)


@pytest.mark.parametrize("decision", [CORRECT, FAIL], ids=["CORRECT", "FAIL"])
def test_guard_retry_never_touches_correct_or_fail(decision: Decision) -> None:
    p = Pod()
    p.call(OUTAGE, times=10)
    p.report(failure(503, retry_after=60))
    state = p.state
    assert p.guard(decision) is decision
    assert p.state is state


def test_an_open_breaker_fails_a_retry_until_it_half_opens() -> None:
    p = Pod().at(10.0)
    p.call(OUTAGE, times=10)
    refused = p.at(15.0).guard(retry_decision(transport=True))
    assert (refused.action, refused.reason, refused.delay) == (
        Action.FAIL,
        Reason.CIRCUIT_OPEN,
        timedelta(0),
    )
    assert refused.retry_after == timedelta(seconds=25)
    assert refused.explanation == (
        "The call failed in transport, but the upstream's circuit breaker is open; "
        "it half-opens in 25000 ms."
    )


def test_a_half_open_breaker_lets_a_retry_through_to_admit() -> None:
    p = Pod()
    p.call(OUTAGE, times=10)
    assert p.at(30.0).guard(RETRY) == RETRY
    assert p.admit().probe


def test_an_open_breaker_wins_over_an_empty_budget() -> None:
    p = Pod(UpstreamConfig(retry_budget=RatioBudgetConfig(min_per_second=0)))
    p.call(OUTAGE, times=10)
    assert p.guard(RETRY).reason is Reason.CIRCUIT_OPEN


@pytest.mark.parametrize(
    ("decision", "delay_ms"),
    [
        (RETRY, 3000),  # 542 ms of backoff, stretched to the cool-down left
        (retry_decision(retry_after_s=3), 3000),
        (retry_decision(retry_after_s=7), 7000),  # already longer: unchanged
    ],
)
def test_a_retry_waits_out_the_cool_down(decision: Decision, delay_ms: int) -> None:
    p = Pod().at(0.0)
    p.call(failure(503, retry_after=5))
    guarded = p.at(2.0).guard(decision)
    assert (guarded.action, guarded.reason, guarded.delay) == (
        Action.RETRY,
        decision.reason,
        delay_ms * MS,
    )
    if guarded.delay > decision.delay:
        assert guarded.explanation == (
            f"{decision.explanation[:-1]}; the upstream is cooling down for 3000 ms more, "
            "so wait 3000 ms instead."
        )
    else:
        assert guarded == decision


@pytest.mark.parametrize(
    ("deadline_ms", "action"),
    [(2999, Action.FAIL), (3000, Action.RETRY), (None, Action.RETRY)],
)
def test_a_cool_down_past_the_deadline_fails_the_step(
    deadline_ms: int | None, action: Action
) -> None:
    p = Pod().at(0.0)
    p.call(failure(503, retry_after=3))
    deadline = None if deadline_ms is None else deadline_ms * MS
    guarded = p.guard(RETRY, deadline)
    assert guarded.action is action
    if action is Action.FAIL:
        assert (guarded.reason, guarded.retry_after) == (Reason.DEADLINE_EXCEEDED, 3000 * MS)
        assert guarded.explanation == (
            "HTTP 503 is transient and the upstream is cooling down, but the 3000 ms wait "
            "would outlast the 2999 ms left before the step's deadline."
        )


def test_a_retry_failed_on_the_deadline_does_not_spend_the_budget() -> None:
    p = Pod(UpstreamConfig(retry_budget=RatioBudgetConfig(min_per_second=1, ttl=1000 * MS)))
    p.report(failure(503, retry_after=3))
    assert p.guard(RETRY, timedelta(seconds=1)).reason is Reason.DEADLINE_EXCEEDED
    assert p.guard(RETRY).action is Action.RETRY  # the one retry of the floor
    assert p.guard(RETRY).reason is Reason.RETRY_BUDGET_EXHAUSTED


@pytest.mark.parametrize(
    ("outcome", "field"),
    [
        (Outcome(success=False, http_status=600), "http_status"),
        (Outcome(success=False, http_status=-1), "http_status"),
        (Outcome(success=False, http_status=503, retry_after=-MS), "retry_after"),
    ],
)
def test_an_outcome_it_cannot_read_names_the_field(outcome: Outcome, field: str) -> None:
    with pytest.raises(PolicyInputError) as info:
        record_outcome(UpstreamState(), UpstreamConfig(), 0.0, outcome)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("history", "idle_at", "idle"),
    [
        ([], 0.0, True),
        ([SUCCESS], 59.999, False),  # still in the breaker's window
        ([SUCCESS], 60.0, True),
        ([BAD_INPUT], 0.0, False),  # its admission deposited into the budget ...
        ([BAD_INPUT], 10.0, True),  # ... until ttl
        ([failure(503, retry_after=90)], 89.0, False),
    ],
)
def test_a_state_is_idle_when_a_fresh_one_would_behave_the_same(
    history: list[Outcome], idle_at: float, idle: bool
) -> None:
    p = Pod()
    for outcome in history:
        p.call(outcome)
    assert is_idle(p.state, p.config, idle_at) is idle


def test_each_profile_upstream_override_falls_back_to_the_profile() -> None:
    default = builtin_policy().profile("default")
    assert default.for_upstream("anything") == UpstreamConfig()
    assert default.for_upstream("") == UpstreamConfig()
    assert builtin_policy().max_upstreams == 10_000


# The property: whatever happened to the upstream before, guard_retry only
# ever keeps a RETRY, lengthens its wait or turns it into a FAIL.

_OUTCOMES = st.builds(
    Outcome,
    success=st.booleans(),
    http_status=st.sampled_from([0, 200, 400, 404, 408, 429, 500, 503]),
    transport_failure=st.booleans(),
    retry_after=st.none() | st.integers(0, 120_000).map(lambda ms: ms * MS),
    cancelled=st.booleans(),
)
_DECISIONS = st.one_of(
    st.sampled_from([CORRECT, FAIL]),
    st.builds(retry_decision, st.none() | st.integers(0, 120), st.booleans()),
)
_EVENTS = st.lists(
    st.tuples(
        st.floats(0, 40, allow_nan=False),  # seconds since the previous event
        st.sampled_from(["admit", "retry", "record", "guard"]),
        _OUTCOMES,
        _DECISIONS,
        st.none() | st.integers(0, 60_000).map(lambda ms: ms * MS),
    ),
    max_size=60,
)
_CONFIGS = st.builds(
    UpstreamConfig,
    st.builds(
        BreakerConfig,
        enabled=st.booleans(),
        minimum_calls=st.integers(1, 5),
        half_open_probes=st.integers(1, 3),
        open_for=st.integers(1, 60).map(timedelta),
    ),
    st.one_of(
        st.builds(RatioBudgetConfig, min_per_second=st.integers(0, 2)),
        st.builds(TokenBucketConfig, max_tokens=st.integers(1, 5)),
    ),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(config=_CONFIGS, events=_EVENTS)
def test_guard_retry_never_makes_a_retry_or_shortens_a_wait(
    config: UpstreamConfig,
    events: list[tuple[float, str, Outcome, Decision, timedelta | None]],
) -> None:
    p = Pod(config, now=1_000.0)
    for gap, kind, outcome, decision, deadline in events:
        p.at(p.now + gap)
        if kind == "admit":
            p.admit()
        elif kind == "retry":
            p.admit(retry=True)
        elif kind == "record":
            p.report(outcome)
        else:
            before = p.state
            guarded = p.guard(decision, deadline)
            if decision.action is not Action.RETRY:
                assert guarded is decision and p.state is before
            elif guarded.action is Action.RETRY:
                assert guarded.delay >= decision.delay
                assert guarded.reason is decision.reason
            else:
                assert guarded.action is Action.FAIL
                assert guarded.reason in {
                    Reason.CIRCUIT_OPEN,
                    Reason.RETRY_BUDGET_EXHAUSTED,
                    Reason.DEADLINE_EXCEEDED,
                }
