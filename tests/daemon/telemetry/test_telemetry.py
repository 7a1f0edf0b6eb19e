"""Spans, metrics and decision logs, as an operator reads them."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Sampler, SamplingResult
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags

from conftest import Daemon, free_port, scrape, start_daemon
from squawk.daemon.config import Config, load_policy
from squawk.daemon.server.lifecycle.app import Daemon as InProcessDaemon
from squawk.daemon.server.rpc.servicer import PolicyServicer
from squawk.daemon.server.telemetry.loop_lag import watch_loop_lag
from squawk.daemon.server.telemetry.metrics import Metrics
from squawk.daemon.server.telemetry.observer import _SERIES_CACHE as SERIES_CACHE
from squawk.daemon.server.telemetry.observer import Observer
from squawk.daemon.server.telemetry.spans import NO_SPAN, SERVICE, CallSpan, ServerSpans
from squawk.daemon.settings import ServeSettings
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

CANARY = "sk-canary0123456789abcdef"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = (
    ("traceparent", f"00-{TRACE_ID}-{PARENT_ID}-01"),
    # A vendor's trace state is the caller's string too.
    ("tracestate", f"vendor={CANARY}"),
)

# The attribute names this project commits to (docs/observability.md,
# "Tracing"): the RPC
# conventions as opentelemetry-instrumentation-grpc emits them today (the
# daemon makes its spans itself, to the same names).
RPC_ATTRIBUTES = {"rpc.system", "rpc.service", "rpc.method", "rpc.grpc.status_code"}


def secret_calls() -> list[tuple[str, object]]:
    body = json.dumps({"success": False, "error": {"message": CANARY, "retryable": True}})
    return [
        (
            "DecideRetry",
            pb.DecideRetryRequest(
                attempt=1,
                http_status=503,
                response_body=body.encode(),
                headers={"Authorization": f"Bearer {CANARY}", "Retry-After": "1"},
                capability="search_hotels",
                upstream="amadeus",
            ),
        ),
        ("Classify", pb.ClassifyRequest(error_message=f"error 401: api_key={CANARY}")),
        ("DecideRetry", pb.DecideRetryRequest(attempt=1, profile=CANARY)),  # refused
        ("Classify", pb.ClassifyRequest(profile=f"x api_key={CANARY}")),  # refused
    ]


def run_in_process(
    log: io.StringIO | None = None,
    calls: Sequence[tuple[str, object]] | None = None,
    change: Callable[[PolicyServicer], None] | None = None,
    timeout: float = 5,
    policy: str | None = None,
) -> Sequence[ReadableSpan]:
    """Spans of `calls` (secret_calls() by default) answered by an in-process
    daemon of the policy file `policy` (None: the built-in policy), its
    servicer first given `change` (a bug, a stall)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    target = f"127.0.0.1:{free_port()}"

    async def main() -> None:
        daemon = InProcessDaemon(
            ServeSettings(Config(load_policy(policy, environ={})), (target,)),
            tracing=(provider, None),
            decision_log=log,
        )
        if change is not None:
            change(daemon.servicer)
        await daemon.start()
        try:
            # The user agent is the caller's string too.
            agent = [("grpc.primary_user_agent", f"executor/1.0 api_key={CANARY}")]
            async with grpc.aio.insecure_channel(target, options=agent) as channel:
                stub = pb_grpc.PolicyServiceStub(channel)
                for method, request in secret_calls() if calls is None else calls:
                    # Bytes go out as they are, to a method of PolicyService
                    # or to the full path of another service's ("/pkg.Svc/M").
                    path = method if method.startswith("/") else f"/{SERVICE}/{method}"
                    call = (
                        channel.unary_unary(path)
                        if isinstance(request, bytes)
                        else getattr(stub, method)
                    )
                    try:
                        await call(request, metadata=TRACEPARENT, timeout=timeout)
                    except grpc.aio.AioRpcError as exc:
                        assert exc.code() in (S.INVALID_ARGUMENT, S.INTERNAL, S.DEADLINE_EXCEEDED)
                        assert CANARY not in (exc.details() or "")
        finally:
            await daemon.stop()

    asyncio.run(main())
    return exporter.get_finished_spans()


class _BrokenPolicy:
    def profile(self, name: str) -> None:
        raise RuntimeError(f"a bug, with a caller's {CANARY}")


def _broken(servicer: PolicyServicer) -> None:
    servicer._policy = _BrokenPolicy()  # type: ignore[assignment]


def _stalled(servicer: PolicyServicer) -> None:
    async def decide(*args: object) -> None:
        await asyncio.Event().wait()  # until the call is cancelled

    servicer._decide = decide  # type: ignore[method-assign,assignment]


S = grpc.StatusCode


def test_server_span_is_the_callers_child_and_carries_the_decision() -> None:
    spans = run_in_process()
    decide = next(s for s in spans if s.attributes and s.attributes.get("squawk.action"))
    assert decide.kind is SpanKind.SERVER
    assert decide.name == "/squawk.v1.PolicyService/DecideRetry"
    assert decide.context is not None and decide.parent is not None
    assert f"{decide.context.trace_id:032x}" == TRACE_ID
    assert f"{decide.parent.span_id:016x}" == PARENT_ID
    attrs = dict(decide.attributes or {})
    assert attrs.keys() >= RPC_ATTRIBUTES
    assert attrs["rpc.system"] == "grpc"
    assert attrs["rpc.service"] == "squawk.v1.PolicyService"
    assert attrs["rpc.method"] == "DecideRetry"
    assert attrs["rpc.grpc.status_code"] == 0
    assert attrs["net.peer.ip"] == "127.0.0.1"
    assert str(attrs["rpc.user_agent"]).startswith("executor/1.0 api_key=")
    assert {k: v for k, v in attrs.items() if k.startswith("squawk.")} == {
        "squawk.profile": "default",
        "squawk.capability": "search_hotels",
        "squawk.upstream": "amadeus",
        "squawk.attempt": 1,
        "squawk.http_status": 503,
        "squawk.category": "SERVICE_ERROR",
        "squawk.retryable": True,
        "squawk.declared_retryable": "true",
        "squawk.action": "RETRY",
        "squawk.reason": "TRANSIENT_STATUS",
        "squawk.delay_ms": 1000,
    }


PERSON = "jane.doe@example.com"
HUGE = "x" * 9_000
REFUSED: list[tuple[str, object, str]] = [
    ("DecideRetry", pb.DecideRetryRequest(attempt=0), "attempt"),
    ("DecideRetry", pb.DecideRetryRequest(attempt=1, profile=CANARY), "profile"),
    (
        "DecideRetry",
        pb.DecideRetryRequest(attempt=1, headers={f"X-Session-For-{PERSON}": HUGE}),
        "headers",
    ),
    (
        "ReportOutcome",
        pb.ReportOutcomeRequest(
            outcomes=[pb.Outcome(upstream="amadeus", success=True)] * 2
            + [pb.Outcome(upstream="amadeus", headers={f"X-Session-For-{PERSON}": HUGE})]
        ),
        "outcomes[2].headers",
    ),
    ("Classify", b"\xff\xff", "request"),
]


def _nan_keyed_by_a_person() -> pb.AnalyzeErrorRequest:
    request = pb.AnalyzeErrorRequest(http_status=400, error_response="error 400")
    request.original_request.update({f"patient {PERSON}": float("nan")})
    return request


REFUSED.append(("AnalyzeError", _nan_keyed_by_a_person(), "original_request"))


def test_a_refused_calls_span_names_the_field_and_nothing_the_caller_wrote() -> None:
    spans = run_in_process(calls=[(method, request) for method, request, _ in REFUSED])
    assert [s.name.rsplit("/", 1)[-1] for s in spans] == [method for method, _, _ in REFUSED]
    for span, (_, _, field) in zip(spans, REFUSED, strict=True):
        assert (span.attributes or {})["rpc.grpc.status_code"] == 3, field
        # The code and the schema's name of the field: not the caller's
        # value, key or header name, though the caller is told them.
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == f"INVALID_ARGUMENT: {field}"
        # An expected refusal is not an exception: no events, no traceback.
        assert not span.events


def test_a_call_the_daemon_failed_is_an_error_span_without_the_exception() -> None:
    (span,) = run_in_process(calls=[("Classify", pb.ClassifyRequest())], change=_broken)
    assert (span.attributes or {})["rpc.grpc.status_code"] == 13
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "INTERNAL: internal error; see the daemon's log"
    assert not span.events
    assert CANARY not in span.to_json()


def test_a_call_the_caller_gave_up_on_is_not_an_error() -> None:
    batch = pb.DecideRetryBatchRequest(requests=[pb.DecideRetryRequest(attempt=1)])
    calls = [("DecideRetryBatch", batch)]
    (span,) = run_in_process(calls=calls, change=_stalled, timeout=0.2)
    assert (span.attributes or {})["rpc.grpc.status_code"] == 1
    assert span.status.status_code is StatusCode.UNSET


def test_no_secret_reaches_a_span_or_the_decision_log() -> None:
    log = io.StringIO()
    spans = run_in_process(log)
    assert len(spans) == 4
    for span in spans:
        dumped = span.to_json()
        assert CANARY not in dumped, dumped
        assert "canary" not in dumped
    assert log.getvalue().count("\n") == 2  # one line per decision that was made
    assert CANARY not in log.getvalue()


class _BrokenProcessor(SpanProcessor):
    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("processor broke")


class _BrokenSampler(Sampler):
    def should_sample(self, *args: object, **kwargs: object) -> SamplingResult:
        raise RuntimeError("sampler broke")

    def get_description(self) -> str:
        return "broken"


@pytest.mark.parametrize(
    "provider",
    [
        pytest.param(TracerProvider(sampler=_BrokenSampler()), id="sampler"),
        pytest.param(TracerProvider(), id="processor"),
    ],
)
def test_a_failing_tracer_costs_the_span_not_the_call(provider: TracerProvider) -> None:
    # Tracing is the operator's aid: a broken sampler or span processor must
    # not turn decisions into errors (nor hand its exception to the caller).
    provider.add_span_processor(_BrokenProcessor())
    target = f"127.0.0.1:{free_port()}"

    async def main() -> list[pb.DecideRetryResponse]:
        daemon = InProcessDaemon(
            ServeSettings(Config(load_policy(None, environ={})), (target,)),
            tracing=(provider, None),
        )
        await daemon.start()
        try:
            async with grpc.aio.insecure_channel(target) as channel:
                stub = pb_grpc.PolicyServiceStub(channel)
                request = pb.DecideRetryRequest(attempt=1, http_status=503)
                return [
                    await stub.DecideRetry(request, metadata=TRACEPARENT, timeout=5)
                    for _ in range(3)
                ]
        finally:
            await daemon.stop()

    for reply in asyncio.run(main()):
        assert reply.action == pb.ACTION_RETRY


def test_health_checks_are_not_traced() -> None:
    # Probes every few seconds would drown the calls' traces. The checks
    # carry a sampled parent, so a traced health service would show here.
    check = "/grpc.health.v1.Health/Check"
    calls: list[tuple[str, object]] = [
        (check, health_pb2.HealthCheckRequest().SerializeToString()),
        (check, health_pb2.HealthCheckRequest(service=SERVICE).SerializeToString()),
        ("DecideRetry", pb.DecideRetryRequest(attempt=1, http_status=503)),
        (check, health_pb2.HealthCheckRequest().SerializeToString()),
    ]
    spans = run_in_process(calls=calls)
    assert [s.name for s in spans] == [f"/{SERVICE}/DecideRetry"]


def test_metrics_and_decision_log(tmp_path: Path) -> None:
    port = free_port()
    log_path = tmp_path / "decisions.jsonl"
    daemon = start_daemon("--metrics-listen", f"127.0.0.1:{port}", "--decision-log", str(log_path))
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            for status in (503, 503, 401):
                stub.DecideRetry(pb.DecideRetryRequest(attempt=1, http_status=status), timeout=5)
            stub.DecideRetry(
                pb.DecideRetryRequest(attempt=1, http_status=400, correction_available=True),
                timeout=5,
            )
            analysis = pb.AnalyzeErrorRequest(http_status=400, error_response="bad unit")
            analysis.original_request.update({"units": "Metric"})
            analysis.parameter_schema.update(
                {"properties": {"units": {"type": "string", "enum": ["metric", "imperial"]}}}
            )
            assert stub.AnalyzeError(analysis, timeout=5).suggested_changes["units"] == "metric"
        samples = scrape(port)
    finally:
        daemon.stop()
    decisions = 'squawk_decisions_total{action="%s",reason="%s",rpc="DecideRetry"}'
    assert samples[decisions % ("RETRY", "TRANSIENT_STATUS")] == 2
    assert samples[decisions % ("FAIL", "TERMINAL_STATUS")] == 1
    assert samples[decisions % ("CORRECT", "CORRECTION_ELIGIBLE")] == 1
    assert samples['squawk_corrections_total{outcome="requested"}'] == 1
    assert samples['squawk_corrections_total{outcome="suggested"}'] == 1
    assert samples['squawk_analyzer_duration_seconds_count{source="HEURISTIC"}'] == 1
    assert samples['squawk_decision_duration_seconds_count{rpc="DecideRetry"}'] == 4
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert lines.pop()["squawk.analyzer.source"] == "HEURISTIC"
    assert [(x["squawk.action"], x["squawk.reason"]) for x in lines] == [
        ("RETRY", "TRANSIENT_STATUS"),
        ("RETRY", "TRANSIENT_STATUS"),
        ("FAIL", "TERMINAL_STATUS"),
        ("CORRECT", "CORRECTION_ELIGIBLE"),
    ]
    assert lines[0]["squawk.delay_ms"] == 542
    # The loop-lag watch runs from the start (40 wake-ups a second).
    assert samples["squawk_event_loop_lag_seconds_count"] >= 1


def test_loop_lag_sees_a_held_loop() -> None:
    seen: list[float] = []

    async def hold_the_loop() -> None:
        watch = asyncio.create_task(watch_loop_lag(seen.append, period_s=0.01))
        await asyncio.sleep(0.05)
        time.sleep(0.2)  # what a stalled loop looks like to every waiting call
        await asyncio.sleep(0.05)
        watch.cancel()

    asyncio.run(hold_the_loop())
    assert max(seen) >= 0.15
    assert sorted(seen)[len(seen) // 2] < 0.05  # the rest were on time


def test_a_dead_collector_does_not_slow_or_fail_decisions() -> None:
    metrics_port = free_port()
    daemon = start_daemon(
        "--metrics-listen",
        f"127.0.0.1:{metrics_port}",
        env={
            # Nothing listens there: every export fails.
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
            "OTEL_TRACES_SAMPLER": "always_on",
            "OTEL_BSP_MAX_QUEUE_SIZE": "512",
        },
    )
    try:
        failures = asyncio.run(burst(daemon, 10_000))
        samples = scrape(metrics_port)
    finally:
        daemon.stop(9)
    assert failures == 0
    decisions = 'squawk_decisions_total{action="RETRY",reason="TRANSIENT_STATUS",rpc="DecideRetry"}'
    assert samples[decisions] == 10_000
    assert samples["squawk_spans_dropped_total"] > 0


async def burst(daemon: Daemon, count: int) -> int:
    failures = 0
    async with grpc.aio.insecure_channel(daemon.target) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)
        request = pb.DecideRetryRequest(attempt=1, http_status=503)

        async def worker(n: int) -> None:
            nonlocal failures
            for _ in range(n):
                try:
                    await stub.DecideRetry(request, timeout=10)
                except grpc.aio.AioRpcError:
                    failures += 1

        await asyncio.gather(*(worker(count // 50) for _ in range(50)))
    return failures


def test_log_lines_are_redacted() -> None:
    from squawk.daemon.cli import RedactingFormatter

    formatter = RedactingFormatter("%(message)s")
    try:
        raise ValueError(f"upstream said api_key={CANARY}")
    except ValueError:
        import logging
        import sys

        record = logging.LogRecord(
            "t", logging.ERROR, __file__, 1, "calling %s", (f"Bearer {CANARY}",), sys.exc_info()
        )
    line = formatter.format(record)
    assert CANARY not in line
    assert "ValueError" in line


def test_a_breaker_transition_is_an_event_on_the_call_that_caused_it() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    target = f"127.0.0.1:{free_port()}"
    failed = pb.DecideRetryRequest(attempt=1, http_status=503, upstream="flaky")

    async def main() -> None:
        daemon = InProcessDaemon(
            ServeSettings(Config(load_policy(None, environ={})), (target,)),
            tracing=(provider, None),
        )
        await daemon.start()
        try:
            async with grpc.aio.insecure_channel(target) as channel:
                stub = pb_grpc.PolicyServiceStub(channel)
                # The built-in breaker opens once 10 calls are in its window
                # and at least half failed.
                for _ in range(10):
                    await stub.DecideRetry(failed, timeout=5)
        finally:
            await daemon.stop()

    asyncio.run(main())
    spans = exporter.get_finished_spans()
    assert len(spans) == 10
    with_events = [s for s in spans if s.events]
    assert with_events == [spans[-1]]
    (event,) = spans[-1].events
    assert event.name == "squawk.breaker.transition"
    assert dict(event.attributes or {}) == {
        "squawk.profile": "default",
        "squawk.upstream": "flaky",
        "squawk.breaker.from": "CLOSED",
        "squawk.breaker.to": "OPEN",
    }


def test_a_batch_counts_every_decision_and_logs_each(tmp_path: Path) -> None:
    port = free_port()
    log_path = tmp_path / "decisions.jsonl"
    daemon = start_daemon("--metrics-listen", f"127.0.0.1:{port}", "--decision-log", str(log_path))
    batch = pb.DecideRetryBatchRequest(
        requests=[
            pb.DecideRetryRequest(attempt=1, http_status=503),
            pb.DecideRetryRequest(attempt=2, http_status=503),
            pb.DecideRetryRequest(attempt=1, http_status=401),
            pb.DecideRetryRequest(attempt=1, profile="no-such-profile"),  # refused, alone
        ]
    )
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            reply = pb_grpc.PolicyServiceStub(channel).DecideRetryBatch(batch, timeout=5)
        samples = scrape(port)
    finally:
        daemon.stop()
    assert [r.WhichOneof("result") for r in reply.results] == ["decision"] * 3 + ["error"]
    decisions = 'squawk_decisions_total{action="%s",reason="%s",rpc="DecideRetryBatch"}'
    assert samples[decisions % ("RETRY", "TRANSIENT_STATUS")] == 2
    assert samples[decisions % ("FAIL", "TERMINAL_STATUS")] == 1
    # The duration is the call's.
    assert samples['squawk_decision_duration_seconds_count{rpc="DecideRetryBatch"}'] == 1
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert [(x["rpc"], x["squawk.attempt"], x["squawk.action"]) for x in lines] == [
        ("DecideRetryBatch", 1, "RETRY"),
        ("DecideRetryBatch", 2, "RETRY"),
        ("DecideRetryBatch", 1, "FAIL"),
    ]


class _TickLog(io.StringIO):
    """A decision log that notes, at each line, how often the loop ran a ticker."""

    def __init__(self) -> None:
        super().__init__()
        self.ticks = 0
        self.seen: list[int] = []

    def write(self, text: str) -> int:
        self.seen.append(self.ticks)
        return super().write(text)


def test_a_large_batch_writes_its_log_without_holding_the_loop() -> None:
    # 10,000 decision-log lines in one go held the loop for 120-210 ms:
    # every other call and health check waited that long.
    log = _TickLog()
    target = f"127.0.0.1:{free_port()}"
    batch = pb.DecideRetryBatchRequest(
        requests=[pb.DecideRetryRequest(attempt=1, http_status=503)] * 2_000
    )

    async def tick() -> None:
        while True:
            log.ticks += 1
            await asyncio.sleep(0)

    async def main() -> None:
        daemon = InProcessDaemon(
            ServeSettings(Config(load_policy(None, environ={})), (target,)), decision_log=log
        )
        await daemon.start()
        ticker = asyncio.create_task(tick())
        try:
            async with grpc.aio.insecure_channel(target) as channel:
                reply = await pb_grpc.PolicyServiceStub(channel).DecideRetryBatch(batch, timeout=10)
                assert len(reply.results) == 2_000
        finally:
            ticker.cancel()
            await daemon.stop()

    asyncio.run(main())
    assert len(log.seen) == 2_000
    assert log.seen[-1] > log.seen[0]  # the loop ran other work while the lines were written


class _Call:
    """What ServerSpans reads of a gRPC call: its metadata and its peer."""

    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self._metadata = metadata

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5000"


@pytest.mark.parametrize("metadata", [(), (("user-agent", "executor/1.0"),)])
def test_a_call_without_trace_context_starts_its_own_trace(
    metadata: tuple[tuple[str, str], ...],
) -> None:
    # Whatever span the daemon's own process has current is no caller's parent.
    ambient = SpanContext(0xABC, 0xDEF, is_remote=False, trace_flags=TraceFlags(1))
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(ambient)))
    try:
        span = ServerSpans(TracerProvider()).open("DecideRetry", _Call(metadata))  # type: ignore[arg-type]
    finally:
        otel_context.detach(token)
    assert isinstance(span, CallSpan)
    span.close()
    assert span.parent is None
    assert span.context.trace_id != 0xABC


def test_a_callers_baggage_is_not_read(caplog: pytest.LogCaptureFixture) -> None:
    # 200 members is over the W3C limit: parsing it would log a warning on
    # every call, a flood any caller could start.
    baggage = ("baggage", ",".join(f"k{i}={CANARY}" for i in range(200)))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    target = f"127.0.0.1:{free_port()}"

    async def main() -> None:
        daemon = InProcessDaemon(
            ServeSettings(Config(load_policy(None, environ={})), (target,)),
            tracing=(provider, None),
        )
        await daemon.start()
        try:
            async with grpc.aio.insecure_channel(target) as channel:
                stub = pb_grpc.PolicyServiceStub(channel)
                for _ in range(3):
                    await stub.DecideRetry(
                        pb.DecideRetryRequest(attempt=1, http_status=503),
                        metadata=(*TRACEPARENT, baggage),
                        timeout=5,
                    )
        finally:
            await daemon.stop()

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    spans = exporter.get_finished_spans()
    assert len(spans) == 3
    assert all(f"{s.parent.span_id:016x}" == PARENT_ID for s in spans if s.parent)
    assert all(CANARY not in s.to_json() for s in spans)


def test_metrics_alone_count_each_decision_in_its_series_and_the_kept_series_are_bounded() -> None:
    """Without a span or a log, record() finds each decision's series once and
    counts it there: the same samples as a label lookup per call."""
    metrics = Metrics()
    observer = Observer(metrics)
    admitted = {"squawk.action": "ADMIT", "squawk.reason": "ADMITTED", "squawk.upstream": "u"}
    for _ in range(3):
        observer.record("Admit", admitted, time.perf_counter(), NO_SPAN)
    observer.record("Admit", admitted | {"squawk.state": "fleet"}, time.perf_counter(), NO_SPAN)
    observer.record(
        "DecideRetry",
        {"squawk.action": "CORRECT", "squawk.reason": "CORRECTION_ELIGIBLE"},
        time.perf_counter(),
        NO_SPAN,
    )
    value = metrics.registry.get_sample_value
    admit = {"rpc": "Admit", "action": "ADMIT", "reason": "ADMITTED"}
    assert value("squawk_decisions_total", admit) == 4
    assert value("squawk_decision_duration_seconds_count", {"rpc": "Admit"}) == 4
    assert value("squawk_state_answers_total", {"rpc": "Admit", "state": "fleet"}) == 1
    assert value("squawk_corrections_total", {"outcome": "requested"}) == 1
    # Reasons past the bound: the kept series start over, the counts go on.
    for i in range(SERIES_CACHE + 5):
        fields = {"squawk.action": "FAIL", "squawk.reason": f"R{i}"}
        observer.record("DecideRetry", fields, time.perf_counter(), NO_SPAN)
    assert len(observer._counted) <= SERIES_CACHE
    observer.record("Admit", admitted, time.perf_counter(), NO_SPAN)
    assert value("squawk_decisions_total", admit) == 5
    fail = {"rpc": "DecideRetry", "action": "FAIL", "reason": "R7"}
    assert value("squawk_decisions_total", fail) == 1


def test_a_forgotten_name_takes_every_series_labelled_with_it() -> None:
    """Names come and go: each series a name's label kept past the registry's
    drop would outlive it, and the series would grow without bound."""
    metrics = Metrics()
    observer = Observer(metrics)
    for name in ("gone-api", "kept-api"):
        observer.admitted("default", name, pb.AdmitResponse(allowed=True))
        observer.admitted(
            "default", name, pb.AdmitResponse(reason=pb.REASON_UPSTREAM_SATURATED), by_share=True
        )
        observer.near_limit("default", name)

    def labelled(name: str) -> set[str]:
        return {
            family.name
            for family in metrics.registry.collect()
            for sample in family.samples
            if sample.labels.get("upstream") == name
        }

    kinds = {"squawk_pace_wait_seconds", "squawk_admit_levels", "squawk_quota_near_limit"}
    assert kinds | {"squawk_admit_shed", "squawk_admit_share_refused"} <= labelled("gone-api")
    observer.forget("default", "gone-api")
    assert labelled("gone-api") == set()
    assert kinds <= labelled("kept-api")
