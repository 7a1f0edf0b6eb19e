"""CheckDispatch (the pre-dispatch guard) and the gates every suggestion passes."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from squawk.daemon.analysis import AnalysisRequest, check_dispatch
from squawk.daemon.analysis.gates import check_changes, check_result
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

HOTEL: dict[str, Any] = {
    "type": "object",
    "required": ["city", "check_in"],
    "properties": {
        "city": {"type": "string"},
        "check_in": {"type": "string", "format": "date", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
        "adults": {"type": "integer", "enum": [1, 2, 3, 4]},
        "board": {"type": "string", "enum": ["room_only", "breakfast"], "x-display": "Board"},
        "rooms": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["type"],
                "properties": {"type": {"enum": ["single", "double"]}},
            },
        },
        "filters": {"type": "object"},
        "tags": {"type": ["array", "null"], "items": {"type": "string"}},
    },
}

# (name, parameters, expected (parameter, rule) pairs in order)
GUARD_CASES: list[tuple[str, dict[str, Any], list[tuple[str, str]]]] = [
    ("a clean request", {"city": "Paris", "check_in": "2026-04-01"}, []),
    (
        "a template placeholder left in a value",
        {"city": "{{step-1.city}}", "check_in": "2026-04-01"},
        [("city", "unresolved_reference")],
    ),
    (
        "a ${...} placeholder deep in a list",
        {"city": "Paris", "check_in": "2026-04-01", "tags": ["sea", "near ${steps.geo.city}"]},
        [("tags[1]", "unresolved_reference")],
    ),
    (
        "a placeholder under a key the schema does not declare",
        {"city": "Paris", "check_in": "2026-04-01", "note": {"text": "{{ user.name }}"}},
        [("note.text", "unresolved_reference")],
    ),
    ("empty braces are no reference", {"city": "Paris {{ }}", "check_in": "2026-04-01"}, []),
    ("a required key missing", {"city": "Paris"}, [("check_in", "required")]),
    ("explicit null satisfies required", {"city": "Paris", "check_in": None}, []),
    (
        "a value outside the enum",
        {"city": "Paris", "check_in": "2026-04-01", "board": "all_inclusive"},
        [("board", "enum")],
    ),
    ("scalar coercion: '3' for an integer enum", {"city": "P", "check_in": "x", "adults": "3"}, []),
    ("explicit null is not an enum violation", {"city": "P", "check_in": "x", "board": None}, []),
    (
        "an object where an array is declared",
        {"city": "Paris", "check_in": "2026-04-01", "rooms": {"type": "single"}},
        [("rooms", "shape")],
    ),
    (
        "a string where an array is declared",
        {"city": "Paris", "check_in": "2026-04-01", "tags": "sea"},
        [("tags", "shape")],
    ),
    (
        "an array where an object is declared",
        {"city": "Paris", "check_in": "2026-04-01", "filters": ["pool"]},
        [("filters", "shape")],
    ),
    (
        "an object where a string is declared",
        {"city": {"name": "Paris"}, "check_in": "2026-04-01"},
        [("city", "shape")],
    ),
    ("a number for a string is coercion, not shape", {"city": 75, "check_in": "2026-04-01"}, []),
    ("a null where an array is declared", {"city": "P", "check_in": "x", "rooms": None}, []),
    (
        "inside array items: enum and required",
        {"city": "P", "check_in": "x", "rooms": [{"type": "suite"}, {}]},
        [("rooms[0].type", "enum"), ("rooms[1].type", "required")],
    ),
    ("patterns and formats are the upstream's business", {"city": "P", "check_in": "soon"}, []),
    (
        "several rules at once",
        {"city": "{{a.b}}", "board": "full", "rooms": "one"},
        [
            ("check_in", "required"),
            ("board", "enum"),
            ("city", "unresolved_reference"),
            ("rooms", "shape"),
        ],
    ),
]


@pytest.mark.parametrize(
    ("name", "params", "expected"), GUARD_CASES, ids=[c[0] for c in GUARD_CASES]
)
def test_check_dispatch(name: str, params: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    found = check_dispatch(params, HOTEL)
    assert [(v.parameter, v.rule) for v in found] == expected
    for v in found:
        assert v.message.endswith(".") and v.parameter in v.message


def test_no_schema_checks_only_references() -> None:
    assert check_dispatch({"a": [1, {"b": "x"}]}, {}) == ()
    assert [v.rule for v in check_dispatch({"a": "${x}"}, {})] == ["unresolved_reference"]


def test_odd_schemas_are_tolerated() -> None:
    odd: dict[str, Any] = {"properties": "nope", "required": "city", "enum": 3, "type": 7}
    assert check_dispatch({"city": "Paris"}, odd) == ()


@pytest.mark.parametrize(
    ("name", "params", "expected"), GUARD_CASES, ids=[c[0] for c in GUARD_CASES]
)
def test_check_dispatch_over_the_wire(
    channel: grpc.Channel, name: str, params: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    request = pb.CheckDispatchRequest()
    request.parameters.update(params)
    request.parameter_schema.update(HOTEL)
    reply = pb_grpc.PolicyServiceStub(channel).CheckDispatch(request, timeout=5)
    assert reply.ok == (not expected)
    assert [(v.parameter, v.rule) for v in reply.violations] == expected


def test_check_dispatch_empty_request_over_the_wire(channel: grpc.Channel) -> None:
    reply = pb_grpc.PolicyServiceStub(channel).CheckDispatch(pb.CheckDispatchRequest(), timeout=5)
    assert reply.ok and not reply.violations


# The gates, key by key.

BOOKING = AnalysisRequest(
    http_status=400,
    original_request={
        "city_code": "PARIS",
        "adults": "2",
        "rooms": [{"type": "single", "beds": 1}, {"type": "double", "beds": 2}],
        "api_key": "k",
    },
    parameter_schema={
        "properties": {
            "city_code": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "adults": {"type": "integer", "minimum": 1, "maximum": 9},
            "currency": {"type": "string", "enum": ["EUR", "USD"]},
            "rooms": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "type": {"enum": ["single", "double"]},
                        "beds": {"type": "integer"},
                    },
                },
            },
        }
    },
    protected_parameters=frozenset({"api_key", "rooms[0].type"}),
)

GATE_CASES: list[tuple[str, str, Any, str | None]] = [
    ("a real correction", "city_code", "PAR", None),
    ("a type change counts as a change", "adults", 2, None),
    ("a key only the schema declares may be added", "currency", "EUR", None),
    ("an invented parameter", "discount_code", "FREE", "unknown parameter"),
    ("a protected parameter", "api_key", "other", "protected parameter"),
    (
        "a protected path inside a list",
        "rooms",
        [{"type": "double", "beds": 1}, {"type": "double", "beds": 2}],
        "protected parameter: rooms[0].type",
    ),
    (
        "the list may change where nothing is protected",
        "rooms",
        [{"type": "single", "beds": 2}, {"type": "double", "beds": 2}],
        None,
    ),
    ("the same value", "city_code", "PARIS", "no change"),
    ("the same number as a float", "adults", "2", "no change"),
    ("the redaction marker", "city_code", "[REDACTED]", "carries the redaction marker"),
    ("the wrong type", "adults", "3", "breaks the schema"),
    ("above the maximum", "adults", 12, "breaks the schema"),
    ("a fraction for an integer", "adults", 2.5, "breaks the schema"),
    ("outside the enum", "currency", "GBP", "breaks the schema"),
    ("against the pattern", "city_code", "Paris", "breaks the schema"),
    ("null where a string is declared", "city_code", None, "breaks the schema"),
    (
        "an undeclared property in a closed object",
        "rooms",
        [{"type": "single", "beds": 1, "view": "sea"}],
        "breaks the schema",
    ),
    ("oversized", "currency", "E" * 20_000, "too large"),
]


@pytest.mark.parametrize(
    ("name", "key", "value", "refusal"), GATE_CASES, ids=[c[0] for c in GATE_CASES]
)
def test_gates(name: str, key: str, value: Any, refusal: str | None) -> None:
    accepted, rejected = check_changes({key: value}, BOOKING, {})
    if refusal is None:
        assert accepted == {key: value} and rejected == []
    else:
        assert accepted == {}
        assert [(r.parameter, r.proposed_value) for r in rejected] == [(key, value)]
        assert rejected[0].reason.startswith(refusal), rejected[0].reason


def test_float_and_int_are_one_number() -> None:
    request = AnalysisRequest(http_status=400, original_request={"adults": 2.0})
    accepted, rejected = check_changes({"adults": 2}, request, {})
    assert accepted == {} and rejected[0].reason.startswith("no change")


def test_a_change_that_leaves_a_placeholder_fails_the_guard() -> None:
    accepted, _ = check_changes({"city_code": "PAR", "currency": "EUR"}, BOOKING, {})
    kept, refused, remaining = check_result(accepted, BOOKING)
    assert kept == accepted and refused == [] and remaining == ()
    sneaky = AnalysisRequest(
        http_status=400, original_request={"q": "x"}, parameter_schema={"properties": {"q": {}}}
    )
    kept, refused, remaining = check_result({"q": "{{secrets.token}}"}, sneaky)
    assert kept == {} and remaining == ()
    assert refused[0].reason.startswith("fails CheckDispatch")


def test_struct_round_trip_keeps_rules() -> None:
    # The wire turns 2 into 2.0; the guard must not see that as a shape or enum change.
    s = struct_pb2.Struct()
    s.update({"city": "P", "check_in": "x", "adults": 2})
    from squawk.daemon.analysis.wire import struct_dict

    assert check_dispatch(struct_dict(s), HOTEL) == ()
