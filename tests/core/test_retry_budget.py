"""The retry budget, both kinds, as guard_retry applies it to decide()'s RETRY."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from squawk.policy import (
    Action,
    BreakerConfig,
    PolicyInputError,
    RatioBudgetConfig,
    Reason,
    RetryBudgetConfig,
    TokenBucketConfig,
    UpstreamConfig,
)
from squawk.policy.retry_budget import carried
from upstream_pod import BAD_INPUT, OUTAGE, RETRY, SUCCESS, Pod, failure


def pod(budget: RetryBudgetConfig) -> Pod:
    # The breaker stays out of it: only the budget decides here.
    return Pod(UpstreamConfig(BreakerConfig(enabled=False), budget))


def granted(p: Pod, retries: int) -> int:
    """How many of `retries` RETRY decisions in a row at `now` stay RETRY."""
    return sum(p.guard(RETRY).action is Action.RETRY for _ in range(retries))


@pytest.mark.parametrize(
    ("budget", "floor"),
    [
        (RatioBudgetConfig(), 100),  # 10 per second x 10 s
        (RatioBudgetConfig(min_per_second=1), 10),
        (RatioBudgetConfig(min_per_second=3, ttl=timedelta(seconds=2)), 6),
        (RatioBudgetConfig(min_per_second=0), 0),
    ],
)
def test_a_quiet_upstream_may_retry_up_to_the_floor(budget: RatioBudgetConfig, floor: int) -> None:
    assert granted(pod(budget), floor + 5) == floor


@pytest.mark.parametrize(
    ("ratio", "calls", "retries"),
    [(0.2, 50, 10), (0.2, 4, 0), (0.2, 5, 1), (0.3, 10, 3), (1.0, 7, 7)],
)
def test_a_busy_upstream_may_retry_ratio_times_its_calls(
    ratio: float, calls: int, retries: int
) -> None:
    p = pod(RatioBudgetConfig(ratio=ratio, min_per_second=0))
    p.call(SUCCESS, times=calls)
    assert granted(p, calls + 1) == retries


def test_the_floor_and_the_ratio_add_up() -> None:
    p = pod(RatioBudgetConfig(ratio=0.2, min_per_second=1, ttl=timedelta(seconds=5)))
    p.call(SUCCESS, times=50)
    assert granted(p, 100) == 10 + 5


def test_a_refusal_names_the_budget_and_when_its_oldest_retry_leaves() -> None:
    p = pod(RatioBudgetConfig(min_per_second=1, ttl=timedelta(seconds=1)))
    assert p.at(0.0).guard(RETRY).action is Action.RETRY
    refused = p.at(0.25).guard(RETRY)
    assert (refused.action, refused.reason) == (Action.FAIL, Reason.RETRY_BUDGET_EXHAUSTED)
    assert refused.delay == timedelta(0)
    assert refused.retry_after == timedelta(milliseconds=750)
    assert refused.explanation.startswith("HTTP 503 is transient, but the upstream's retry budget")
    assert "1 retry in the last 1000 ms, and one more would pass the 1 allowed" in (
        refused.explanation
    )
    assert refused.explanation.endswith("the oldest retry leaves it in 750 ms.")


def test_a_budget_with_no_floor_and_no_calls_refuses_with_no_time_to_wait() -> None:
    refused = pod(RatioBudgetConfig(min_per_second=0)).guard(RETRY)
    assert (refused.reason, refused.retry_after) == (Reason.RETRY_BUDGET_EXHAUSTED, None)
    assert "0 retries in the last 10000 ms, and one more would pass the 0 allowed" in (
        refused.explanation
    )


@pytest.mark.parametrize(("retry_at", "granted_again"), [(0.999, False), (1.0, True)])
def test_a_withdrawal_expires_after_ttl(retry_at: float, granted_again: bool) -> None:
    p = pod(RatioBudgetConfig(min_per_second=1, ttl=timedelta(seconds=1)))
    assert granted(p.at(0.0), 1) == 1
    assert granted(p.at(retry_at), 1) == int(granted_again)


@pytest.mark.parametrize(("retry_at", "retries"), [(9.999, 5), (10.0, 0)])
def test_deposits_expire_after_ttl(retry_at: float, retries: int) -> None:
    p = pod(RatioBudgetConfig(ratio=0.5, min_per_second=0))
    p.at(0.0).call(SUCCESS, times=10)
    assert granted(p.at(retry_at), 10) == retries


def test_a_resend_admitted_as_a_retry_does_not_deposit() -> None:
    p = pod(RatioBudgetConfig(ratio=0.5, min_per_second=0))
    for _ in range(10):
        assert p.admit(retry=True).allowed
    assert granted(p, 1) == 0


def test_refused_calls_do_not_deposit() -> None:
    p = pod(RatioBudgetConfig(ratio=1.0, min_per_second=0))
    p.call(failure(retry_after=5))  # one admitted call, then a cool-down
    for _ in range(10):
        assert not p.admit().allowed
    assert granted(p, 5) == 1
    assert p.view().retries_left == 0


@pytest.mark.parametrize(
    ("failures", "allowed"),
    [(0, True), (4, True), (5, False), (10, False), (50, False)],
)
def test_a_token_bucket_stops_retries_at_half_full(failures: int, allowed: bool) -> None:
    p = pod(TokenBucketConfig(max_tokens=10))
    p.call(OUTAGE, times=failures)
    assert (p.guard(RETRY).action is Action.RETRY) is allowed


@pytest.mark.parametrize(
    ("successes", "allowed"),
    [(0, False), (1, True)],  # 5 tokens, then 5.1: above max_tokens / 2
)
def test_a_token_bucket_refills_by_token_ratio_per_success(successes: int, allowed: bool) -> None:
    p = pod(TokenBucketConfig(max_tokens=10, token_ratio=0.1))
    p.call(OUTAGE, times=5)
    p.call(SUCCESS, times=successes)
    assert (p.guard(RETRY).action is Action.RETRY) is allowed


@pytest.mark.parametrize(
    ("failures", "successes", "left"),
    # Each failed attempt takes its token before the bucket is asked, so a
    # full 10-token bucket grants 4 retries (test_a_token_bucket_stops_...).
    [(0, 0, 4), (2, 0, 2), (4, 0, 0), (5, 0, 0), (5, 1, 0), (4, 10, 1), (10, 0, 0)],
)
def test_a_token_bucket_shows_the_retries_it_would_grant_now(
    failures: int, successes: int, left: int
) -> None:
    p = pod(TokenBucketConfig(max_tokens=10, token_ratio=0.1))
    p.call(OUTAGE, times=failures)
    p.call(SUCCESS, times=successes)
    assert p.view().retries_left == left


def test_a_token_bucket_never_holds_more_than_max_tokens() -> None:
    p = pod(TokenBucketConfig(max_tokens=10))
    p.call(SUCCESS, times=100)
    p.call(OUTAGE, times=5)
    refused = p.guard(RETRY)
    assert refused.reason is Reason.RETRY_BUDGET_EXHAUSTED
    assert "retry tokens are at 5 of 10" in refused.explanation
    assert refused.retry_after is None  # time alone never refills it


def test_a_token_bucket_ignores_user_errors_and_is_not_spent_by_retries() -> None:
    p = pod(TokenBucketConfig(max_tokens=10))
    p.call(BAD_INPUT, times=50)
    assert granted(p, 200) == 200


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: RatioBudgetConfig(ratio=-0.1), "ratio"),
        (lambda: RatioBudgetConfig(ratio=10.01), "ratio"),
        (lambda: RatioBudgetConfig(ratio=float("nan")), "ratio"),
        (lambda: RatioBudgetConfig(min_per_second=-1), "min_per_second"),
        (lambda: RatioBudgetConfig(ttl=timedelta(0)), "ttl"),
        (lambda: TokenBucketConfig(max_tokens=0), "max_tokens"),
        (lambda: TokenBucketConfig(max_tokens=1001), "max_tokens"),
        (lambda: TokenBucketConfig(max_tokens=0.0004), "max_tokens"),
        (lambda: TokenBucketConfig(max_tokens=float("inf")), "max_tokens"),
        (lambda: TokenBucketConfig(token_ratio=0.0004), "token_ratio"),
        (lambda: TokenBucketConfig(token_ratio=1000.5), "token_ratio"),
        (lambda: TokenBucketConfig(token_ratio=float("nan")), "token_ratio"),
    ],
)
def test_a_budget_out_of_bounds_names_the_field(make: object, field: str) -> None:
    with pytest.raises(PolicyInputError) as info:
        make()  # type: ignore[operator]
    assert info.value.field == field


@pytest.mark.parametrize(
    ("failures", "was", "now", "granted_after"),
    [
        # grpc-core ServerRetryThrottleData.Replacement: 3 of 4 tokens become
        # 7.5 of 10, which grants 2 (6.5 and 5.5 are above 5), not 4 (full).
        (1, TokenBucketConfig(4, 1), TokenBucketConfig(10, 3), 2),
        # Half full stays half full: no retries, however large the new bucket.
        (5, TokenBucketConfig(10), TokenBucketConfig(1000), 0),
        # A fraction that does not divide evenly rounds down to a thousandth.
        (1, TokenBucketConfig(3), TokenBucketConfig(1), 0),
        # A new token_ratio alone keeps the tokens as they are.
        (2, TokenBucketConfig(10, 0.1), TokenBucketConfig(10, 0.5), 2),
        # A ratio budget with the same ttl keeps its window: 10 withdrawn of
        # the 10 the floor allows, so none left.
        (0, RatioBudgetConfig(min_per_second=1), RatioBudgetConfig(0.5, min_per_second=1), 0),
        # Another ttl: the buckets mean other times, so it starts afresh.
        (
            0,
            RatioBudgetConfig(min_per_second=1),
            RatioBudgetConfig(min_per_second=1, ttl=timedelta(seconds=20)),
            20,
        ),
        # Another kind: a new budget of that kind (a full bucket grants 4).
        (0, RatioBudgetConfig(min_per_second=1), TokenBucketConfig(10), 4),
    ],
)
def test_a_reload_carries_the_budget_over(
    failures: int, was: RetryBudgetConfig, now: RetryBudgetConfig, granted_after: int
) -> None:
    """What squawk.policy.retry_budget.carried keeps on a reload."""
    p = pod(was)
    p.call(OUTAGE, times=failures)
    if isinstance(was, RatioBudgetConfig):
        assert granted(p, 10) == 10  # spend the floor of 10
    p.state = replace(p.state, budget=carried(p.state.budget, was, now))
    p.config = replace(p.config, retry_budget=now)
    assert p.view().retries_left == granted_after
