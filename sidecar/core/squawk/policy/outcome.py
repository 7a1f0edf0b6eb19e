"""What an upstream call's outcome counts as, for the upstream's shared state.

The one rule: a failure counts against the upstream exactly when the
profile would retry it -- a transport failure (or no status at all, as
decide() reads status 0), or a status in the profile's retryable set that is
not also terminal (decide() checks the terminal set first). gRFC A6 counts
the same thing for its retry throttle: "a failed RPC whose status is in
retryableStatusCodes". The upstream config carries the set
(UpstreamConfig.failure_statuses, built by the profile), so the breaker, the
retry budget and the cool-down read one verdict: a status the profile
retries spends the budget's tokens, and one it does not retry cannot drain
them. The default profile retries 408, 429 and every 5xx; profile "llm" only
429, 500, 502, 503, 504 and 529, so its 501 is not counted. A failure whose
grpc-retry-pushback-ms refuses a retry also counts against the token bucket
whatever its status, as A6 counts it against its throttle
(`throttle_verdict`); the cool-down counts it only when the profile retries
its status, and the breaker not at all (it is throttled, below), so a 4xx
the server refuses to see again cannot open the pod's breaker for every
caller.

Throttling is not failure: a counted failure that says the upstream is full
rather than broken -- a 429, a 529, a 503 with a Retry-After (or
grpc-retry-pushback-ms, which `retry_after` also carries), or a refusing
pushback -- is *throttled* (`is_throttled`). The token bucket and the
cool-down read it as any failure (a throttled retry still spends the
throttle; its Retry-After still cools the upstream), but the breaker does
not count it at all (`breaker_verdict`): neither a failure, which would let
a healthy-but-full upstream open the pod's breaker and be refused for the
whole open period, nor a success, which it is not evidence of. A profile
may say otherwise (circuit_breaker.count_throttling). The wire carries only
HTTP statuses, so a gRPC RESOURCE_EXHAUSTED reaches the state only as the
HTTP status the caller reports for it. gRFC A6 keeps pushback apart from
failure the same way; Finagle's and the AWS SDKs' throttling errors feed
their rate limiting, not their failure accrual.

Everything else that is not a success is not counted at all: a status the
profile does not retry (the caller's input, its credentials, a 501 under
"llm"), a 1xx-3xx reported as a failure, and a cancelled call. Counting them
as successes would let a caller's bad input hold an unwell upstream's
breaker closed; counting them as failures would let one caller's bad input
open it for the whole pod. The executor guide's resilience module ignores
user errors and cancellations the same way.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta

from .limits import MAX_COST, check_status
from .ratelimit import RateLimitHint
from .types import PolicyInputError

__all__ = [
    "NEAR_LIMIT",
    "OVERLOAD_STATUSES",
    "STEP_TRANSIENT",
    "THROTTLING_STATUSES",
    "Outcome",
    "Verdict",
    "breaker_verdict",
    "check_cost",
    "check_outcome",
    "counts_as_failure",
    "is_near_limit",
    "is_quota_throttle",
    "is_throttled",
    "throttle_verdict",
    "verdict",
]

# The default profile's transient set (squawk.policy.profiles re-exports it),
# defined here so that a bare UpstreamConfig counts what the default profile
# retries without importing the profiles.
STEP_TRANSIENT = frozenset({408, 429, *range(500, 600)})
# The statuses that say "too many requests" whatever else the reply carries;
# a 503 says it only with a wait hint (see is_throttled).
THROTTLING_STATUSES = frozenset({429, 529})
# Of those, the ones that say the upstream is overloaded for every caller,
# not that this one is over its quota (see is_quota_throttle).
OVERLOAD_STATUSES = frozenset({529})


class Verdict(enum.Enum):
    SUCCESS = "success"
    FAILURE = "failure"
    # Not counted: neither the breaker, the budget nor the cool-down sees it.
    IGNORED = "ignored"


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one admitted call to the upstream ended.

    `success` wins: a successful call's status is not read. `retry_after` is
    the server's wait hint (Retry-After or grpc-retry-pushback-ms), already
    parsed, e.g. by squawk.policy.retry_after; None when it sent none.
    `refused_retry`: its grpc-retry-pushback-ms asked not to retry
    (squawk.policy.pushback_refuses), which gRFC A6 counts against the
    throttle whatever the status (see throttle_verdict). A 429, a 529, a
    503 with `retry_after` and a refused retry are throttled (is_throttled).
    `latency` (how long the call took), `cost` (its real cost in the
    upstream's token units, 0 = unknown), `estimated` (the cost Admit was
    given, 0 = unknown) and `hint` (its rate-limit headers, read by
    squawk.policy.ratelimit) feed the upstream's pacer (squawk.policy.pacer).
    `admission_id`: the admission the report named (0 = none), which the
    daemon looks up (see upstream.record_outcome's `admitted_at`). `age`:
    how long before the report the response came (seconds); `hint` and
    `retry_after` are already read as of then, and the pacer reads the
    hint at that moment.
    """

    success: bool
    http_status: int = 0
    transport_failure: bool = False
    retry_after: timedelta | None = None
    cancelled: bool = False
    refused_retry: bool = False
    latency: timedelta | None = None
    cost: float = 0.0
    estimated: float = 0.0
    hint: RateLimitHint | None = None
    admission_id: int = 0
    age: float = 0.0


def verdict(outcome: Outcome, failure_statuses: frozenset[int]) -> Verdict:
    """What `outcome` counts as, for a profile that retries `failure_statuses`
    (UpstreamConfig.verdict passes its own; see the module docstring)."""
    if outcome.cancelled:
        return Verdict.IGNORED
    if outcome.success:
        return Verdict.SUCCESS
    if counts_as_failure(outcome.http_status, outcome.transport_failure, failure_statuses):
        return Verdict.FAILURE
    return Verdict.IGNORED


def throttle_verdict(outcome: Outcome, failure_statuses: frozenset[int]) -> Verdict:
    """What `outcome` counts as for the token bucket: a refusing pushback is
    a failure whatever its status (gRFC A6; grpc-go's csAttempt.shouldRetry
    calls throttle() before it reads the code)."""
    if outcome.refused_retry and not outcome.cancelled and not outcome.success:
        return Verdict.FAILURE
    return verdict(outcome, failure_statuses)


def is_throttled(outcome: Outcome) -> bool:
    """Whether a failed `outcome` says the upstream is full, not broken: a
    429 or 529, a 503 with a wait hint, or a refusing pushback (see the
    module docstring). Successes and cancellations are never throttled."""
    if outcome.success or outcome.cancelled or outcome.transport_failure:
        return False
    status = outcome.http_status
    return (
        status in THROTTLING_STATUSES
        or (status == 503 and outcome.retry_after is not None)
        or outcome.refused_retry
    )


# The share of a quota used past which an answer is "near its limit":
# envoyproxy/ratelimit's near_limit ratio (its NEAR_LIMIT_RATIO, 0.8).
NEAR_LIMIT = 0.8


def is_near_limit(outcome: Outcome) -> bool:
    """Whether an answer that was not throttled says, in its rate-limit
    headers, that NEAR_LIMIT or more of a quota (requests or tokens) is
    used: the warning before the upstream refuses (envoyproxy/ratelimit
    counts such hits as near_limit, a refusal as over_limit; here the
    refusal is a throttle)."""
    hint = outcome.hint
    if hint is None or is_throttled(outcome):
        return False
    return any(
        q is not None
        and q.limit is not None
        and q.remaining is not None
        and q.limit > 0
        and q.limit - q.remaining >= NEAR_LIMIT * q.limit
        for q in (hint.requests, hint.tokens)
    )


def is_quota_throttle(outcome: Outcome) -> bool:
    """Whether a throttled `outcome` says the caller is over a quota, the
    only throttle a pace can learn a rate from: not a 529. Anthropic
    documents 529 overloaded_error as "the API is temporarily overloaded"
    for all users, apart from 429 rate_limit_error ("your account has hit a
    rate limit"): sending less does not make it stop, so the pacer would cut
    to the floor and shed the steps the retries would have completed. It
    is still throttled for the breaker, the retry budget and the cool-down."""
    return is_throttled(outcome) and outcome.http_status not in OVERLOAD_STATUSES


def breaker_verdict(
    outcome: Outcome, failure_statuses: frozenset[int], count_throttling: bool = False
) -> Verdict:
    """What `outcome` counts as for the breaker: verdict(), except that a
    throttled failure is not counted unless `count_throttling` (the
    profile's circuit_breaker.count_throttling) says it is."""
    counted = verdict(outcome, failure_statuses)
    if counted is Verdict.FAILURE and not count_throttling and is_throttled(outcome):
        return Verdict.IGNORED
    return counted


def counts_as_failure(
    http_status: int, transport_failure: bool, failure_statuses: frozenset[int] = STEP_TRANSIENT
) -> bool:
    """Whether a failed call counts against its upstream: whether the profile
    that retries `failure_statuses` would retry it (see the module docstring)."""
    return transport_failure or http_status == 0 or http_status in failure_statuses


def check_outcome(outcome: Outcome) -> None:
    """Raise PolicyInputError naming the first field the state cannot accept."""
    check_status(outcome.http_status)
    if outcome.retry_after is not None and outcome.retry_after < timedelta(0):
        raise PolicyInputError("retry_after", "must not be negative")
    if outcome.latency is not None and outcome.latency < timedelta(0):
        raise PolicyInputError("latency", "must not be negative")
    check_cost("cost", outcome.cost)
    check_cost("estimated", outcome.estimated)


def check_cost(field: str, value: float) -> None:
    """A cost in token units: finite, 0 (unknown) to MAX_COST."""
    if not 0.0 <= value <= MAX_COST:
        raise PolicyInputError(field, f"must be a number from 0 to {MAX_COST:g}, got {value}")
