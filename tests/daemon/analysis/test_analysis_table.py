"""The offline analyzer on the case table, in process and over the wire.

In process builds the request straight from JSON (integers stay integers);
over the wire goes through the daemon's Struct conversion (every number
becomes a float), so both number paths meet the same expectations.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from squawk.daemon.analysis import (
    Analysis,
    AnalysisRequest,
    Analyzer,
    AnalyzerSettings,
    Json,
    wire,
)
from squawk.daemon.analysis.budget import DEFAULT_UNITS, Budget
from squawk.daemon.analysis.settings import Backend
from squawk.daemon.analysis.values import same_json
from squawk.policy import builtin_policy
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

TABLE = json.loads((Path(__file__).parent / "analysis_cases.json").read_text())["cases"]
CASES = [pytest.param(c, id=c["name"]) for c in TABLE]
OFFLINE = Analyzer(AnalyzerSettings(), builtin_policy())


def request_from(data: dict[str, Any]) -> AnalysisRequest:
    fields = dict(data)
    fields["protected_parameters"] = frozenset(fields.get("protected_parameters", ()))
    return AnalysisRequest(**fields)


def mismatches(expect: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """Where an answer (as plain values) differs from a case's expectation."""
    out = []
    for key in ("should_retry", "source"):
        if got[key] != expect[key]:
            out.append(f"{key}: expected {expect[key]!r}, got {got[key]!r} ({got['reason']})")
    changes: dict[str, Json] = got["changes"]
    if changes.keys() != expect["changes"].keys() or not all(
        same_json(changes[k], v) for k, v in expect["changes"].items()
    ):
        out.append(f"changes: expected {expect['changes']!r}, got {changes!r} ({got['reason']})")
    if "transient" in expect and got["transient"] != expect["transient"]:
        out.append(f"transient: expected {expect['transient']}, got {got['transient']}")
    for want in expect.get("rejected", []):
        if not any(
            r[0] == want["parameter"] and r[1].startswith(want["reason"]) for r in got["rejected"]
        ):
            out.append(f"rejected: expected {want}, got {got['rejected']}")
    if "reason_contains" in expect and expect["reason_contains"] not in got["reason"]:
        out.append(f"reason: expected to mention {expect['reason_contains']!r}: {got['reason']}")
    return out


def plain(analysis: Analysis) -> dict[str, Any]:
    return {
        "should_retry": analysis.should_retry,
        "source": analysis.source.name,
        "changes": dict(analysis.suggested_changes),
        "transient": analysis.is_transient_error,
        "rejected": [(r.parameter, r.reason) for r in analysis.rejected_changes],
        "reason": analysis.reason,
    }


def test_the_table_is_big_enough() -> None:
    assert len(TABLE) >= 30
    fixed = [c for c in TABLE if c["expect"]["should_retry"]]
    refused = [c for c in TABLE if not c["expect"]["should_retry"]]
    assert len(fixed) >= 15 and len(refused) >= 15


@pytest.mark.parametrize("case", CASES)
def test_offline_in_process(case: dict[str, Any]) -> None:
    analysis = asyncio.run(OFFLINE.analyze(request_from(case["request"])))
    assert mismatches(case["expect"], plain(analysis)) == []
    # One sentence, always.
    assert analysis.reason.endswith(".") and "\n" not in analysis.reason


@pytest.mark.parametrize("case", CASES)
def test_offline_over_the_wire(channel: grpc.Channel, case: dict[str, Any]) -> None:
    stub = pb_grpc.PolicyServiceStub(channel)
    request = json_format.ParseDict(case["request"], pb.AnalyzeErrorRequest())
    reply = stub.AnalyzeError(request, timeout=10)
    got = {
        "should_retry": reply.should_retry,
        "source": pb.AnalysisSource.Name(reply.source).removeprefix("ANALYSIS_SOURCE_"),
        "changes": json_format.MessageToDict(reply.suggested_changes),
        "transient": reply.is_transient_error,
        "rejected": [(r.parameter, r.reason) for r in reply.rejected_changes],
        "reason": reply.reason,
    }
    assert mismatches(case["expect"], got) == []


@pytest.mark.parametrize("case", CASES)
def test_on_the_loop_and_on_the_worker_answer_alike(case: dict[str, Any]) -> None:
    # The daemon analyses a small request on the event loop and a larger one
    # on the worker thread; the answer must not depend on which.
    request = json_format.ParseDict(case["request"], pb.AnalyzeErrorRequest())
    small = wire.analysis_small(request)
    assert small is not None  # the table's requests are all small
    on_loop = OFFLINE.analyze_now(small)
    on_worker = asyncio.run(OFFLINE.analyze(wire.analysis_request(request)))
    assert on_loop == on_worker


def _many_words(length: int) -> pb.AnalyzeErrorRequest:
    """Error text of one-letter words, and parameters of many words whose values it holds."""
    names = ["_".join(["a"] * (k % 8 + 1) + [f"z{k}"]) for k in range(16)]
    request = pb.AnalyzeErrorRequest(http_status=400, error_response=("a " * length)[:length])
    request.original_request.update({name: "a a" for name in names})
    request.parameter_schema.update({"properties": {name: {"enum": ["w"]} for name in names}})
    return request


@pytest.mark.parametrize("length", [100, 256, 257, 1_000, 4_000, 8_000])
def test_what_the_loop_analyses_is_cheap(length: int, analysis_budgets: list[Budget]) -> None:
    # The event loop answers every call and health check meanwhile: a request
    # analysed there must cost little, whatever its text. Indexing the error
    # text's words is linear in it (8,000 characters of such words once took
    # 35-70 ms on the loop), so text over 256 characters (about 1 ms of
    # indexing) goes to the worker; the searches that are not linear are
    # counted in the budget's units, the same on any machine.
    small = wire.analysis_small(_many_words(length))
    if length > 256:
        assert small is None  # the worker's: the loop is not held
        return
    assert small is not None and len(small.error_response) == length
    OFFLINE.analyze_now(small)
    (budget,) = analysis_budgets
    # A hundredth of an analysis's budget: about 0.2 ms of searching.
    assert DEFAULT_UNITS - budget.left < DEFAULT_UNITS // 100


def test_a_larger_request_goes_to_the_worker() -> None:
    values = pb.AnalyzeErrorRequest(http_status=400, error_response="bad unit")
    values.original_request.update({f"p{i}": i for i in range(wire.INLINE_VALUES + 1)})
    assert wire.analysis_small(values) is None
    text = pb.AnalyzeErrorRequest(http_status=400, error_response="x" * (wire.INLINE_CHARS + 1))
    assert wire.analysis_small(text) is None
    # A model backend answers over the network: never on the loop.
    with_model = Analyzer(
        AnalyzerSettings(backend=Backend.OPENAI, base_url="http://127.0.0.1:9/v1", model="m"),
        builtin_policy(),
    )
    small = wire.analysis_small(pb.AnalyzeErrorRequest(http_status=400, error_response="bad"))
    assert small is not None and with_model.analyze_now(small) is None
