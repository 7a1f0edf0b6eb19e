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
(`throttle_verdict`); the breaker and the cool-down count it only when the
profile retries its status, so a 4xx the server refuses to see again cannot
open the pod's breaker for every caller.

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

from .limits import check_status
from .types import PolicyInputError

__all__ = [
    "STEP_TRANSIENT",
    "Outcome",
    "Verdict",
    "check_outcome",
    "counts_as_failure",
    "throttle_verdict",
    "verdict",
]

# The default profile's transient set (squawk.policy.profiles re-exports it),
# defined here so that a bare UpstreamConfig counts what the default profile
# retries without importing the profiles.
STEP_TRANSIENT = frozenset({408, 429, *range(500, 600)})


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
    throttle whatever the status (see throttle_verdict).
    """

    success: bool
    http_status: int = 0
    transport_failure: bool = False
    retry_after: timedelta | None = None
    cancelled: bool = False
    refused_retry: bool = False


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
