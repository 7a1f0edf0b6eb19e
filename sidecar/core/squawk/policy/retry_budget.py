"""The retry budget: one per (profile, upstream), shared by the whole pod.

It bounds the retries the pod sends an upstream, so that when the upstream
is slow every executor's retries do not multiply its load. Two kinds (policy
file `retry_budget:`), chosen with `kind`:

`kind: ratio` (the default): Finagle's RetryBudget, as Linkerd uses it.

| field | default | bounds | meaning |
| --- | --- | --- | --- |
| ratio | 0.2 | [0, 10] | retries may be this share of the calls admitted in the last ttl |
| min_per_second | 10 | >= 0 | plus this many per second of ttl: a quiet upstream can retry |
| ttl | 10s | > 0 | how long a call's deposit and a retry's withdrawal count |

Each admitted first call deposits one call; each retry guard_retry grants
withdraws one retry. A retry is granted while, over the last ttl,
`retries + 1 <= ratio * calls + min_per_second * ttl`; one that would
overdraw is refused. With the defaults a quiet upstream may be retried 100
times per 10 s, and a busy one 20 times per 100 calls on top. Deposits and
withdrawals both expire after ttl, counted in a window of 10 buckets as
Finagle's WindowedAdder does (see squawk.policy.timing), so a deposit stays
for between 9/10 ttl and ttl. A resend admitted with `retry=True` does not
deposit. The daemon's Admit cannot tell a resend from a first call (the
request has no such field), so over the wire every admitted call deposits
and retries are a share of all admitted calls, as docs/upstreams.md states.

`kind: token_bucket`: gRFC A6's retry throttling.

| field | default | bounds | meaning |
| --- | --- | --- | --- |
| max_tokens | 10 | (0, 1000], in thousandths | the bucket's size; it starts full |
| token_ratio | 0.1 | (0, 1000], in thousandths | what each success adds back, up to max_tokens |

Each counted failure (see squawk.policy.outcome: a failure the profile
retries) takes one token, each success adds token_ratio, and retries are
refused while the tokens are <= max_tokens / 2. Tokens are counted in
thousandths, as A6 and grpc-core do, so the sums are exact; both numbers are
read to three decimals (A6: "up to 3 decimal places"), and one that rounds
to zero is refused. Time does not refill it: only successes do.

A ratio of 0 grants only the min_per_second reserve, and with
min_per_second 0 as well nothing: Finagle's RetryBudget.Empty. See
squawk.policy.limits for why a ratio stops at 10 and a token_ratio at 1000.

On a reload that changes the settings, `carried` says what the budget keeps:
a token bucket keeps its fill fraction (grpc-core's ServerRetryThrottleData
takes over its predecessor's fraction; grpc-go starts a new bucket full), so
a reload during an outage does not refill it; a ratio budget keeps its
window while ttl stays the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta
from typing import ClassVar

from .limits import MAX_RETRY_RATIO, MAX_TOKENS, check_count, check_number, check_positive
from .outcome import Verdict
from .timing import EMPTY, Window, added, expires_at, rolled, seconds, time_left
from .types import PolicyInputError

__all__ = [
    "BUDGET_BUCKETS",
    "MILLI",
    "Budget",
    "RatioBudgetConfig",
    "RetryBudgetConfig",
    "TokenBucketConfig",
    "carried",
    "deposit",
    "describe",
    "grants",
    "grants_tokens",
    "is_fresh",
    "record",
    "retries_left",
    "room",
    "withdraw",
]

# Finagle's WindowedAdder cuts its ttl into 10 slices.
BUDGET_BUCKETS = 10
MILLI = 1000
_ONE_MS = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class RatioBudgetConfig:
    kind: ClassVar[str] = "ratio"
    ratio: float = 0.2
    min_per_second: int = 10
    ttl: timedelta = timedelta(seconds=10)
    _ttl_s: float = field(init=False, repr=False, compare=False)
    # The retries a quiet upstream may always have: min_per_second * ttl.
    _floor: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_number("ratio", self.ratio, MAX_RETRY_RATIO, zero=True)
        check_count("min_per_second", self.min_per_second, low=0)
        check_positive("ttl", self.ttl)
        object.__setattr__(self, "_ttl_s", seconds(self.ttl))
        object.__setattr__(self, "_floor", self.min_per_second * self._ttl_s)


@dataclass(frozen=True, slots=True)
class TokenBucketConfig:
    kind: ClassVar[str] = "token_bucket"
    max_tokens: float = 10
    token_ratio: float = 0.1
    _max: int = field(init=False, repr=False, compare=False)
    _refill: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_max", _thousandths("max_tokens", self.max_tokens))
        object.__setattr__(self, "_refill", _thousandths("token_ratio", self.token_ratio))


RetryBudgetConfig = RatioBudgetConfig | TokenBucketConfig


def _thousandths(name: str, value: float) -> int:
    check_number(name, value, MAX_TOKENS)
    milli = round(value * MILLI)
    if milli < 1:
        raise PolicyInputError(
            name, f"must be at least 0.001 (tokens count in thousandths), got {value}"
        )
    return milli


@dataclass(frozen=True, slots=True)
class Budget:
    # ratio: (deposits, withdrawals) per bucket over the last ttl.
    window: Window = EMPTY
    # token_bucket: the tokens taken, in thousandths; 0 is a full bucket, so
    # a fresh Budget needs no config to start full.
    spent: int = 0


def deposit(budget: Budget, config: RetryBudgetConfig, now: float, calls: int = 1) -> Budget:
    """The budget after `calls` admitted first calls (one grant's permits)."""
    if isinstance(config, TokenBucketConfig):
        return budget
    window = added(budget.window, now, config._ttl_s, BUDGET_BUCKETS, calls, 0)
    # Built directly here and below: dataclasses.replace costs twice as much,
    # and every Admit and every granted retry come this way.
    return Budget(window, budget.spent)


def grants(calls: int, retries: int, config: RatioBudgetConfig) -> bool:
    """Whether a ratio budget of `calls` first calls and `retries` granted
    grants one more: the one rule, for a pod's budget and the fleet's."""
    # retries + 1 <= ratio * calls + floor, compared as a quotient: a ratio
    # read from "0.3" equals 3 / 10 exactly, but 0.3 * 10 is 3.0000000000000004.
    need = retries + 1 - config._floor
    return need <= 0 or (calls > 0 and need / calls <= config.ratio)


def withdraw(budget: Budget, config: RetryBudgetConfig, now: float) -> Budget | None:
    """The budget after granting one retry, or None when the retry would overdraw."""
    if isinstance(config, TokenBucketConfig):
        return budget if grants_tokens(budget.spent, config) else None
    window = rolled(budget.window, now, config._ttl_s, BUDGET_BUCKETS)
    if not grants(window.first, window.second, config):
        return None
    return Budget(added(window, now, config._ttl_s, BUDGET_BUCKETS, 0, 1), budget.spent)


def grants_tokens(spent: int, config: TokenBucketConfig) -> bool:
    """Whether a token bucket with `spent` thousandths taken grants a retry:
    above half full (gRPC A6). The one rule, for a pod's bucket and the fleet's."""
    return 2 * (config._max - spent) > config._max


def record(budget: Budget, config: RetryBudgetConfig, verdict: Verdict) -> Budget:
    """The budget after one call's outcome: only a token bucket reads outcomes."""
    if isinstance(config, RatioBudgetConfig) or verdict is Verdict.IGNORED:
        return budget
    if verdict is Verdict.FAILURE:
        spent = min(budget.spent + MILLI, config._max)
    else:
        spent = max(budget.spent - config._refill, 0)
    return budget if spent == budget.spent else Budget(budget.window, spent)


def carried(budget: Budget, was: RetryBudgetConfig, now: RetryBudgetConfig) -> Budget:
    """The budget a reload from settings `was` to `now` leaves.

    Token bucket to token bucket: the same fraction of tokens, rounded down
    to a thousandth (grpc-core's ServerRetryThrottleData, whose Replacement
    test turns 3 of 4 tokens into 7.5 of 10). Ratio to ratio with the same
    ttl: the same window, read with the new ratio. Anything else (a new ttl,
    whose buckets no longer mean the same time, or a new kind): a new
    budget, as a never-seen upstream has.
    """
    if isinstance(was, TokenBucketConfig) and isinstance(now, TokenBucketConfig):
        tokens = (was._max - budget.spent) * now._max // was._max
        spent = now._max - tokens
        return budget if spent == budget.spent else Budget(budget.window, spent)
    if (
        isinstance(was, RatioBudgetConfig)
        and isinstance(now, RatioBudgetConfig)
        and was.ttl == now.ttl
    ):
        return budget
    return Budget()


def is_fresh(budget: Budget, config: RetryBudgetConfig, now: float) -> bool:
    """Whether `budget` behaves as a new Budget from `now` on."""
    if isinstance(config, TokenBucketConfig):
        return budget.spent == 0
    return not rolled(budget.window, now, config._ttl_s, BUDGET_BUCKETS).slots


def retries_left(budget: Budget, config: RetryBudgetConfig, now: float) -> int:
    """How many retries the budget would grant now, one after another, if no
    other call came in between.

    A ratio budget: the withdrawals it has room for. A token bucket: each
    failed attempt takes its token before the bucket is asked (as in
    grpc-core's RecordFailure, and DecideRetry records the failure first), so
    this is the failures after which it is still above half full: the k >= 1
    with tokens - k > max_tokens / 2. A full 10-token bucket grants 4.
    """
    if isinstance(config, TokenBucketConfig):
        # 2 * (tokens - k) > max, in thousandths, for k = 1..n.
        above = 2 * (config._max - budget.spent) - config._max
        return max(0, -(-above // (2 * MILLI)) - 1)
    window = rolled(budget.window, now, config._ttl_s, BUDGET_BUCKETS)
    return room(window.first, window.second, config)


def room(calls: int, retries: int, config: RatioBudgetConfig) -> int:
    """The withdrawals a ratio budget of `calls` and `retries` has room for."""
    left = config.ratio * calls + config._floor - retries
    # The same tolerance as grants' exact quotient, for the display only.
    return max(0, math.floor(left + 1e-9))


def describe(budget: Budget, config: RetryBudgetConfig, now: float) -> tuple[str, timedelta | None]:
    """(the clause a refusal's explanation names the budget's state with, as
    in "the upstream's <clause>", and the time until the oldest retry leaves
    a ratio budget; None for a token bucket)."""
    if isinstance(config, TokenBucketConfig):
        tokens = (config._max - budget.spent) / MILLI
        return (
            f"retry tokens are at {tokens:g} of {config.max_tokens:g}, at or below the "
            f"{config.max_tokens / 2:g} that stops retries until successes refill them",
            None,
        )
    window = rolled(budget.window, now, config._ttl_s, BUDGET_BUCKETS)
    allowed = config.ratio * window.first + config._floor
    retries = "1 retry" if window.second == 1 else f"{window.second} retries"
    clause = (
        f"retry budget is spent: {retries} in the last {round(config._ttl_s * 1000)} ms, "
        f"and one more would pass the {allowed:g} allowed "
        f"({config.ratio:g} x {window.first} calls + {config._floor:g})"
    )
    oldest = next((slot[0] for slot in window.slots if slot[2]), None)
    if oldest is None:
        return clause, None
    left = time_left(expires_at(oldest, config._ttl_s, BUDGET_BUCKETS), now)
    return f"{clause}; the oldest retry leaves it in {left // _ONE_MS} ms", left
