"""The values the policy core reads and returns.

Every value is frozen and built fresh per call, so concurrent calls never
share mutable state. The enum numbers equal the squawk.v1 wire numbers, which
makes the conversion at the gRPC boundary a plain int cast.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import NamedTuple

__all__ = [
    "Action",
    "AttemptState",
    "BreakerState",
    "Category",
    "Classification",
    "Criticality",
    "Decision",
    "Failure",
    "PaceSource",
    "PolicyInputError",
    "Reason",
]


class Category(enum.IntEnum):
    INPUT_ERROR = 1
    NOT_FOUND = 2
    RATE_LIMIT = 3
    AUTH_ERROR = 4
    SERVICE_ERROR = 5


class Action(enum.IntEnum):
    RETRY = 1
    CORRECT = 2
    FAIL = 3


class Reason(enum.IntEnum):
    EXPLICIT_NOT_RETRYABLE = 1
    TERMINAL_STATUS = 2
    TRANSIENT_STATUS = 3
    TRANSPORT_FAILURE = 4
    CORRECTION_ELIGIBLE = 5
    HITL_PROTECTED = 6
    SINGLE_DISPATCH = 7
    ATTEMPTS_EXHAUSTED = 8
    CORRECTION_BUDGET_EXHAUSTED = 9
    NO_CORRECTION_AVAILABLE = 10
    DEADLINE_EXCEEDED = 11
    CANCELLED = 12
    NOT_RETRYABLE_STATUS = 13
    # The upstream's shared state refused: see squawk.policy.upstream.
    CIRCUIT_OPEN = 14
    RETRY_BUDGET_EXHAUSTED = 15
    UPSTREAM_COOLING_DOWN = 16
    # Admit only: the call may be dispatched.
    ADMITTED = 17
    # The server's grpc-retry-pushback-ms asked not to retry (gRFC A6).
    SERVER_PUSHBACK = 18
    # Admit only: the upstream's pace cannot start the call in time, or the
    # pod is shedding a sustained overload (squawk.policy.pacer).
    UPSTREAM_SATURATED = 19
    # A server's wait past the profile's max_retry_wait, with no deadline
    # to judge it by (squawk.policy.decide).
    WAIT_TOO_LONG = 20
    IN_FLIGHT_CAP = 21


class BreakerState(enum.IntEnum):
    """A circuit breaker's state, numbered as squawk.v1's BREAKER_STATE_*."""

    CLOSED = 1
    OPEN = 2
    HALF_OPEN = 3


class Criticality(enum.IntEnum):
    """How much a call matters when the pod cannot serve every call: the
    lower levels are shed first (squawk.v1 Criticality)."""

    CRITICAL_PLUS = 1
    CRITICAL = 2
    SHEDDABLE_PLUS = 3
    SHEDDABLE = 4


class PaceSource(enum.IntEnum):
    """Where an upstream's pace comes from, numbered as squawk.v1's PACE_SOURCE_*."""

    # Nothing limits the upstream: calls start at once.
    NONE = 1
    # The policy's rate_limit.
    POLICY = 2
    # The upstream's own rate-limit headers on recent outcomes.
    HEADERS = 3
    # Learned from throttling (CUBIC), switched off again after a quiet period.
    LEARNED = 4


class PolicyInputError(ValueError):
    """A request the policy cannot answer; `field` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


_NO_HEADERS: Mapping[str, str] = {}


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed upstream call, as a tool saw it."""

    error_message: str = ""
    http_status: int = 0
    transport_failure: bool = False
    headers: Mapping[str, str] = field(default_factory=lambda: _NO_HEADERS)


# The two answers are NamedTuples, not frozen dataclasses: the core builds
# them on every call, and a frozen dataclass's __init__ (one
# object.__setattr__ per field) costs three times as much. Both are still
# immutable values with named fields; the inputs stay dataclasses, which
# callers derive with dataclasses.replace().
class Classification(NamedTuple):
    http_status: int
    category: Category
    retryable: bool
    code: str
    upstream_status: int
    redacted_message: str
    retry_after: timedelta | None


@dataclass(frozen=True, slots=True)
class AttemptState:
    """Everything DecideRetry knows about the attempt that just failed.

    `None` means "not given: use the profile's default", never zero.
    """

    attempt: int
    max_attempts: int | None = None
    http_status: int = 0
    transport_failure: bool = False
    response_body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=lambda: _NO_HEADERS)
    validation_retries_used: int = 0
    max_validation_retries: int | None = None
    correction_available: bool = False
    hitl_approved: bool = False
    delegated_orchestrator: bool = False
    cancelled: bool = False
    deadline: timedelta | None = None
    capability: str = ""
    upstream: str = ""


class Decision(NamedTuple):
    action: Action
    delay: timedelta
    reason: Reason
    explanation: str
    consumes_attempt: bool
    classification: Classification
    # The envelope's error.retryable: True/False when declared, None when not.
    declared_retryable: bool | None = None
    # Set only when the upstream's shared state failed a RETRY (guard_retry):
    # how long until the upstream may be tried again. CIRCUIT_OPEN: until the
    # breaker half-opens; RETRY_BUDGET_EXHAUSTED: until the oldest retry
    # leaves a ratio budget (None for a token bucket, which only successes
    # refill); DEADLINE_EXCEEDED: the cool-down left. decide() leaves it None.
    retry_after: timedelta | None = None
