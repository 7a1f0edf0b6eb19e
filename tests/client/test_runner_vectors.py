"""tests/vectors/runner.json through both Python step runners, against the
real daemon and in the local fallback (the daemon unreachable), each
'daemonAnswers' case against a loopback gRPC server that answers every call
with its status, and each 'admitAnswers' case against a loopback gRPC server
that answers Admit from the case's list (DecideRetry with UNAVAILABLE, so the
fallback decides; ReportOutcome by recording).

Only the runner's sleep is replaced, by one that records the wait; every
decision is a real call (or the real fallback), recorded on its way out.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from conftest import Daemon, duration_ms, free_port, subset_mismatches
from scripted_admit import AdmitServer, admit_servers
from squawk.v1 import policy_pb2 as pb
from squawk_client import (
    AsyncSquawkClient,
    Criticality,
    Decision,
    ErrorInfo,
    SquawkClient,
    SquawkError,
    StepError,
    StepFailed,
    StepOptions,
    Tier,
    run_step,
    run_step_sync,
)

RUNS = json.loads((Path(__file__).parents[1] / "vectors" / "runner.json").read_text())["cases"]
# A daemon on a loaded CI machine still answers well within this.
TIMEOUT = timedelta(seconds=10)


def _expectation(case: dict[str, Any], mode: str) -> dict[str, Any]:
    alternative = case.get("fallback")
    if mode == "fallback" and isinstance(alternative, dict):
        return alternative
    return dict(case["expect"])


@dataclass
class Script:
    """One case's step, hooks and what they saw."""

    case: dict[str, Any]
    steps: list[dict[str, Any]] = field(init=False)
    corrections: list[Any] | None = field(init=False)
    verdicts: list[str] | None = field(init=False)
    dispatches: list[Any] = field(default_factory=list)
    waits_ms: list[int] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    seen: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.steps = list(self.case["steps"])
        self.corrections = copy.deepcopy(self.case.get("correct"))
        self.verdicts = list(self.case["onError"]) if "onError" in self.case else None

    def options(self) -> StepOptions:
        o = self.case.get("options", {})
        deadline = o.get("deadline")
        return StepOptions(
            max_attempts=o.get("maxAttempts"),
            max_validation_retries=o.get("maxValidationRetries"),
            deadline=timedelta(seconds=float(deadline[:-1])) if deadline else None,
            capability=o.get("capability", ""),
            upstream=o.get("upstream", ""),
            profile=o.get("profile", ""),
            hitl_approved=o.get("hitlApproved", False),
            delegated_orchestrator=o.get("delegatedOrchestrator", False),
            cost=float(o.get("cost", 0)),
            criticality=(
                Criticality[o["criticality"].removeprefix("CRITICALITY_")]
                if "criticality" in o
                else None
            ),
            fairness_key=o.get("fairnessKey", ""),
            fairness_weight=float(o.get("fairnessWeight", 0)),
        )

    def step(self, params: Any) -> Any:
        self.dispatches.append(copy.deepcopy(params))
        assert self.steps, f"the step was called {len(self.dispatches)} times, more than scripted"
        outcome = self.steps.pop(0)
        if "fail" in outcome:
            f = outcome["fail"]
            raise StepError(
                "scripted failure",
                http_status=f.get("httpStatus", 0),
                transport_failure=f.get("transportFailure", False),
                body=f.get("body", "").encode(),
                headers=f.get("headers", {}),
            )
        if "raise" in outcome:
            raise ConnectionError(outcome["raise"])
        if "cost" in outcome:
            # A result carrying its real cost and its response headers.
            return {"cost": outcome["cost"], "headers": dict(outcome["headers"])}
        return "ok"

    def hooks(self) -> dict[str, Any]:
        """The runner's cost_of and headers_of, when the results carry them."""
        if not any("cost" in step for step in self.case["steps"]):
            return {}
        return {
            "cost_of": lambda result: result["cost"],
            "headers_of": lambda result: result["headers"],
        }

    def correct(self, params: Any, error: BaseException, decision: Decision) -> Any:
        assert self.corrections, "the correction hook was called more often than scripted"
        return self.corrections.pop(0)

    def on_error(self, info: ErrorInfo) -> Tier:
        assert self.verdicts, "the error hook was called more often than scripted"
        self.seen.append(
            {
                "attempt": info.attempt,
                "correctionsUsed": info.corrections_used,
                "action": "ACTION_" + info.decision.action.name,
                "reason": "REASON_" + info.decision.reason.name,
            }
        )
        return Tier(self.verdicts.pop(0))

    def record(self, request: pb.DecideRetryRequest) -> None:
        self.requests.append(json_format.MessageToDict(request))

    def sleep(self, seconds: float) -> None:
        self.waits_ms.append(round(seconds * 1000))

    def check(self, expect: dict[str, Any], outcome: dict[str, Any]) -> None:
        actual: dict[str, Any] = {
            "dispatches": self.dispatches,
            "waitsMs": self.waits_ms,
            "outcome": outcome,
            "onErrorSeen": self.seen,
        }
        mismatches = []
        for key in ("dispatches", "waitsMs", "onErrorSeen"):
            if key in expect and expect[key] != actual[key]:
                mismatches.append(f"{key}: expected {expect[key]}, got {actual[key]}")
        if "requests" in expect:
            if len(expect["requests"]) != len(self.requests):
                mismatches.append(f"requests: expected {expect['requests']}, got {self.requests}")
            for i, (want, got) in enumerate(zip(expect["requests"], self.requests, strict=False)):
                # proto3 JSON leaves out zero values; a listed zero must hold.
                full = {"attempt": 0, "validationRetriesUsed": 0, "correctionAvailable": False}
                full |= {"httpStatus": 0, "transportFailure": False, "hitlApproved": False}
                full |= {"delegatedOrchestrator": False} | got
                mismatches += subset_mismatches(want, full, f"requests[{i}]")
        mismatches += subset_mismatches(expect["outcome"], outcome, "outcome")
        assert mismatches == []

    def check_admissions(self, expect: dict[str, Any], server: AdmitServer) -> None:
        """The Admit requests and the outcomes the loopback server was sent."""
        mismatches = []
        assert server.answers == [], f"Admit answers left unused: {server.answers}"
        if "admitRequests" in expect:
            want_all, got_all = expect["admitRequests"], server.admit_requests
            if len(want_all) != len(got_all):
                mismatches.append(f"admitRequests: expected {want_all}, got {got_all}")
            for i, (want, got) in enumerate(zip(want_all, got_all, strict=False)):
                path = f"admitRequests[{i}]"
                want = dict(want)
                if "deadlineAtMost" in want:
                    most = duration_ms(want.pop("deadlineAtMost"))
                    sent = duration_ms(got["deadline"]) if "deadline" in got else None
                    if sent is None or not 0 < sent <= most:
                        mismatches.append(
                            f"{path}.deadline: expected in (0, {most}] ms, got {sent}"
                        )
                if "deadline" in want and want.pop("deadline") is None and "deadline" in got:
                    mismatches.append(f"{path}.deadline: expected unset, got {got['deadline']}")
                mismatches += subset_mismatches(want, got, path)
        if "reported" in expect:
            want_all, got_all = expect["reported"], server.reported
            if len(want_all) != len(got_all):
                mismatches.append(f"reported: expected {want_all}, got {got_all}")
            for i, (want, got) in enumerate(zip(want_all, got_all, strict=False)):
                want = dict(want)
                headers = got.get("headers", {})
                # 'headers' is compared whole; 'headerCount' counts them.
                if "headers" in want and (exact := want.pop("headers")) != headers:
                    mismatches.append(f"reported[{i}].headers: expected {exact}, got {headers}")
                if "headerCount" in want and (n := want.pop("headerCount")) != len(headers):
                    mismatches.append(f"reported[{i}]: expected {n} headers, got {len(headers)}")
                mismatches += subset_mismatches(want, {"success": False} | got, f"reported[{i}]")
        assert mismatches == []


def _failed(exc: StepFailed) -> dict[str, Any]:
    d = exc.decision
    return {
        "failed": {
            "action": "ACTION_" + d.action.name,
            "reason": "REASON_" + d.reason.name,
            "calls": exc.attempts,
        }
    }


def _error(exc: SquawkError) -> dict[str, Any]:
    return {"error": {"code": exc.code}}


class RecordingClient(SquawkClient):
    def __init__(self, target: str, script: Script) -> None:
        super().__init__(target, call_timeout=TIMEOUT)
        self.script = script

    def decide_retry(self, request: pb.DecideRetryRequest) -> Decision:
        self.script.record(request)
        return super().decide_retry(request)


class AsyncRecordingClient(AsyncSquawkClient):
    def __init__(self, target: str, script: Script) -> None:
        super().__init__(target, call_timeout=TIMEOUT)
        self.script = script

    async def decide_retry(self, request: pb.DecideRetryRequest) -> Decision:
        self.script.record(request)
        return await super().decide_retry(request)


def _run_sync(target: str, script: Script) -> tuple[dict[str, Any], bool]:
    with RecordingClient(target, script) as client:
        try:
            run_step_sync(
                client,
                script.step,
                copy.deepcopy(script.case["params"]),
                correct=script.correct if script.corrections is not None else None,
                on_error=script.on_error if script.verdicts is not None else None,
                options=script.options(),
                sleep=script.sleep,
                **script.hooks(),
            )
        except StepFailed as exc:
            return _failed(exc), client.fallback_count > 0
        except SquawkError as exc:
            return _error(exc), client.fallback_count > 0
        return {"ok": True}, client.fallback_count > 0


def _run_async(target: str, script: Script) -> tuple[dict[str, Any], bool]:
    async def step(params: Any) -> Any:
        return script.step(params)

    async def correct(params: Any, error: BaseException, decision: Decision) -> Any:
        return script.correct(params, error, decision)

    async def sleep(seconds: float) -> None:
        script.sleep(seconds)

    async def main() -> tuple[dict[str, Any], bool]:
        async with AsyncRecordingClient(target, script) as client:
            try:
                await run_step(
                    client,
                    step,
                    copy.deepcopy(script.case["params"]),
                    correct=correct if script.corrections is not None else None,
                    on_error=script.on_error if script.verdicts is not None else None,
                    options=script.options(),
                    sleep=sleep,
                    **script.hooks(),
                )
            except StepFailed as exc:
                return _failed(exc), client.fallback_count > 0
            except SquawkError as exc:
                return _error(exc), client.fallback_count > 0
            return {"ok": True}, client.fallback_count > 0

    return asyncio.run(main())


RUNNERS: dict[str, Callable[[str, Script], tuple[dict[str, Any], bool]]] = {
    "sync": _run_sync,
    "async": _run_async,
}


@pytest.fixture(scope="module")
def nowhere() -> Iterator[str]:
    yield f"127.0.0.1:{free_port()}"


class _Answers(grpc.GenericRpcHandler):
    """Answers every call, whatever its method, with one status and no message."""

    def __init__(self, code: grpc.StatusCode) -> None:
        self.code = code

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[bytes, bytes]:
        def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
            context.abort(self.code, "scripted status")

        return grpc.unary_unary_rpc_method_handler(answer)


@pytest.fixture
def answering() -> Iterator[Callable[[str], str]]:
    """Starts a loopback server answering the named status; yields its target."""
    servers: list[grpc.Server] = []

    def start(code: str) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        server.add_generic_rpc_handlers((_Answers(grpc.StatusCode[code]),))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(None)


@pytest.fixture
def admitting() -> Iterator[Callable[[list[dict[str, Any]]], tuple[str, AdmitServer]]]:
    """Starts an AdmitServer on loopback; yields a starter of (target, server)."""
    with admit_servers() as start:
        yield start


def _modes(case: dict[str, Any]) -> list[str]:
    if "daemonAnswers" in case:
        return ["status"]
    if "admitAnswers" in case:
        return ["admit"]
    return ["daemon", "fallback"]


MODES = [
    pytest.param(case, mode, id=f"{mode}-{case['name']}") for case in RUNS for mode in _modes(case)
]


@pytest.mark.parametrize("runner", sorted(RUNNERS))
@pytest.mark.parametrize(("case", "mode"), MODES)
def test_runner_vector(
    case: dict[str, Any],
    mode: str,
    runner: str,
    daemon: Daemon,
    nowhere: str,
    answering: Callable[[str], str],
    admitting: Callable[[list[dict[str, Any]]], tuple[str, AdmitServer]],
) -> None:
    script = Script(case)
    scripted: AdmitServer | None = None
    if mode == "status":
        target = answering(case["daemonAnswers"])
    elif mode == "admit":
        target, scripted = admitting(case["admitAnswers"])
    else:
        target = daemon.target if mode == "daemon" else nowhere
    # The runner closes its client before returning: batched outcomes are sent.
    outcome, fell_back = RUNNERS[runner](target, script)
    script.check(_expectation(case, mode), outcome)
    # The mode really was the one named: the daemon answered, or nobody did;
    # a status either took the fallback or ended the run with its error; the
    # scripted Admit server made every DecideRetry fall back.
    if mode == "status":
        assert fell_back == ("error" not in outcome)
    elif scripted is not None:
        script.check_admissions(case["expect"], scripted)
        assert fell_back == bool(script.requests)
    else:
        assert fell_back == (mode == "fallback" and bool(script.requests))
