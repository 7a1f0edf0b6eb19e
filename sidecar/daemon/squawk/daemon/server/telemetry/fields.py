"""The `squawk.*` fields of one call: what its span, its metrics and its
decision-log line carry, built once and only when someone is listening.

No field holds an error message, a body or a header; the names a caller
chooses (capability, upstream, profile) pass `shown_text` in
`Observer.record` (observer.py) before they reach any sink.
"""

from __future__ import annotations

from squawk.policy import Decision, PaceSource
from squawk.v1 import policy_pb2 as pb

__all__ = ["Field", "admission_fields", "classification_fields", "decision_fields"]

Field = str | int | float | bool

_DECLARED = {None: "unset", True: "true", False: "false"}


def classification_fields(
    request: pb.ClassifyRequest, reply: pb.ClassifyResponse
) -> dict[str, Field]:
    return {
        "squawk.profile": request.profile or "default",
        "squawk.http_status": reply.upstream_status,
        "squawk.category": pb.ErrorCategory.Name(reply.category).removeprefix("ERROR_CATEGORY_"),
        "squawk.retryable": reply.retryable,
    }


def decision_fields(
    request: pb.DecideRetryRequest, decision: Decision, state: str | None = None
) -> dict[str, Field]:
    c = decision.classification
    fields: dict[str, Field] = {
        "squawk.profile": request.profile or "default",
        "squawk.capability": request.capability,
        "squawk.upstream": request.upstream,
        "squawk.attempt": request.attempt,
        "squawk.http_status": request.http_status,
        "squawk.category": c.category.name,
        "squawk.retryable": c.retryable,
        "squawk.declared_retryable": _DECLARED[decision.declared_retryable],
        "squawk.action": decision.action.name,
        "squawk.reason": decision.reason.name,
        "squawk.delay_ms": round(decision.delay.total_seconds() * 1000),
    }
    if state is not None:
        fields["squawk.state"] = str(state)
    return fields


def admission_fields(
    request: pb.AdmitRequest,
    reply: pb.AdmitResponse,
    state: str | None = None,
    pace: tuple[PaceSource, float] = (PaceSource.NONE, 0.0),
) -> dict[str, Field]:
    """`pace`: the upstream's (source, calls/s), as the registry last looked at it."""
    fields: dict[str, Field] = {
        "squawk.profile": request.profile or "default",
        "squawk.capability": request.capability,
        "squawk.upstream": request.upstream,
        "squawk.action": "ADMIT" if reply.allowed else "REFUSE",
        "squawk.reason": pb.Reason.Name(reply.reason).removeprefix("REASON_"),
        "squawk.breaker_state": pb.BreakerState.Name(reply.breaker_state).removeprefix(
            "BREAKER_STATE_"
        ),
        "squawk.probe": reply.probe,
        "squawk.delay_ms": reply.retry_after.ToMilliseconds(),
        "squawk.pace.wait_ms": reply.wait.ToMilliseconds(),
        "squawk.pace.source": pace[0].name,
        "squawk.pace.rate": round(pace[1], 3),
        "squawk.admit.permits": reply.permits,
    }
    if request.criticality:
        # Checked before the span is built (squawk.wire.admit_args).
        fields["squawk.admit.criticality"] = pb.Criticality.Name(request.criticality).removeprefix(
            "CRITICALITY_"
        )
    if request.fairness_key or request.fairness_weight:
        # Checked before the span is built; the key is caller text, shown
        # through the observer's one gate like every name.
        fields["squawk.admit.fairness_key"] = request.fairness_key
        fields["squawk.admit.fairness_weight"] = request.fairness_weight or 1.0
    if state is not None:
        fields["squawk.state"] = str(state)
    return fields
