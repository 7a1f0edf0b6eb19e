"""squawk.v1 messages <-> the analysis values, at the gRPC boundary only.

Structs become plain JSON values here, checked against `bounds` as they
are read: a request over any bound is refused with PolicyInputError (the
servicer's INVALID_ARGUMENT) whose message starts with the path of the
value that broke it (`original_request.rooms[3].beds: ...`). Every number
arrives as a float (2 -> 2.0), which the analysis treats as the same JSON
value; NaN and the infinities, which no JSON document can hold, are refused.

Converting a large request costs milliseconds of CPU, so the servicer runs
these functions on the analysis worker thread, not on the event loop; only
`dispatch_small` and `analysis_small`, which stop reading past a few
hundred values, run on the loop.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TypeAlias

from google.protobuf import struct_pb2

from squawk.policy import PolicyInputError
from squawk.policy.text import shown_text
from squawk.v1 import policy_pb2 as pb

from .bounds import (
    MAX_CHARS,
    MAX_DEPENDENCIES,
    MAX_DEPTH,
    MAX_ITEMS,
    MAX_KEY_CHARS,
    MAX_PROTECTED,
    MAX_STRING_CHARS,
    MAX_VALUES,
    check_count,
)
from .guard import check_dispatch
from .types import Analysis, AnalysisRequest, Json, Violation

__all__ = [
    "analysis_fields",
    "analysis_request",
    "analysis_response",
    "analysis_small",
    "dispatch",
    "dispatch_request",
    "dispatch_response",
    "dispatch_small",
    "struct_dict",
]

# What CheckDispatch may read and check on the event loop (see dispatch_small).
INLINE_VALUES = 128
INLINE_CHARS = 8_192
# What AnalyzeError's texts (error_response and the rest) may hold to be
# analysed on the loop. Far fewer than INLINE_CHARS: the analysis indexes
# every word of the error text, at some 4 us a character for text of short
# words, so 8,192 characters of "a a a ..." held the loop for 35-70 ms.
# 256 keeps that worst case near a millisecond and still takes a typical
# tool error ("Amadeus API error 400: INVALID CITY CODE") inline.
INLINE_TEXT_CHARS = 256

# A value's path, built only when an error names it: (parent, key or index).
_Path: TypeAlias = "tuple[_Path, str | int] | str"
_SHOWN_KEY = 40
_SHOWN_MESSAGE = 1_024
_SHOWN_PATH = 200


def _path_text(path: _Path) -> str:
    parts: list[str] = []
    while isinstance(path, tuple):
        path, step = path
        if isinstance(step, int):
            parts.append(f"[{step}]")
        else:
            parts.append(f".{shown_text(step, _SHOWN_KEY)}")
    text = path + "".join(reversed(parts))
    return text if len(text) <= _SHOWN_PATH else text[: _SHOWN_PATH - 1] + "…"


class _Larger(Exception):
    """The request is larger than the small reading was allowed to read."""


class _Reader:
    """Reads Structs into JSON values, counting one request's values and characters.

    `small` reads at most INLINE_VALUES values and INLINE_CHARS characters
    and raises _Larger past them, instead of refusing the request.
    """

    def __init__(self, small: bool = False) -> None:
        self.values = 0
        self.chars = 0
        self._small = small
        self._max_values = INLINE_VALUES if small else MAX_VALUES
        self._max_chars = INLINE_CHARS if small else MAX_CHARS

    def struct(self, message: struct_pb2.Struct, field: str) -> dict[str, Json]:
        return self._fields(message, field, 1)

    def _refuse(self, path: _Path, message: str) -> PolicyInputError:
        return PolicyInputError(_path_text(path), message)

    def _fields(self, message: struct_pb2.Struct, path: _Path, depth: int) -> dict[str, Json]:
        fields = message.fields
        if len(fields) > MAX_ITEMS:
            raise self._refuse(path, f"{len(fields)} keys is over the limit of {MAX_ITEMS}")
        out: dict[str, Json] = {}
        for key, item in fields.items():
            if len(key) > MAX_KEY_CHARS:
                raise self._refuse(
                    path, f"a key of {len(key)} characters is over the limit of {MAX_KEY_CHARS}"
                )
            self.chars += len(key)
            out[key] = self._value(item, path, key, depth)
        return out

    def _value(self, value: struct_pb2.Value, parent: _Path, key: str | int, depth: int) -> Json:
        self.values += 1
        if self.values > self._max_values:
            if self._small:
                raise _Larger
            raise self._refuse(
                (parent, key), f"the request holds more than {MAX_VALUES} values in all"
            )
        if depth > MAX_DEPTH:
            raise self._refuse((parent, key), f"nested more than {MAX_DEPTH} levels deep")
        kind = value.WhichOneof("kind")
        if kind == "string_value":
            text = value.string_value
            self.chars += len(text)
            if len(text) > MAX_STRING_CHARS:
                raise self._refuse(
                    (parent, key),
                    f"a string of {len(text)} characters is over the limit of {MAX_STRING_CHARS}",
                )
            if self.chars > self._max_chars:
                if self._small:
                    raise _Larger
                raise self._refuse(
                    (parent, key),
                    f"the request holds more than {MAX_CHARS} characters of strings and keys",
                )
            return text
        if kind == "number_value":
            number = value.number_value
            if not math.isfinite(number):
                raise self._refuse((parent, key), f"must be a finite number, got {number}")
            return number
        if kind == "bool_value":
            return value.bool_value
        if kind == "struct_value":
            return self._fields(value.struct_value, (parent, key), depth + 1)
        if kind == "list_value":
            items = value.list_value.values
            path = (parent, key)
            if len(items) > MAX_ITEMS:
                raise self._refuse(path, f"{len(items)} items is over the limit of {MAX_ITEMS}")
            return [self._value(item, path, i, depth + 1) for i, item in enumerate(items)]
        return None  # null_value, or no kind set (read as null, like json_format)


def struct_dict(message: struct_pb2.Struct, field: str = "struct") -> dict[str, Json]:
    """One Struct as a JSON object, within the bounds of one request."""
    return _Reader().struct(message, field)


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


def analysis_small(request: pb.AnalyzeErrorRequest) -> AnalysisRequest | None:
    """The request as analysis values when it is small enough to analyse on
    the event loop, else None (and the caller uses `analysis_request` on a worker).

    Most AnalyzeError calls are one tool call's few parameters and a short
    error: the offline analysis of one costs about a tenth of a millisecond,
    less than the two thread handoffs of the worker, which at 1,000 calls/s
    also made the slowest answers wait behind the GIL. Small means the
    Structs' INLINE_VALUES values and INLINE_CHARS characters (read as
    `dispatch_small` reads), and INLINE_TEXT_CHARS characters of text.
    """
    texts = (
        request.error_response,
        request.user_query,
        request.capability_name,
        request.capability_description,
        request.step_id,
    )
    if sum(len(t) for t in texts) > INLINE_TEXT_CHARS:
        return None
    try:
        return analysis_request(request, small=True)
    except _Larger:
        return None


def analysis_request(request: pb.AnalyzeErrorRequest, small: bool = False) -> AnalysisRequest:
    """The request as analysis values; PolicyInputError names the first Struct value out of bounds.

    The plain fields (texts, budgets, protected_parameters) are checked by
    `bounds.validate`, which in-process callers pass through too. `small`:
    see `analysis_small`.
    """

    def optional(name: str) -> int | None:
        return int(getattr(request, name)) if request.HasField(name) else None  # type: ignore[arg-type]

    # Counted before anything is read: these bound the loops below.
    check_count("protected_parameters", len(request.protected_parameters), MAX_PROTECTED)
    check_count("dependency_results", len(request.dependency_results), MAX_DEPENDENCIES)
    reader = _Reader(small)
    original = reader.struct(request.original_request, "original_request")
    schema = reader.struct(request.parameter_schema, "parameter_schema")
    dependencies = {
        step: reader.struct(request.dependency_results[step], f'dependency_results["{step}"]')
        for step in sorted(request.dependency_results)
    }
    return AnalysisRequest(
        http_status=request.http_status,
        error_response=request.error_response,
        original_request=original,
        parameter_schema=schema,
        protected_parameters=frozenset(request.protected_parameters),
        dependency_results=dependencies,
        user_query=request.user_query,
        capability_name=request.capability_name,
        capability_description=request.capability_description,
        step_id=request.step_id,
        validation_retries_used=request.validation_retries_used,
        max_validation_retries=optional("max_validation_retries"),
        semantic_retries_used=request.semantic_retries_used,
        max_semantic_retries=optional("max_semantic_retries"),
    )


def dispatch_request(
    request: pb.CheckDispatchRequest, small: bool = False
) -> tuple[dict[str, Json], dict[str, Json]]:
    """CheckDispatch's parameters and parameter_schema, read within one request's bounds."""
    reader = _Reader(small)
    return (
        reader.struct(request.parameters, "parameters"),
        reader.struct(request.parameter_schema, "parameter_schema"),
    )


def dispatch(request: pb.CheckDispatchRequest) -> pb.CheckDispatchResponse:
    """The whole CheckDispatch call: read, check, answer (one step for a worker thread)."""
    parameters, schema = dispatch_request(request)
    return dispatch_response(check_dispatch(parameters, schema))


def dispatch_small(request: pb.CheckDispatchRequest) -> pb.CheckDispatchResponse | None:
    """The whole call when the request is small enough for the event loop, else None.

    CheckDispatch runs before every dispatch, so most requests are a few
    parameters: checking one costs less than handing it to a thread. Past
    INLINE_VALUES values or INLINE_CHARS characters (well under a
    millisecond of work) the reading stops and the caller uses `dispatch`
    on a worker.
    """
    try:
        parameters, schema = dispatch_request(request, small=True)
    except _Larger:
        return None
    return dispatch_response(check_dispatch(parameters, schema))


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
            # `parameter` hands the caller's own key back so it can find it; the
            # sentence quotes keys and values, so it passes the text gate.
            pb.Violation(
                parameter=v.parameter, rule=v.rule, message=shown_text(v.message, _SHOWN_MESSAGE)
            )
            for v in violations
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
