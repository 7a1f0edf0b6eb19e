"""The Python client and step runners against the real daemon."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider

from conftest import Daemon, free_port, start_daemon, wait_serving
from squawk.v1 import policy_pb2 as pb
from squawk_client import (
    Action,
    AsyncSquawkClient,
    Decision,
    Reason,
    SquawkClient,
    SquawkError,
    SquawkInputError,
    StepCancelled,
    StepError,
    StepFailed,
    StepOptions,
    run_step,
    run_step_sync,
)

FAST = {"SQUAWK_STEP_RETRY_INITIAL_DELAY": "1ms", "SQUAWK_STEP_RETRY_MAX_DELAY": "4ms"}


@pytest.fixture
def fast_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in FAST.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="module")
def fast_daemon() -> Iterator[Daemon]:
    daemon = start_daemon(env=FAST)
    yield daemon
    daemon.stop()


def test_sync_client_asks_the_daemon(daemon: Daemon) -> None:
    with SquawkClient(daemon.target, call_timeout=timedelta(seconds=5)) as client:
        decision = client.decide_retry(pb.DecideRetryRequest(attempt=1, http_status=429))
        assert decision == Decision(
            Action.RETRY,
            timedelta(milliseconds=542),
            Reason.TRANSIENT_STATUS,
            decision.explanation,
            True,
            decision.classification,
            fallback=False,
        )
        assert decision.classification.http_status == 429
        assert decision.classification.category == pb.ERROR_CATEGORY_RATE_LIMIT
        assert client.classify(pb.ClassifyRequest(http_status=401)).http_status == 401
        assert client.fallback_count == 0


def test_async_client_asks_the_daemon(daemon: Daemon) -> None:
    async def main() -> Decision:
        async with AsyncSquawkClient(daemon.target, call_timeout=timedelta(seconds=5)) as c:
            return await c.decide_retry(pb.DecideRetryRequest(attempt=1, http_status=400))

    decision = asyncio.run(main())
    assert (decision.action, decision.reason) == (Action.FAIL, Reason.NO_CORRECTION_AVAILABLE)
    assert not decision.fallback


def test_invalid_input_is_an_error_not_a_fallback(daemon: Daemon) -> None:
    with SquawkClient(daemon.target, call_timeout=timedelta(seconds=5)) as client:
        with pytest.raises(SquawkInputError) as info:
            client.decide_retry(pb.DecideRetryRequest(attempt=0))
        assert info.value.code == "INVALID_ARGUMENT"
        assert info.value.field == "attempt"
        assert client.fallback_count == 0


@pytest.fixture(scope="module")
def unreachable() -> Iterator[SquawkClient]:
    with SquawkClient(f"127.0.0.1:{free_port()}") as client:
        yield client


def test_fallback_refuses_invalid_input(unreachable: SquawkClient) -> None:
    with pytest.raises(SquawkInputError) as info:
        unreachable.decide_retry(pb.DecideRetryRequest(attempt=0))
    assert info.value.field == "attempt"
    assert info.value.details.startswith("attempt: ")


def test_fallback_can_be_disabled() -> None:
    with SquawkClient(f"127.0.0.1:{free_port()}", fallback=False) as client:
        with pytest.raises(SquawkError) as info:
            client.decide_retry(pb.DecideRetryRequest(attempt=1, http_status=503))
        assert info.value.code in {"UNAVAILABLE", "DEADLINE_EXCEEDED"}


def test_trace_context_travels_with_the_call() -> None:
    seen: list[dict[str, str]] = []

    def handler(request: bytes, context: grpc.ServicerContext) -> bytes:
        seen.append({k: str(v) for k, v in context.invocation_metadata()})
        return pb.DecideRetryResponse(
            action=pb.ACTION_FAIL, reason=pb.REASON_CANCELLED
        ).SerializeToString()

    server = grpc.server(futures.ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "squawk.v1.PolicyService",
                {"DecideRetry": grpc.unary_unary_rpc_method_handler(handler)},
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        tracer = TracerProvider().get_tracer("executor")
        with (
            SquawkClient(f"127.0.0.1:{port}", call_timeout=timedelta(seconds=5)) as client,
            tracer.start_as_current_span("step") as span,
        ):
            client.decide_retry(pb.DecideRetryRequest(attempt=1))
            ctx = span.get_span_context()
        version, trace_id, parent_id, _flags = seen[0]["traceparent"].split("-")
        assert (version, trace_id, parent_id) == (
            "00",
            f"{ctx.trace_id:032x}",
            f"{ctx.span_id:016x}",
        )
    finally:
        server.stop(None)


def test_runner_retries_then_succeeds(fast_daemon: Daemon) -> None:
    calls: list[str] = []

    def step(city: str) -> str:
        calls.append(city)
        if len(calls) < 3:
            raise StepError("upstream status 503", http_status=503)
        return f"hotels in {city}"

    with SquawkClient(fast_daemon.target, call_timeout=timedelta(seconds=5)) as client:
        assert run_step_sync(client, step, "PAR") == "hotels in PAR"
    assert calls == ["PAR", "PAR", "PAR"]


def test_runner_corrects_without_spending_attempts(fast_daemon: Daemon) -> None:
    calls: list[str] = []

    def step(city: str) -> str:
        calls.append(city)
        if city != "PAR":
            raise StepError("error 400: INVALID CITY CODE", http_status=400)
        return "ok"

    def correct(city: str, exc: BaseException, decision: Decision) -> str:
        assert decision.action is Action.CORRECT
        return "PAR" if city == "Pariss" else "Pariss"

    with SquawkClient(fast_daemon.target, call_timeout=timedelta(seconds=5)) as client:
        options = StepOptions(max_attempts=1)
        assert run_step_sync(client, step, "PARIS", correct=correct, options=options) == "ok"
    assert calls == ["PARIS", "Pariss", "PAR"]


def test_runner_fail_raises_with_the_decision(fast_daemon: Daemon) -> None:
    def step(_: None) -> None:
        raise StepError("error 401: expired key", http_status=401)

    with (
        SquawkClient(fast_daemon.target, call_timeout=timedelta(seconds=5)) as client,
        pytest.raises(StepFailed) as info,
    ):
        run_step_sync(client, step, None)
    assert info.value.decision.reason is Reason.TERMINAL_STATUS
    assert isinstance(info.value.__cause__, StepError)


def test_runner_stops_after_max_attempts(fast_daemon: Daemon) -> None:
    calls = 0

    async def step(_: None) -> None:
        nonlocal calls
        calls += 1
        raise ConnectionError("connection reset")

    async def main() -> None:
        async with AsyncSquawkClient(fast_daemon.target, call_timeout=timedelta(seconds=5)) as c:
            await run_step(c, step, None, options=StepOptions(max_attempts=4))

    with pytest.raises(StepFailed) as info:
        asyncio.run(main())
    assert info.value.decision.reason is Reason.ATTEMPTS_EXHAUSTED
    assert calls == 4


def test_async_cancel_aborts_the_wait_at_once(daemon: Daemon) -> None:
    async def step(_: None) -> None:
        raise StepError("slow down", http_status=429, headers={"Retry-After": "30"})

    async def main() -> float:
        async with AsyncSquawkClient(daemon.target, call_timeout=timedelta(seconds=5)) as c:
            task = asyncio.create_task(run_step(c, step, None))
            await asyncio.sleep(0.3)
            started = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return time.monotonic() - started

    assert asyncio.run(main()) < 5  # far below the 30 s wait


@contextlib.contextmanager
def _serving(answer: Callable[[bytes, grpc.ServicerContext], bytes]) -> Iterator[str]:
    """A loopback server answering every call, whatever its method, with `answer`."""

    class Every(grpc.GenericRpcHandler):
        def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[bytes, bytes]:
            return grpc.unary_unary_rpc_method_handler(answer)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((Every(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def _cancelled(request: bytes, context: grpc.ServicerContext) -> bytes:
    context.abort(grpc.StatusCode.CANCELLED, "the daemon gave up on the call")


def test_cancelling_a_call_in_flight_cancels_and_never_falls_back() -> None:
    """A CANCELLED the daemon answers takes the fallback (tests/vectors/runner.json);
    the executor's own cancellation of the call must still cancel."""
    started, release = threading.Event(), threading.Event()

    def hang(request: bytes, context: grpc.ServicerContext) -> bytes:
        started.set()
        release.wait(30)
        return b""

    async def main(target: str) -> int:
        async with AsyncSquawkClient(target, call_timeout=timedelta(minutes=1)) as c:
            task = asyncio.create_task(c.decide_retry(pb.DecideRetryRequest(attempt=1)))
            assert await asyncio.to_thread(started.wait, 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return c.fallback_count

    with _serving(hang) as target:
        try:
            assert asyncio.run(main(target)) == 0
        finally:
            release.set()


def test_sync_cancel_aborts_the_wait_and_is_never_retried(daemon: Daemon) -> None:
    cancel = threading.Event()
    calls = 0

    def step(_: None) -> None:
        nonlocal calls
        calls += 1
        raise StepError("slow down", http_status=429, headers={"Retry-After": "30"})

    threading.Timer(0.3, cancel.set).start()
    with (
        SquawkClient(daemon.target, call_timeout=timedelta(seconds=5)) as client,
        pytest.raises(StepCancelled),
    ):
        run_step_sync(client, step, None, cancel=cancel)
    assert calls == 1


class RecordingClient(SquawkClient):
    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.decisions: list[Decision] = []

    def decide_retry(self, request: pb.DecideRetryRequest) -> Decision:
        decision = super().decide_retry(request)
        self.decisions.append(decision)
        return decision


def test_runner_survives_a_daemon_restart(fast_env: None) -> None:
    target = f"127.0.0.1:{free_port()}"
    daemons = [start_daemon(env=FAST, listen=target)]
    calls = 0

    def step(_: None) -> str:
        nonlocal calls
        calls += 1
        if calls == 3:
            daemons[0].stop(9)  # killed mid-run
        if calls == 6:
            daemons.append(start_daemon(env=FAST, listen=target))
            wait_serving(target)
        if calls >= 6:
            time.sleep(0.3)  # give the channel time to reconnect
        if calls < 12:
            raise StepError("upstream status 503", http_status=503)
        return "done"

    client = RecordingClient(target)
    try:
        assert run_step_sync(client, step, None, options=StepOptions(max_attempts=20)) == "done"
    finally:
        client.close()
        daemons[-1].stop()
    sources = [d.fallback for d in client.decisions]
    assert sources[:2] == [False, False]
    assert sources[2:5] == [True, True, True]
    assert sources[-3:] == [False, False, False]
    assert all(d.action is Action.RETRY for d in client.decisions)


def test_the_public_names_are_pinned() -> None:
    import squawk_client

    assert sorted(squawk_client.__all__) == sorted(
        [
            "DEFAULT_ANALYZE_TIMEOUT",
            "DEFAULT_BATCH_TIMEOUT",
            "DEFAULT_CALL_TIMEOUT",
            "Action",
            "Admission",
            "AnalyzeErrorRequest",
            "AnalyzeErrorResponse",
            "AsyncSquawkClient",
            "BatchResult",
            "BreakerState",
            "Category",
            "CheckDispatchRequest",
            "CheckDispatchResponse",
            "ClassifyRequest",
            "ClassifyResponse",
            "Criticality",
            "DecideRetryRequest",
            "DecideRetryResponse",
            "Decision",
            "ErrorInfo",
            "Event",
            "ExplainDecisionRequest",
            "ExplainDecisionResponse",
            "FleetState",
            "GetEventsRequest",
            "GetEventsResponse",
            "GetUpstreamsRequest",
            "GetUpstreamsResponse",
            "Outcome",
            "Reason",
            "SquawkClient",
            "SquawkError",
            "SquawkInputError",
            "StepCancelled",
            "StepError",
            "StepFailed",
            "StepOptions",
            "Tier",
            "UpstreamState",
            "criticality",
            "criticality_from_headers",
            "run_step",
            "run_step_sync",
        ]
    )
    assert all(hasattr(squawk_client, name) for name in squawk_client.__all__)


def test_get_events_pages_the_history_in_both_clients(daemon: Daemon) -> None:
    throttled = pb.Outcome(upstream="py-events", http_status=429, headers={"retry-after": "30"})
    with SquawkClient(daemon.target) as client:
        assert client.report_outcome([throttled]) == 1
        (event,) = client.get_events(upstream="py-events").events
        assert event.kind == pb.EVENT_KIND_COOL_DOWN
        assert (event.after, event.cause) == (
            "cooling for 30 s",
            "HTTP 429 (throttled), Retry-After 30 s",
        )
        first = client.get_events(page_size=1)
        rest = client.get_events(first.next_after, page_size=500)
        assert [e.number for e in (*first.events, *rest.events)] == list(
            range(first.events[0].number, rest.next_after + 1)
        )
        with pytest.raises(SquawkInputError, match=r"^INVALID_ARGUMENT: after: must be from 0"):
            client.get_events(-1)

    async def asked() -> pb.GetEventsResponse:
        async with AsyncSquawkClient(daemon.target) as client:
            return await client.get_events(upstream="py-events")

    assert [e.after for e in asyncio.run(asked()).events] == ["cooling for 30 s"]


EXPLAIN_POLICY = """\
profiles:
  default:
    upstreams:
      py-explain:
        circuit_breaker: {minimum_calls: 4, failure_ratio: 0.5, window: 60s, open_for: 60s}
"""


def test_a_refused_step_names_the_decision_the_daemon_explains(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(EXPLAIN_POLICY)
    daemon = start_daemon("--policy", str(policy))
    try:
        with SquawkClient(daemon.target, call_timeout=timedelta(seconds=5)) as client:
            failed = [pb.Outcome(upstream="py-explain", http_status=503) for _ in range(4)]
            assert client.report_outcome(failed) == 4
            called: list[dict[str, str]] = []
            with pytest.raises(StepFailed) as refused:
                run_step_sync(
                    client,
                    called.append,
                    {},
                    options=StepOptions(
                        upstream="py-explain", capability="search", deadline=timedelta(seconds=5)
                    ),
                )
            assert called == []  # refused before the call
            decision = refused.value.decision
            assert decision.reason is Reason.CIRCUIT_OPEN and decision.decision_id
            why = client.explain_decision(decision.decision_id)
            assert (why.rpc, why.upstream, why.breaker_state) == (
                "Admit",
                "py-explain",
                pb.BREAKER_STATE_OPEN,
            )
            assert [(e.before, e.after) for e in why.events] == [("CLOSED", "OPEN")]
            # DecideRetry's FAIL on the open upstream names its own.
            answer = client.decide_retry(
                pb.DecideRetryRequest(attempt=1, http_status=503, upstream="py-explain")
            )
            assert answer.action is Action.FAIL and answer.decision_id
            assert answer.decision_id != decision.decision_id
            with pytest.raises(SquawkError, match=r"^NOT_FOUND: decision_id: '000000-1'"):
                client.explain_decision("000000-1")
            # A decision the daemon kept nothing for carries no id.
            fine = client.decide_retry(pb.DecideRetryRequest(attempt=1, http_status=503))
            assert fine.action is Action.RETRY and fine.decision_id == ""
    finally:
        daemon.stop()


@pytest.mark.parametrize(
    ("sent", "kept"),
    [("3fa2c1-17", "3fa2c1-17"), ("x" * 64, "x" * 64), ("x" * 65, ""), ("a\nb", ""), ("é", "")],
)
def test_a_decision_id_from_the_wire_is_kept_only_in_its_shape(sent: str, kept: str) -> None:
    from squawk_client._admission import admission
    from squawk_client._decision import from_message

    answer = pb.DecideRetryResponse(
        action=pb.ACTION_FAIL, reason=pb.REASON_CIRCUIT_OPEN, decision_id=sent
    )
    assert from_message(answer).decision_id == kept
    assert admission(pb.AdmitResponse(allowed=False, decision_id=sent)).decision_id == kept
    assert admission(pb.AdmitResponse(allowed=True, decision_id=sent)).decision_id == ""


BATCH = [
    pb.DecideRetryRequest(attempt=1, http_status=503),
    pb.DecideRetryRequest(attempt=0, http_status=503),
    pb.DecideRetryRequest(attempt=3, http_status=503),
]


@pytest.mark.parametrize("mode", ["daemon", "fallback", "cancelled"])
def test_a_batch_answers_item_by_item(daemon: Daemon, mode: str) -> None:
    with contextlib.ExitStack() as stack:
        if mode == "daemon":
            target = daemon.target
        elif mode == "fallback":
            target = f"127.0.0.1:{free_port()}"
        else:  # a daemon that answers CANCELLED did not decide
            target = stack.enter_context(_serving(_cancelled))
        client = stack.enter_context(SquawkClient(target, call_timeout=timedelta(seconds=5)))
        first, second, third = client.decide_retry_batch(BATCH, timeout=timedelta(seconds=5))
    assert isinstance(first, Decision) and isinstance(third, Decision)
    assert (first.action, first.delay, first.fallback) == (
        Action.RETRY,
        timedelta(milliseconds=542),
        mode != "daemon",
    )
    assert (third.action, third.reason) == (Action.FAIL, Reason.ATTEMPTS_EXHAUSTED)
    assert isinstance(second, SquawkInputError)
    assert second.field == "requests[1].attempt"


def test_analysis_and_the_dispatch_check_go_through_the_client(daemon: Daemon) -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["PAR", "LON"]}},
    }

    async def main() -> tuple[pb.AnalyzeErrorResponse, pb.CheckDispatchResponse]:
        async with AsyncSquawkClient(daemon.target, call_timeout=timedelta(seconds=5)) as c:
            analysis = pb.AnalyzeErrorRequest(http_status=400, error_response="invalid city")
            analysis.original_request.update({"city": "paris"})
            analysis.parameter_schema.update(schema)
            check = pb.CheckDispatchRequest()
            check.parameters.update({"city": "Rome"})
            check.parameter_schema.update(schema)
            return await c.analyze_error(analysis), await c.check_dispatch(check)

    analysis, check = asyncio.run(main())
    assert analysis.should_retry
    assert dict(analysis.suggested_changes) == {"city": "PAR"}
    assert not check.ok
    assert [v.parameter for v in check.violations] == ["city"]


def test_a_refused_analysis_names_the_field(daemon: Daemon) -> None:
    with SquawkClient(daemon.target) as client, pytest.raises(SquawkInputError) as info:
        client.analyze_error(pb.AnalyzeErrorRequest(validation_retries_used=-1))
    assert info.value.field == "validation_retries_used"
