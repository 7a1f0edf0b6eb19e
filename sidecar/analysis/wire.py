"""squawk.v1 messages <-> the analysis values, at the gRPC boundary only.

Structs become plain dicts through json_format (so every number arrives as
a float: 2 -> 2.0, which the analysis treats as the same JSON value).
"""

from __future__ import annotations

from collections.abc import Mapping

from google.protobuf import json_format, struct_pb2

from ..proto import policy_pb2 as pb
from .types import Analysis, AnalysisRequest, Json, Violation

__all__ = [
    "analysis_fields",
    "analysis_request",
    "analysis_response",
    "dispatch_response",
    "struct_dict",
]


def struct_dict(message: struct_pb2.Struct) -> dict[str, Json]:
    converted: dict[str, Json] = json_format.MessageToDict(message)
    return converted


def _struct(value: Mapping[str, Json]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


def _value(value: Json) -> struct_pb2.Value:
    # Struct.update knows every JSON shape; a Value has no such constructor.
    holder = _struct({"value": value})
    out = struct_pb2.Value()
    out.CopyFrom(holder.fields["value"])
    return out


def analysis_request(request: pb.AnalyzeErrorRequest) -> AnalysisRequest:
    def optional(name: str) -> int | None:
        return int(getattr(request, name)) if request.HasField(name) else None  # type: ignore[arg-type]

    return AnalysisRequest(
        http_status=request.http_status,
        error_response=request.error_response,
        original_request=struct_dict(request.original_request),
        parameter_schema=struct_dict(request.parameter_schema),
        protected_parameters=frozenset(request.protected_parameters),
        dependency_results={k: struct_dict(v) for k, v in request.dependency_results.items()},
        user_query=request.user_query,
        capability_name=request.capability_name,
        capability_description=request.capability_description,
        step_id=request.step_id,
        validation_retries_used=request.validation_retries_used,
        max_validation_retries=optional("max_validation_retries"),
        semantic_retries_used=request.semantic_retries_used,
        max_semantic_retries=optional("max_semantic_retries"),
    )


def analysis_response(analysis: Analysis) -> pb.AnalyzeErrorResponse:
    return pb.AnalyzeErrorResponse(
        should_retry=analysis.should_retry,
        reason=analysis.reason,
        suggested_changes=_struct(analysis.suggested_changes),
        is_transient_error=analysis.is_transient_error,
        source=int(analysis.source),  # type: ignore[arg-type]
        rejected_changes=[
            pb.RejectedChange(
                parameter=r.parameter, proposed_value=_value(r.proposed_value), reason=r.reason
            )
            for r in analysis.rejected_changes
        ],
    )


def dispatch_response(violations: tuple[Violation, ...]) -> pb.CheckDispatchResponse:
    return pb.CheckDispatchResponse(
        ok=not violations,
        violations=[
            pb.Violation(parameter=v.parameter, rule=v.rule, message=v.message) for v in violations
        ],
    )


def analysis_fields(analysis: Analysis) -> dict[str, str | int | bool]:
    """The span / decision-log fields of one analysis: counts and names, never values."""
    fields: dict[str, str | int | bool] = {
        "squawk.analyzer.source": analysis.source.name,
        "squawk.analyzer.should_retry": analysis.should_retry,
        "squawk.analyzer.transient": analysis.is_transient_error,
        "squawk.changes.suggested": len(analysis.suggested_changes),
        "squawk.changes.rejected": len(analysis.rejected_changes),
    }
    if analysis.model_fallback:
        fields["squawk.analyzer.fallback"] = analysis.model_fallback
    return fields
