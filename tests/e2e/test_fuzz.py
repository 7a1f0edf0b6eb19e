"""Nothing a caller sends fails a call or stalls the daemon: the wire fuzz.

Each RPC gets its own daemon (decision log on) and a seeded stream of
random bytes, damaged valid requests, hostile well-formed ones and fixed
worst cases (tests/support/fuzz_cases.py, tests/support/fuzz_edges.py; for Admit,
ReportOutcome and GetUpstreams tests/support/fuzz_upstreams.py, which also readies
their daemon's upstream state before the first case). The answers must
be OK, INVALID_ARGUMENT naming its field, or RESOURCE_EXHAUSTED past
gRPC's size limit: never INTERNAL, UNKNOWN or a missed 5 s deadline (with
16 calls in flight, five times the slowest legitimate call seen on a
loaded machine), and bytes protobuf cannot parse answer INVALID_ARGUMENT.
Afterwards the daemon must be alive and SERVING, with a bounded log and
bounded decision-log lines (tests/support/fuzz_wire.py says exactly what is
judged). `make fuzz` runs the same generator longer.

A failure names each case as `seed=S index=I`; `fuzz_cases.case(S, rpc, I)`
rebuilds it.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from fuzz_cases import RPCS, Case, case, is_malformed
from fuzz_edges import EDGES
from fuzz_report import verdict
from fuzz_wire import fuzz_rpc
from squawk.v1 import policy_pb2 as pb

SEED = 20261130
CASES_PER_RPC = 2000
# What this seed's run must have sent besides random bytes, mutations and
# hostile messages, so that a quiet run cannot mean a narrow one.
COVERS = {
    "Classify": {"fields"},
    "DecideRetry": {
        "headers",
        "duration",
        "body.envelope",
        "body.jsonish",
        "body.surrogate.utf-16",
    },
    "DecideRetryBatch": {"huge.10000", "huge.10001", "huge.20000", "one_hostile_item"},
    "AnalyzeError": {"dependencies", "deep99", "deep101", "deep5000"},
    "CheckDispatch": {"deep99", "deep101", "deep5000"},
    "Admit": {
        "upstream.state",
        "upstream.churn",
        "upstream.untracked",
        "upstream.limit",
        "upstream.hostile",
        "upstream.control",
    },
    "ReportOutcome": {
        "churn",
        "breakers",
        "outcomes",
        "hostile_outcomes",
        "upstream.limit",
        "upstream.hostile",
        "upstream.control",
        "headers",
        "latency",
        "admission_id",
        "age",
        "one_bad_outcome.status",
        "one_bad_outcome.headers",
        "one_bad_outcome.upstream",
        "one_bad_outcome.admission_id",
        "one_bad_outcome.age",
        "one_bad_outcome.profile",
    },
    "GetUpstreams": {"profile", "page_size", "page_token", "upstream.state", "upstream.control"},
    "GetEvents": {"after", "page_size", "profile", "upstream.state", "upstream.hostile"},
}


@pytest.mark.parametrize("rpc", RPCS)
def test_no_request_fails_a_call_or_stalls_the_daemon(rpc: str, tmp_path: Path) -> None:
    report = fuzz_rpc(rpc, SEED, CASES_PER_RPC, tmp_path, timeout_s=5.0, budget_s=30.0, restarts=3)
    if report.failed:
        pytest.fail(report.summary(), pytrace=False)
    assert report.judged == CASES_PER_RPC
    edges = {label for label, _ in (build() for build in EDGES[rpc])}
    assert {"random", "mutation", "hostile", *COVERS[rpc], *edges} <= report.words.keys()
    assert 0 < report.malformed < report.judged


def test_a_case_is_rebuilt_from_seed_rpc_and_index_alone() -> None:
    for rpc in RPCS:
        assert case(SEED, rpc, 1234) == case(SEED, rpc, 1234)
        assert case(SEED, rpc, 1234) != case(SEED + 1, rpc, 1234)


_GOOD = Case(
    "DecideRetry", 0, "hostile:fields", pb.DecideRetryRequest(attempt=1).SerializeToString()
)
_BAD = Case("DecideRetry", 0, "random", b"\xff\xff\xff")
S = grpc.StatusCode


@pytest.mark.parametrize(
    ("case_", "code", "details", "fine"),
    [
        (_GOOD, S.OK, "", True),
        (_GOOD, S.INVALID_ARGUMENT, "attempt: must be >= 1 (1-based), got 0", True),
        (_GOOD, S.INVALID_ARGUMENT, "requests[3].profile: unknown profile", True),
        (_GOOD, S.INVALID_ARGUMENT, "unknown profile 'x'", False),  # no field first
        (_GOOD, S.INVALID_ARGUMENT, "headers: " + "x" * 5000, False),  # details too long
        (_GOOD, S.RESOURCE_EXHAUSTED, "Received message larger than max", True),
        (_GOOD, S.INTERNAL, "internal error; see the daemon's log", False),
        (_GOOD, S.UNKNOWN, "Unexpected <class 'DecodeError'>", False),
        (_GOOD, S.DEADLINE_EXCEEDED, "Deadline Exceeded", False),
        (_GOOD, S.UNAVAILABLE, "Socket closed", False),
        (_BAD, S.INVALID_ARGUMENT, "request: not a valid DecideRetryRequest", True),
        (_BAD, S.OK, "", False),
        (_BAD, S.UNKNOWN, "Unexpected <class 'DecodeError'>", False),
    ],
)
def test_the_verdict(case_: Case, code: grpc.StatusCode, details: str, fine: bool) -> None:
    malformed = is_malformed(case_.rpc, case_.payload)
    assert malformed == (case_ is _BAD)
    assert (verdict(case_, code, details, malformed) is None) == fine
