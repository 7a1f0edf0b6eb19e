"""Every field of AnalyzeError and CheckDispatch has a bound, enforced at the boundary.

Each refusal is INVALID_ARGUMENT whose message starts with the path of the
value that broke the bound; a request just inside every bound is answered.
All of it against the real daemon.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from squawk.daemon.analysis import AnalysisRequest, Analyzer, AnalyzerSettings
from squawk.daemon.analysis.bounds import (
    MAX_CHARS,
    MAX_DEPENDENCIES,
    MAX_DEPTH,
    MAX_ITEMS,
    MAX_KEY_CHARS,
    MAX_PROTECTED,
    MAX_PROTECTED_CHARS,
    MAX_RETRIES,
    MAX_STRING_CHARS,
    MAX_TEXT_CHARS,
    MAX_VALUES,
)
from squawk.daemon.analysis.guard import MAX_VIOLATIONS
from squawk.policy import PolicyInputError, builtin_policy
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

NAN, INF = float("nan"), float("inf")


def nested(depth: int) -> Any:
    """A value inside `depth` arrays (lists: protobuf reads them deeper than objects)."""
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


Build = Callable[[pb.AnalyzeErrorRequest], None]


def analyze_error(build: Build) -> pb.AnalyzeErrorRequest:
    request = pb.AnalyzeErrorRequest(http_status=400, error_response="bad request")
    build(request)
    return request


def _values_together(r: pb.AnalyzeErrorRequest) -> None:
    # The values of every Struct count together: the first one past the
    # limit is the one named. "a" and its items are MAX_ITEMS values.
    r.original_request.update({"a": [0] * (MAX_ITEMS - 1)})
    r.parameter_schema.update({"b": [0] * MAX_ITEMS})


def _chars_together(r: pb.AnalyzeErrorRequest) -> None:
    r.original_request.update({"a": "x" * MAX_STRING_CHARS})
    r.parameter_schema.update({"b": "x" * (MAX_CHARS - MAX_STRING_CHARS)})


def _many_dependencies(r: pb.AnalyzeErrorRequest) -> None:
    for i in range(MAX_DEPENDENCIES + 1):
        r.dependency_results[f"s{i}"].update({})


# (the message's start, what the request holds)
ANALYZE_ERROR: list[tuple[str, Build]] = [
    ("original_request.price:", lambda r: r.original_request.update({"price": NAN})),
    (
        "original_request.rooms[1].beds:",
        lambda r: r.original_request.update({"rooms": [{"beds": 1}, {"beds": INF}]}),
    ),
    (
        "parameter_schema.properties.n.maximum:",
        lambda r: r.parameter_schema.update({"properties": {"n": {"maximum": -INF}}}),
    ),
    (
        'dependency_results["geo"].lat:',
        lambda r: r.dependency_results["geo"].update({"lat": NAN}),
    ),
    (
        "original_request.deep" + "[0]" * MAX_DEPTH + ":",
        lambda r: r.original_request.update({"deep": nested(MAX_DEPTH)}),
    ),
    (
        "original_request.tags:",
        lambda r: r.original_request.update({"tags": [1] * (MAX_ITEMS + 1)}),
    ),
    (
        "parameter_schema.properties:",
        lambda r: r.parameter_schema.update(
            {"properties": {f"p{i}": {} for i in range(MAX_ITEMS + 1)}}
        ),
    ),
    ("original_request:", lambda r: r.original_request.update({"k" * (MAX_KEY_CHARS + 1): 1})),
    (
        "original_request.body:",
        lambda r: r.original_request.update({"body": "x" * (MAX_STRING_CHARS + 1)}),
    ),
    (f"parameter_schema.b[{MAX_VALUES - MAX_ITEMS - 1}]:", _values_together),
    ("parameter_schema.b:", _chars_together),
    (
        "protected_parameters:",
        lambda r: r.protected_parameters.extend(f"p{i}" for i in range(MAX_PROTECTED + 1)),
    ),
    (
        "protected_parameters:",
        lambda r: r.protected_parameters.append("p" * (MAX_PROTECTED_CHARS + 1)),
    ),
    ("protected_parameters:", lambda r: r.protected_parameters.append("")),
    ("dependency_results:", _many_dependencies),
    (
        "dependency_results:",
        lambda r: r.dependency_results["s" * (MAX_TEXT_CHARS["step_id"] + 1)].update({"a": 1}),
    ),
    *[
        (f"{name}:", lambda r, name=name, limit=limit: setattr(r, name, "q" * (limit + 1)))
        for name, limit in MAX_TEXT_CHARS.items()
    ],
    *[
        (f"{name}:", lambda r, name=name, v=v: setattr(r, name, v))
        for name in (
            "validation_retries_used",
            "semantic_retries_used",
            "max_validation_retries",
            "max_semantic_retries",
        )
        for v in (-1, MAX_RETRIES + 1)
    ],
]


def _id(case: tuple[str, object]) -> str:
    return case[0][:60]


@pytest.mark.parametrize(("where", "build"), ANALYZE_ERROR, ids=[_id(c) for c in ANALYZE_ERROR])
def test_analyze_error_refuses_what_is_out_of_bounds(
    channel: grpc.Channel, where: str, build: Build
) -> None:
    request = analyze_error(build)
    with pytest.raises(grpc.RpcError) as info:
        pb_grpc.PolicyServiceStub(channel).AnalyzeError(request, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (info.value.details() or "").startswith(where), info.value.details()


DispatchBuild = Callable[[pb.CheckDispatchRequest], None]


def _dispatch_values_together(r: pb.CheckDispatchRequest) -> None:
    r.parameters.update({"a": [0] * (MAX_ITEMS - 1)})
    r.parameter_schema.update({"b": [0] * MAX_ITEMS})


CHECK_DISPATCH: list[tuple[str, DispatchBuild]] = [
    ("parameters.n:", lambda r: r.parameters.update({"n": NAN})),
    ("parameters.n[2]:", lambda r: r.parameters.update({"n": [1, 2, -INF]})),
    (
        "parameter_schema.properties.n.enum[0]:",
        lambda r: r.parameter_schema.update({"properties": {"n": {"enum": [INF]}}}),
    ),
    (
        "parameters.deep" + "[0]" * MAX_DEPTH + ":",
        lambda r: r.parameters.update({"deep": nested(MAX_DEPTH)}),
    ),
    ("parameters.tags:", lambda r: r.parameters.update({"tags": [1] * (MAX_ITEMS + 1)})),
    ("parameter_schema:", lambda r: r.parameter_schema.update({"k" * (MAX_KEY_CHARS + 1): 1})),
    (f"parameter_schema.b[{MAX_VALUES - MAX_ITEMS - 1}]:", _dispatch_values_together),
]


@pytest.mark.parametrize(("where", "build"), CHECK_DISPATCH, ids=[_id(c) for c in CHECK_DISPATCH])
def test_check_dispatch_refuses_what_is_out_of_bounds(
    channel: grpc.Channel, where: str, build: DispatchBuild
) -> None:
    request = pb.CheckDispatchRequest()
    build(request)
    with pytest.raises(grpc.RpcError) as info:
        pb_grpc.PolicyServiceStub(channel).CheckDispatch(request, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (info.value.details() or "").startswith(where), info.value.details()


def test_a_request_at_every_bound_is_answered(channel: grpc.Channel) -> None:
    request = pb.AnalyzeErrorRequest(
        http_status=400,
        error_response="bad request",
        user_query="q" * MAX_TEXT_CHARS["user_query"],
        capability_name="c" * MAX_TEXT_CHARS["capability_name"],
        capability_description="d" * MAX_TEXT_CHARS["capability_description"],
        step_id="s" * MAX_TEXT_CHARS["step_id"],
        validation_retries_used=0,
        max_validation_retries=MAX_RETRIES,
        semantic_retries_used=MAX_RETRIES,
        max_semantic_retries=MAX_RETRIES,
    )
    request.protected_parameters.extend(
        f"{i:04d}".ljust(MAX_PROTECTED_CHARS, "p") for i in range(MAX_PROTECTED)
    )
    # Exactly MAX_VALUES values: a list and each of its items count one.
    request.original_request.update(
        {
            "deep": nested(MAX_DEPTH - 1),  # "leaf" is MAX_DEPTH containers down
            "k" * MAX_KEY_CHARS: "x" * (MAX_STRING_CHARS - MAX_KEY_CHARS),
            "tags": list(range(MAX_ITEMS - 1)),
        }
    )
    used = MAX_DEPTH + 1 + MAX_ITEMS
    request.parameter_schema.update({"t": [0] * 4_999})
    used += 5_000
    steps = [f"{i:02d}".ljust(MAX_TEXT_CHARS["step_id"], "s") for i in range(MAX_DEPENDENCIES)]
    for step in steps:
        request.dependency_results[step].update({})
    request.dependency_results[steps[0]].update({"rest": [0] * (MAX_VALUES - used - 1)})
    reply = pb_grpc.PolicyServiceStub(channel).AnalyzeError(request, timeout=30)
    assert not reply.should_retry  # answered: nothing here needs a correction

    dispatch = pb.CheckDispatchRequest()
    dispatch.parameters.update({"deep": nested(MAX_DEPTH - 1), "tags": [0] * (MAX_ITEMS - 1)})
    dispatch.parameter_schema.update({"t": [0] * (MAX_VALUES - MAX_ITEMS - MAX_DEPTH - 1)})
    assert pb_grpc.PolicyServiceStub(channel).CheckDispatch(dispatch, timeout=30).ok


def test_check_dispatch_lists_at_most_its_limit_of_violations(channel: grpc.Channel) -> None:
    request = pb.CheckDispatchRequest()
    request.parameters.update({"refs": ["{{step.x}}"] * 5_000})
    reply = pb_grpc.PolicyServiceStub(channel).CheckDispatch(request, timeout=10)
    assert not reply.ok and len(reply.violations) == MAX_VIOLATIONS
    assert [v.parameter for v in reply.violations[:2]] == ["refs[0]", "refs[1]"]


# The plain fields are checked in-process too: the same rules, one place.
IN_PROCESS: list[tuple[str, dict[str, Any]]] = [
    *[(name, {name: "q" * (limit + 1)}) for name, limit in MAX_TEXT_CHARS.items()],
    ("validation_retries_used", {"validation_retries_used": MAX_RETRIES + 1}),
    ("max_semantic_retries", {"max_semantic_retries": MAX_RETRIES + 1}),
    ("protected_parameters", {"protected_parameters": frozenset({"p" * 1025})}),
    ("protected_parameters", {"protected_parameters": frozenset(map(str, range(257)))}),
    ("dependency_results", {"dependency_results": {str(i): {} for i in range(65)}}),
]


@pytest.mark.parametrize(("field", "fields"), IN_PROCESS, ids=[f for f, _ in IN_PROCESS])
def test_plain_fields_are_bounded_in_process(field: str, fields: dict[str, Any]) -> None:
    analyzer = Analyzer(AnalyzerSettings(), builtin_policy())
    with pytest.raises(PolicyInputError) as info:
        asyncio.run(analyzer.analyze(AnalysisRequest(http_status=400, **fields)))
    assert info.value.field == field
