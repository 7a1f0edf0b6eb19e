"""The daemon sheds its own overload in order, over the wire: while calls
reach it behind their deadline (the transport's queue is longer than its
callers wait), Classify and AnalyzeError are answered "not decided" first,
then DecideRetryBatch; Admit, ReportOutcome and DecideRetry are decided
whenever they arrive in time. Every shed carries gRPC's retry pushback and
is counted, and the outcomes of a ReportOutcome that was not recorded are
counted too. The pressure is real: calls sent with deadlines of a few
milliseconds reach the real daemon behind them."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import grpc

from conftest import free_port, scrape, start_daemon
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

LEVEL = "squawk_overload_level"
SHED_OUTCOMES = "squawk_shed_outcomes_total"
_REFUSED = 'squawk_refused_calls_total{{cause="{}",code="RESOURCE_EXHAUSTED",rpc="{}"}}'
SHED_CLASSIFY = _REFUSED.format("overloaded", "Classify")
BEHIND_REPORTS = _REFUSED.format("behind", "ReportOutcome")

DECIDE = pb.DecideRetryRequest(attempt=1, http_status=503, capability="search")
OUTCOME = pb.Outcome(upstream="shed-order", success=True)
REPORT = pb.ReportOutcomeRequest(outcomes=[OUTCOME] * 3)


def _code(call: Callable[[], Any]) -> str:
    try:
        call()
        return "OK"
    except grpc.RpcError as exc:
        if exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED:
            assert (exc.details() or "").startswith("not decided: ")
            trailers = {m.key: m.value for m in exc.trailing_metadata() or ()}
            assert trailers.get("grpc-retry-pushback-ms") in ("250", b"250")
        return str(exc.code().name)


def test_the_daemon_sheds_diagnosis_first_and_dispatch_only_by_its_own_deadline() -> None:
    port = free_port()
    daemon = start_daemon("--metrics-listen", f"127.0.0.1:{port}")
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            stub.DecideRetry(DECIDE, timeout=5)  # the channel is up
            answers: dict[str, Counter[str]] = {}
            calls: dict[str, Callable[[], Any]] = {
                "Classify": lambda: stub.Classify(pb.ClassifyRequest(http_status=503), timeout=5),
                "DecideRetryBatch": lambda: stub.DecideRetryBatch(
                    pb.DecideRetryBatchRequest(requests=[DECIDE] * 2), timeout=5
                ),
                "Admit": lambda: stub.Admit(pb.AdmitRequest(upstream="shed-order"), timeout=5),
                "ReportOutcome": lambda: stub.ReportOutcome(
                    pb.ReportOutcomeRequest(outcomes=[OUTCOME]), timeout=5
                ),
                "DecideRetry": lambda: stub.DecideRetry(DECIDE, timeout=5),
            }

            def rounds(count: int, behind: tuple[float, ...], fillers: int) -> None:
                """Calls that reach the daemon with under 5 ms left (among
                them ReportOutcomes of 3 outcomes: answered, not recorded),
                calls in time, then one of each RPC, `count` times."""
                answers.clear()
                for _ in range(count):
                    for timeout in behind:
                        _code(partial(stub.DecideRetry, DECIDE, timeout=timeout))
                        _code(partial(stub.ReportOutcome, REPORT, timeout=timeout))
                    for _ in range(fillers):
                        stub.DecideRetry(DECIDE, timeout=5)
                    for rpc, call in calls.items():
                        answers.setdefault(rpc, Counter())[_code(call)] += 1

            # A share behind of about a tenth: diagnosis is shed, batches not.
            rounds(40, (0.004, 0.0045), 20)
            few = {rpc: answers[rpc]["RESOURCE_EXHAUSTED"] for rpc in calls}
            # Every call behind: batches are shed too.
            rounds(40, (0.002, 0.003, 0.004) * 4, 0)
            many = {rpc: answers[rpc]["RESOURCE_EXHAUSTED"] for rpc in calls}
            assert few["Classify"] > few["DecideRetryBatch"], (few, many)
            assert many["DecideRetryBatch"] > 0, (few, many)
            # With time to spare, dispatch is always decided, whatever the level.
            for rpc in ("Admit", "ReportOutcome", "DecideRetry"):
                assert few[rpc] == many[rpc] == 0, (few, many)
            metrics = scrape(port)
            assert metrics[SHED_CLASSIFY] == few["Classify"] + many["Classify"]
            # A ReportOutcome answered behind is never lost silently: its
            # outcomes are counted, three a call.
            assert metrics[BEHIND_REPORTS] >= 1
            assert metrics[SHED_OUTCOMES] == 3 * metrics[BEHIND_REPORTS]
            # Caught up, the level falls back and diagnosis is decided again.
            deadline = time.monotonic() + 10
            while _code(calls["Classify"]) != "OK":
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert scrape(port)[LEVEL] == 0.0
    finally:
        daemon.stop()
