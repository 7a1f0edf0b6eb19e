"""Caller patterns run on RE2, in linear time; a pattern RE2 cannot run accepts nothing."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest

from squawk.daemon.analysis import AnalysisRequest, Analyzer, AnalyzerSettings, Source, patterns
from squawk.daemon.analysis.budget import Budget, scope
from squawk.daemon.analysis.gates import check_changes
from squawk.daemon.analysis.schema import UNCHECKED, problems
from squawk.policy import builtin_policy
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

OFFLINE = Analyzer(AnalyzerSettings(), builtin_policy())

# Patterns that make a backtracking engine take time exponential in the text.
CATASTROPHIC = ["^(a+)+$", "^(a|a)*$", "^(a|aa)+$", "(x+x+)+y", "^(\\w+\\s?)*$"]


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_backtracking_pattern_costs_linear_time(pattern: str) -> None:
    # 27 characters took Python's re 9.2 s for the first one; RE2 answers
    # 100,000 at once.
    for text in ("a" * 26 + "!", "a" * 100_000 + "!"):
        started = time.perf_counter()
        found = problems(text, {"type": "string", "pattern": pattern})
        assert time.perf_counter() - started < 0.1
        assert found and "does not match the pattern" in found[0]


# (pattern, why RE2 cannot check it)
UNVERIFIABLE = [
    ("^(a)\\1$", "a backreference"),
    ("^(?=[A-Z])[A-Z]{3}$", "lookahead"),
    ("(?<!x)PAR", "lookbehind"),
    ("PAR\\Z", "\\Z (RE2 spells it \\z)"),
    ("^[A-Z]{3}$" + " " * patterns.MAX_PATTERN_CHARS, "over MAX_PATTERN_CHARS"),
    ("(?:\\pL|x){1,1000}", "a program over MAX_MEMORY"),
]


@pytest.mark.parametrize(("pattern", "why"), UNVERIFIABLE, ids=[w for _, w in UNVERIFIABLE])
def test_a_pattern_re2_cannot_run_is_never_a_pass(pattern: str, why: str) -> None:
    schema: dict[str, Any] = {"type": "string", "pattern": pattern}
    # "PAR" would match every one of these on a backtracking engine.
    (problem,) = problems("PAR", schema)
    assert UNCHECKED in problem
    assert patterns.unverifiable(pattern) is not None
    request = AnalysisRequest(
        http_status=400,
        original_request={"code": "par"},
        parameter_schema={"properties": {"code": schema}},
    )
    accepted, (rejected,) = check_changes({"code": "PAR"}, request, {})
    assert accepted == {}
    assert rejected.reason.startswith("cannot be checked against the schema")


def test_the_offline_analyzer_says_why_it_proposes_nothing() -> None:
    def request(pattern: str) -> AnalysisRequest:
        return AnalysisRequest(
            http_status=400,
            error_response="invalid code",
            original_request={"code": "par"},
            parameter_schema={"properties": {"code": {"type": "string", "pattern": pattern}}},
        )

    # The case fix it makes under a pattern RE2 runs ...
    fixed = asyncio.run(OFFLINE.analyze(request("^[A-Z]{3}$")))
    assert fixed.suggested_changes == {"code": "PAR"} and fixed.source is Source.HEURISTIC
    # ... it does not make under one RE2 cannot run, and says so.
    refused = asyncio.run(OFFLINE.analyze(request("^(?=[A-Z])[A-Z]{3}$")))
    assert refused.suggested_changes == {} and not refused.should_retry
    assert "code's pattern uses a feature RE2 cannot run" in refused.reason


def test_ecma_unicode_escapes_are_read() -> None:
    assert patterns.search("^caf\\u00e9$", "café") is patterns.Verdict.MATCH
    assert patterns.search("^caf\\u00e9$", "cafe") is patterns.Verdict.NO_MATCH
    # An escaped backslash before "u" is a literal backslash, not an escape.
    assert patterns.search("^\\\\u00e9$", "\\u00e9") is patterns.Verdict.MATCH


def test_re2_errors_stay_out_of_the_log(capfd: pytest.CaptureFixture[str]) -> None:
    # A pattern no earlier test compiled: RE2 parses it here, fails, and must
    # not print the absl "Error parsing" line to the daemon's stderr.
    assert patterns.search("(x)\\1 unique to this test", "x") is patterns.Verdict.UNSUPPORTED
    # Nor "DFA out of memory" when a search outgrows its cache (the budget
    # is raised here so the search runs at all).
    with scope(Budget(units=10**9)):
        assert patterns.search("(?:[a-z0-9]{1,1000}x)", "a" * 5_000) is patterns.Verdict.NO_MATCH
    out, err = capfd.readouterr()
    assert "unique to this test" not in out + err and "re2" not in (out + err).lower()


def test_a_spent_budget_checks_nothing_more() -> None:
    with scope(Budget(units=0)):
        assert patterns.search("^[A-Z]{3}$", "PAR") is patterns.Verdict.OVER_BUDGET
    # The cost charged is (text bytes + 1) x program size: a long text on a
    # large program costs what RE2's slow path would.
    big = "(?:[a-z0-9]{1,1000}x)"
    with scope(Budget()) as budget:
        assert patterns.search(big, "a" * 100) is not patterns.Verdict.OVER_BUDGET
        assert budget.left < Budget().left - 100 * 1000
        assert patterns.search(big, "a" * 1_000_000) is patterns.Verdict.OVER_BUDGET


def _schema_with(pattern: str) -> dict[str, Any]:
    return {"properties": {"code": {"type": "string", "pattern": pattern}}}


def test_the_hostile_pattern_over_the_wire_answers_at_once(channel: grpc.Channel) -> None:
    """The reviewer's request: 9.2 s on the event loop before RE2."""
    request = pb.AnalyzeErrorRequest(http_status=400)
    request.original_request.update({"code": "a" * 26 + "!"})
    request.parameter_schema.update(_schema_with("^(a+)+$"))
    started = time.perf_counter()
    reply = pb_grpc.PolicyServiceStub(channel).AnalyzeError(request, timeout=5)
    assert time.perf_counter() - started < 1.0
    assert not reply.should_retry
