"""What an upstream call's outcome counts as, for the upstream's shared state.

The one rule: only an infrastructure failure is a failure -- a transport
failure (or no status at all, as decide() reads status 0), 408, 429 or any
5xx. Those say the upstream is unwell, whoever called it.

Everything else that is not a success is not counted at all: another 4xx
(the caller's input was wrong), 401/403 (the caller's credentials), a 1xx-3xx
reported as a failure, and a cancelled call. Counting them as successes
would let a caller's bad input hold an unwell upstream's breaker closed;
counting them as failures would let one caller's bad input open it for the
whole pod. The executor guide's resilience module ignores user errors and
cancellations the same way.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta

from .limits import check_status
from .types import PolicyInputError

__all__ = ["INFRASTRUCTURE_STATUSES", "Outcome", "Verdict", "check_outcome", "counts_as_failure"]

INFRASTRUCTURE_STATUSES = frozenset({408, 429, *range(500, 600)})


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
    throttle whatever the status, so it counts as a failure.
    """

    success: bool
    http_status: int = 0
    transport_failure: bool = False
    retry_after: timedelta | None = None
    cancelled: bool = False
    refused_retry: bool = False

    @property
    def verdict(self) -> Verdict:
        if self.cancelled:
            return Verdict.IGNORED
        if self.success:
            return Verdict.SUCCESS
        if self.refused_retry or counts_as_failure(self.http_status, self.transport_failure):
            return Verdict.FAILURE
        return Verdict.IGNORED


def counts_as_failure(http_status: int, transport_failure: bool) -> bool:
    """Whether a failed call counts against its upstream (see the module docstring)."""
    return transport_failure or http_status == 0 or http_status in INFRASTRUCTURE_STATUSES


def check_outcome(outcome: Outcome) -> None:
    """Raise PolicyInputError naming the first field the state cannot accept."""
    check_status(outcome.http_status)
    if outcome.retry_after is not None and outcome.retry_after < timedelta(0):
        raise PolicyInputError("retry_after", "must not be negative")
