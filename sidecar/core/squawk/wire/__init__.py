"""Conversion between squawk.v1 messages and the policy core's values.

The enum numbers of the core equal the wire numbers, so enums convert with a
plain int. Nothing here decides anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import NamedTuple

from squawk.policy import (
    Admission,
    AttemptState,
    BreakerState,
    Classification,
    Criticality,
    Decision,
    Failure,
    Outcome,
    PolicyInputError,
    RateLimitHint,
    Reason,
    pushback_refuses,
    rate_limit_hint,
    retry_after,
)
from squawk.policy.fair import MAX_WEIGHT, Fairness
from squawk.policy.limits import (
    MAX_ADMIT_DEADLINE,
    MAX_NAME_CHARS,
    MAX_OUTCOME_AGE,
    MAX_PERMITS,
    check_chars,
    check_count,
    check_headers,
    check_number,
    check_status,
    duration,
)
from squawk.policy.outcome import check_cost
from squawk.policy.pacer import LEASE
from squawk.policy.shed import explain
from squawk.policy.text import quoted
from squawk.v1 import policy_pb2 as pb

__all__ = [
    "NO_ADMIT_ARGS",
    "UNTRACKED",
    "AdmitArgs",
    "admission_id",
    "admission_message",
    "admit_args",
    "attempt_state",
    "classification_message",
    "decision_message",
    "failed_attempt",
    "failure",
    "fill_classification",
    "fill_decision",
    "hint",
    "outcome",
    "rate_limited",
    "untracked",
]


def failure(request: pb.ClassifyRequest) -> Failure:
    return Failure(
        error_message=request.error_message,
        http_status=request.http_status,
        transport_failure=request.transport_failure,
        headers=request.headers,
    )


def attempt_state(request: pb.DecideRetryRequest) -> AttemptState:
    return AttemptState(
        attempt=request.attempt,
        max_attempts=request.max_attempts if request.HasField("max_attempts") else None,
        http_status=request.http_status,
        transport_failure=request.transport_failure,
        response_body=request.response_body,
        headers=request.headers,
        validation_retries_used=request.validation_retries_used,
        max_validation_retries=(
            request.max_validation_retries if request.HasField("max_validation_retries") else None
        ),
        correction_available=request.correction_available,
        hitl_approved=request.hitl_approved,
        delegated_orchestrator=request.delegated_orchestrator,
        cancelled=request.cancelled,
        deadline=(
            duration("deadline", request.deadline.seconds, request.deadline.nanos)
            if request.HasField("deadline")
            else None
        ),
        capability=request.capability,
        upstream=request.upstream,
    )


def fill_classification(c: Classification, out: pb.ClassifyResponse) -> pb.ClassifyResponse:
    """Write `c` into `out`. Filling a message in place, rather than building
    nested messages that protobuf then copies, halves the conversion's cost."""
    out.http_status = c.http_status
    out.category = c.category  # type: ignore[assignment]
    out.retryable = c.retryable
    out.code = c.code
    out.upstream_status = c.upstream_status
    out.redacted_message = c.redacted_message
    if c.retry_after is not None:
        out.retry_after.FromTimedelta(c.retry_after)
    return out


def fill_decision(d: Decision, out: pb.DecideRetryResponse) -> pb.DecideRetryResponse:
    out.action = d.action  # type: ignore[assignment]
    out.delay.FromTimedelta(d.delay)
    out.reason = d.reason  # type: ignore[assignment]
    out.explanation = d.explanation
    out.consumes_attempt = d.consumes_attempt
    fill_classification(d.classification, out.classification)
    if d.retry_after is not None:
        out.retry_after.FromTimedelta(d.retry_after)
    return out


def classification_message(c: Classification) -> pb.ClassifyResponse:
    return fill_classification(c, pb.ClassifyResponse())


def decision_message(d: Decision) -> pb.DecideRetryResponse:
    return fill_decision(d, pb.DecideRetryResponse())


def outcome(message: pb.Outcome, clock: Callable[[], float], hints: bool = True) -> Outcome:
    """An executor's report, checked; its Retry-After (if any) read as
    Classify reads it. `hints`: read its rate-limit headers too (False:
    leave them unread, no hint). Its headers are read as of when the
    response came, `age` before `clock()` (see _aged)."""
    check_chars("upstream", message.upstream, MAX_NAME_CHARS)
    check_chars("capability", message.capability, MAX_NAME_CHARS)
    check_status(message.http_status)
    headers = message.headers
    check_headers(headers)
    cost = message.cost
    check_cost("cost", cost)
    estimated = message.estimated_cost
    check_cost("estimated_cost", estimated)
    latency = None
    if message.HasField("latency"):
        latency = _bounded("latency", message.latency.seconds, message.latency.nanos)
    admitted = admission_id(message.admission_id)
    age = 0.0
    if message.HasField("age"):
        age = _age(message.age.seconds, message.age.nanos)
    if not headers:  # the common case: nothing to read
        return Outcome(
            message.success,
            message.http_status,
            message.transport_failure,
            latency=latency,
            cost=cost,
            estimated=estimated,
            admission_id=admitted,
            age=age,
        )
    received = _aged(clock, age)
    wait = None if message.success else retry_after(headers, received)
    if wait is not None and age:
        # A relative wait began when the response came, `age` ago.
        wait = max(wait - timedelta(seconds=age), timedelta(0))
    return Outcome(
        success=message.success,
        http_status=message.http_status,
        transport_failure=message.transport_failure,
        retry_after=wait,
        refused_retry=not message.success and pushback_refuses(headers),
        latency=latency,
        cost=cost,
        estimated=estimated,
        hint=hint(headers, received) if hints else None,
        admission_id=admitted,
        age=age,
    )


def _age(seconds: int, nanos: int) -> float:
    """Outcome.age in seconds: not negative, at most MAX_OUTCOME_AGE."""
    value = duration("age", seconds, nanos)
    if value > MAX_OUTCOME_AGE:
        raise PolicyInputError(
            "age",
            f"{value.total_seconds():g}s is over the limit of {MAX_OUTCOME_AGE.total_seconds():g}s",
        )
    return value.total_seconds()


def _aged(clock: Callable[[], float], age: float) -> Callable[[], float]:
    """The wall clock as it read when the response came, `age` seconds ago:
    an absolute reset (an RFC 3339 time, a Unix epoch, an HTTP-date) is read
    against it, not against the later moment the report arrives."""
    if not age:
        return clock
    return lambda: clock() - age


# AdmitResponse.admission_id: 16 lowercase hex digits.
_ID_DIGITS = 16
_HEX = frozenset("0123456789abcdef")


def admission_id(text: str, field: str = "admission_id") -> int:
    """An outcome's admission id (0 for "", which names none); a PolicyInputError
    naming `field` for anything but 16 lowercase hex digits."""
    if not text:
        return 0
    if len(text) != _ID_DIGITS or not _HEX.issuperset(text):
        raise PolicyInputError(
            field,
            f"must be {_ID_DIGITS} lowercase hex digits as AdmitResponse.admission_id "
            f"gives it, got {quoted(text)}",
        )
    return int(text, 16)


def failed_attempt(
    state: AttemptState, decision: Decision, clock: Callable[[], float], admitted: int = 0
) -> Outcome:
    """The failure a DecideRetry that names an upstream reports: it counts
    for the upstream's state as a ReportOutcome of it would (callers need
    not report it again). `admitted`: the admission id it named (0 = none)."""
    return Outcome(
        success=False,
        http_status=state.http_status,
        transport_failure=state.transport_failure,
        retry_after=decision.classification.retry_after,
        cancelled=state.cancelled,
        refused_retry=pushback_refuses(state.headers),
        hint=hint(state.headers, clock) if state.headers else None,
        admission_id=admitted,
    )


def hint(headers: Mapping[str, str], clock: Callable[[], float]) -> RateLimitHint | None:
    """The rate-limit headers' hint (squawk.policy.ratelimit), read only
    when a header's name says it is one: every name of the forms the
    parser reads (x-ratelimit-*, x-rate-limit-*, anthropic-ratelimit-*,
    RateLimit, RateLimit-*) holds "ratelimit" or "rate-limit", and most
    outcomes carry none, so a scan of the names costs less than a parse."""
    return rate_limit_hint(headers, clock()) if rate_limited(headers) else None


def rate_limited(headers: Mapping[str, str]) -> bool:
    """Whether a header's name says it is a rate-limit header (see hint)."""
    for name in headers:
        lower = name.lower()
        if "ratelimit" in lower or "rate-limit" in lower:
            return True
    return False


class AdmitArgs(NamedTuple):
    """What an Admit asks beyond its names: the step's deadline (None =
    none), the estimated cost (0 = unknown), the permits (1 or more), the
    call's criticality and its fairness key (each None when none was
    sent)."""

    deadline: timedelta | None
    cost: float
    permits: int
    criticality: Criticality | None = None
    fairness: Fairness | None = None


# The arguments of an Admit that sends none of them: read without a lookup.
NO_ADMIT_ARGS = AdmitArgs(None, 0.0, 1)


def admit_args(request: pb.AdmitRequest) -> AdmitArgs:
    """Admit's deadline, cost and permits, checked: a value past its bound
    (squawk.policy.limits) is refused with a PolicyInputError naming it."""
    has_deadline = request.HasField("deadline")
    cost, permits, level = request.cost, request.permits, request.criticality
    key, weight = request.fairness_key, request.fairness_weight
    if (
        not has_deadline
        and cost == 0.0
        and 0 <= permits <= 1
        and not level
        and not key
        and weight == 0.0
    ):
        return NO_ADMIT_ARGS
    deadline = None
    if has_deadline:
        deadline = _bounded("deadline", request.deadline.seconds, request.deadline.nanos)
    check_cost("cost", cost)
    check_count("permits", permits, 0, MAX_PERMITS)
    fairness = None
    if key or weight:
        check_chars("fairness_key", key, MAX_NAME_CHARS)
        if not key.isprintable():
            raise PolicyInputError("fairness_key", "must hold printable characters only")
        check_number("fairness_weight", weight, MAX_WEIGHT, zero=True)
        fairness = Fairness(key, weight or 1.0)
    return AdmitArgs(deadline, cost, permits or 1, _criticality(level), fairness)


def _criticality(value: int) -> Criticality | None:
    """AdmitRequest.criticality: unset is None (the policy's default, else
    CRITICAL); a value squawk.v1 does not define is refused, naming the
    field."""
    if not value:
        return None
    try:
        return Criticality(value)
    except ValueError:
        raise PolicyInputError(
            "criticality", f"must be one of 0..{max(Criticality)}, got {value}"
        ) from None


def _bounded(field: str, seconds: int, nanos: int) -> timedelta:
    """A Duration the pace reads: not negative, at most MAX_ADMIT_DEADLINE."""
    value = duration(field, seconds, nanos)
    if value > MAX_ADMIT_DEADLINE:
        raise PolicyInputError(
            field,
            f"{value.total_seconds():g}s is over the limit of "
            f"{MAX_ADMIT_DEADLINE.total_seconds():g}s",
        )
    return value


def admission_message(a: Admission) -> pb.AdmitResponse:
    out = pb.AdmitResponse(
        allowed=a.allowed,
        reason=a.reason if a.reason is not None else Reason.ADMITTED,  # type: ignore[arg-type]
        breaker_state=a.breaker_state,  # type: ignore[arg-type]
        probe=a.probe,
        permits=a.permits,
    )
    if a.retry_after is not None:
        out.retry_after.FromTimedelta(a.retry_after)
    if a.wait:
        out.wait.FromTimedelta(a.wait)
    if a.lease is not None:
        out.lease.FromTimedelta(a.lease)
    if a.shed is not None:
        out.explanation = explain(a.shed)
    if a.admission_id:
        out.admission_id = f"{a.admission_id:016x}"
    if a.holds_slot:
        out.holds_slot = True
    return out


# An empty upstream is never tracked: every call is admitted at once.
UNTRACKED = Admission(True, None, None, BreakerState.CLOSED, False)
# ... and every permit asked for, with the lease any grant of several
# permits carries (nothing tracks them; a lease keeps the one rule for
# clients: permits after the first lapse at its end).
_UNTRACKED = [UNTRACKED] + [
    UNTRACKED._replace(permits=n, lease=LEASE) for n in range(2, MAX_PERMITS + 1)
]


def untracked(permits: int) -> Admission:
    """The answer for an Admit that names no upstream, asking `permits` (1..MAX_PERMITS)."""
    return _UNTRACKED[permits - 1]
