"""Conversion between squawk.v1 messages and the policy core's values.

The enum numbers of the core equal the wire numbers, so enums convert with a
plain int. Nothing here decides anything.
"""

from __future__ import annotations

from datetime import timedelta

from google.protobuf.duration_pb2 import Duration

from .policy import AttemptState, Classification, Decision, Failure
from .proto import policy_pb2 as pb

__all__ = ["attempt_state", "classification_message", "decision_message", "failure"]


def _duration(value: timedelta) -> Duration:
    d = Duration()
    d.FromTimedelta(value)
    return d


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
        deadline=request.deadline.ToTimedelta() if request.HasField("deadline") else None,
        capability=request.capability,
        upstream=request.upstream,
    )


def classification_message(c: Classification) -> pb.ClassifyResponse:
    return pb.ClassifyResponse(
        http_status=c.http_status,
        category=int(c.category),  # type: ignore[arg-type]
        retryable=c.retryable,
        code=c.code,
        upstream_status=c.upstream_status,
        redacted_message=c.redacted_message,
        retry_after=None if c.retry_after is None else _duration(c.retry_after),
    )


def decision_message(d: Decision) -> pb.DecideRetryResponse:
    return pb.DecideRetryResponse(
        action=int(d.action),  # type: ignore[arg-type]
        delay=_duration(d.delay),
        reason=int(d.reason),  # type: ignore[arg-type]
        explanation=d.explanation,
        consumes_attempt=d.consumes_attempt,
        classification=classification_message(d.classification),
    )
