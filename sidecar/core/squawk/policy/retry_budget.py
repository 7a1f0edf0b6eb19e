"""The retry budget: one per (profile, upstream), shared by the whole pod.

It bounds the retries the pod sends an upstream, so that when the upstream
is slow every executor's retries do not multiply its load. Two kinds (policy
file `retry_budget:`), chosen with `kind`:

`kind: ratio` (the default): Finagle's RetryBudget, as Linkerd uses it.

| field | default | bounds | meaning |
| --- | --- | --- | --- |
| ratio | 0.2 | (0, 1] | retries may be this share of the calls admitted in the last ttl |
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
and retries are a share of all admitted calls, as the README states.

`kind: token_bucket`: gRFC A6's retry throttling.

| field | default | bounds | meaning |
| --- | --- | --- | --- |
| max_tokens | 10 | 1..1000 | the bucket's size; it starts full |
| token_ratio | 0.1 | [0.001, 1] | what each success adds back, up to max_tokens |

Each counted failure (see squawk.policy.outcome) takes one token, each
success adds token_ratio, and retries are refused while the tokens are <=
max_tokens / 2. Tokens are counted in thousandths, as A6 does, so the sums
are exact. Time does not refill it: only successes do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta
from typing import ClassVar

from .limits import MAX_TOKENS, check_count, check_positive, check_ratio
from .outcome import Verdict
from .timing import EMPTY, Window, added, expires_at, rolled, seconds, time_left
from .types import PolicyInputError

__all__ = [
    "BUDGET_BUCKETS",
    "Budget",
    "RatioBudgetConfig",
    "RetryBudgetConfig",
    "TokenBucketConfig",
    "deposit",
    "describe",
    "is_fresh",
    "record",
    "retries_left",
    "withdraw",
]

# Finagle's WindowedAdder cuts its ttl into 10 slices.
BUDGET_BUCKETS = 10
_MILLI = 1000
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
        check_ratio("ratio", self.ratio)
        check_count("min_per_second", self.min_per_second, low=0)
        check_positive("ttl", self.ttl)
        object.__setattr__(self, "_ttl_s", seconds(self.ttl))
        object.__setattr__(self, "_floor", self.min_per_second * self._ttl_s)


@dataclass(frozen=True, slots=True)
class TokenBucketConfig:
    kind: ClassVar[str] = "token_bucket"
    max_tokens: int = 10
    token_ratio: float = 0.1
    _max: int = field(init=False, repr=False, compare=False)
    _refill: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_count("max_tokens", self.max_tokens, high=MAX_TOKENS)
        check_ratio("token_ratio", self.token_ratio)
        refill = round(self.token_ratio * _MILLI)
        if refill < 1:
            raise PolicyInputError(
                "token_ratio",
                f"must be at least 0.001 (tokens count in thousandths), got {self.token_ratio}",
            )
        object.__setattr__(self, "_max", self.max_tokens * _MILLI)
        object.__setattr__(self, "_refill", refill)


RetryBudgetConfig = RatioBudgetConfig | TokenBucketConfig


@dataclass(frozen=True, slots=True)
class Budget:
    # ratio: (deposits, withdrawals) per bucket over the last ttl.
    window: Window = EMPTY
    # token_bucket: the tokens taken, in thousandths; 0 is a full bucket, so
    # a fresh Budget needs no config to start full.
    spent: int = 0


def deposit(budget: Budget, config: RetryBudgetConfig, now: float) -> Budget:
    """The budget after one admitted first call."""
    if isinstance(config, TokenBucketConfig):
        return budget
    window = added(budget.window, now, config._ttl_s, BUDGET_BUCKETS, 1, 0)
    # Built directly here and below: dataclasses.replace costs twice as much,
    # and every Admit and every granted retry come this way.
    return Budget(window, budget.spent)


def _grants(calls: int, retries: int, config: RatioBudgetConfig) -> bool:
    # retries + 1 <= ratio * calls + floor, compared as a quotient: a ratio
    # read from "0.3" equals 3 / 10 exactly, but 0.3 * 10 is 3.0000000000000004.
    need = retries + 1 - config._floor
    return need <= 0 or (calls > 0 and need / calls <= config.ratio)


def withdraw(budget: Budget, config: RetryBudgetConfig, now: float) -> Budget | None:
    """The budget after granting one retry, or None when the retry would overdraw."""
    if isinstance(config, TokenBucketConfig):
        return budget if 2 * (config._max - budget.spent) > config._max else None
    window = rolled(budget.window, now, config._ttl_s, BUDGET_BUCKETS)
    if not _grants(window.first, window.second, config):
        return None
    return Budget(added(window, now, config._ttl_s, BUDGET_BUCKETS, 0, 1), budget.spent)


def record(budget: Budget, config: RetryBudgetConfig, verdict: Verdict) -> Budget:
    """The budget after one call's outcome: only a token bucket reads outcomes."""
    if isinstance(config, RatioBudgetConfig) or verdict is Verdict.IGNORED:
        return budget
    if verdict is Verdict.FAILURE:
        spent = min(budget.spent + _MILLI, config._max)
    else:
        spent = max(budget.spent - config._refill, 0)
    return budget if spent == budget.spent else Budget(budget.window, spent)


def is_fresh(budget: Budget, config: RetryBudgetConfig, now: float) -> bool:
    """Whether `budget` behaves as a new Budget from `now` on."""
    if isinstance(config, TokenBucketConfig):
        return budget.spent == 0
    return not rolled(budget.window, now, config._ttl_s, BUDGET_BUCKETS).slots


def retries_left(budget: Budget, config: RetryBudgetConfig, now: float) -> int:
    """How many retries the budget would grant now, if no call came in between.

    A token bucket grants every retry while it is above half full, so this is
    the failures it can take before it stops: a count of the same kind.
    """
    if isinstance(config, TokenBucketConfig):
        above = config._max - budget.spent - config._max / 2
        return max(0, math.ceil(above / _MILLI))
    window = rolled(budget.window, now, config._ttl_s, BUDGET_BUCKETS)
    room = config.ratio * window.first + config._floor - window.second
    # The same tolerance as _grants' exact quotient, for the display only.
    return max(0, math.floor(room + 1e-9))


def describe(budget: Budget, config: RetryBudgetConfig, now: float) -> tuple[str, timedelta | None]:
    """(the clause a refusal's explanation names the budget's state with, as
    in "the upstream's <clause>", and the time until the oldest retry leaves
    a ratio budget; None for a token bucket)."""
    if isinstance(config, TokenBucketConfig):
        tokens = (config._max - budget.spent) / _MILLI
        return (
            f"retry tokens are at {tokens:g} of {config.max_tokens}, at or below the "
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
