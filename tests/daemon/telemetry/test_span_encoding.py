"""The daemon's OTLP span encoding says exactly what the SDK's encoder says."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.span import DEFAULT_TRACE_STATE, TraceState
from opentelemetry.trace.status import Status, StatusCode

from conftest import free_port
from loopback_sinks import OtlpReceiver
from squawk.daemon.config import Config, load_policy
from squawk.daemon.server.lifecycle.app import Daemon
from squawk.daemon.server.telemetry.span_encoding import GrpcSpanExporter, SpanEncoder
from squawk.daemon.server.telemetry.tracing import (
    _exporter,
    shutdown_tracing,
    tracer_provider_from_env,
)
from squawk.daemon.settings import ServeSettings
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

INT64 = (-(2**63), 2**63 - 1)
# Beyond int64 the SDK logs the attribute and leaves it out.
BEYOND_INT64 = (2**63, 2**64, -(2**63) - 1, 2**100)


def assert_same_request(spans: Sequence[ReadableSpan], encoder: SpanEncoder) -> bytes:
    fast = encoder.encode(spans)
    assert otlp.ExportTraceServiceRequest.FromString(fast) == encode_spans(spans)
    return fast


# --- random spans ----------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(*INT64)
    | st.sampled_from(INT64 + BEYOND_INT64)
    | st.floats()  # nan, infinities and -0.0 included
    | st.text(max_size=20)
    | st.binary(max_size=12)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=6) | st.integers(0, 9), inner, max_size=3)
    ),
    max_leaves=8,
)
raw_attributes = st.dictionaries(st.text(max_size=12), values, max_size=6)
# What the SDK's spans hold: cleaned (lists become tuples), and bounded, with
# what did not fit counted as dropped.
bounded_attributes = st.builds(
    lambda items, maxlen: BoundedAttributes(maxlen, items, immutable=True),
    st.dictionaries(st.text(min_size=1, max_size=12), values, max_size=6),
    st.none() | st.integers(0, 4),
)
# Any: the raw ones go beyond the SDK's declared types (lists, int keys).
attributes: st.SearchStrategy[Any] = st.none() | raw_attributes | bounded_attributes

TRACE_STATES = [
    DEFAULT_TRACE_STATE,
    TraceState(),
    TraceState([("congo", "t61rcWkgMzE")]),
    TraceState([("rojo", "00f067aa0ba902b7"), ("vendor@tenant", "x-y")]),
]
contexts = st.builds(
    SpanContext,
    trace_id=st.integers(1, 2**128 - 1),
    span_id=st.integers(1, 2**64 - 1),
    is_remote=st.booleans(),
    trace_flags=st.sampled_from([TraceFlags(0), TraceFlags(1)]),
    trace_state=st.sampled_from(TRACE_STATES),
)
timestamps = st.none() | st.integers(0, 2**64 - 1)
events = st.builds(Event, st.text(max_size=12), attributes, st.integers(0, 2**64 - 1))
links = st.builds(Link, contexts, attributes)
statuses = st.sampled_from([Status(StatusCode.UNSET), Status(StatusCode.OK)]) | st.builds(
    Status, st.just(StatusCode.ERROR), st.none() | st.text(max_size=20)
)

# Equal but distinct objects group together; a resource whose attributes
# compare equal but hash apart (1 and True) does not, as in the SDK.
SCHEMA = "https://opentelemetry.io/schemas/1.11.0"
RESOURCES = [
    Resource({"service.name": "squawk", "n": 1}),
    Resource({"service.name": "squawk", "n": 1}),
    Resource({"service.name": "squawk", "n": True}),
    Resource({"service.name": "pod", "zones": ("a", "b")}, schema_url=SCHEMA),
    Resource({}),
]
SCOPES = [
    None,
    InstrumentationScope("squawk"),
    InstrumentationScope("squawk"),
    InstrumentationScope("opentelemetry.instrumentation.grpc", "0.66b2", SCHEMA),
    InstrumentationScope("grpc", "1", SCHEMA, {"a": 1}),
    InstrumentationScope("grpc", "1", SCHEMA, {"a": 2}),
]


@st.composite
def spans(draw: st.DrawFn) -> ReadableSpan:
    return ReadableSpan(
        name=draw(st.text(max_size=20)),
        context=draw(contexts),
        parent=draw(st.none() | contexts),
        resource=draw(st.sampled_from(RESOURCES)),
        attributes=draw(attributes),
        events=draw(st.lists(events, max_size=3)),
        links=draw(st.lists(links, max_size=2)),
        kind=draw(st.sampled_from(SpanKind)),
        status=draw(statuses),
        start_time=draw(timestamps),
        end_time=draw(timestamps),
        instrumentation_scope=draw(st.sampled_from(SCOPES)),
    )


def beyond_int64(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return not INT64[0] <= value <= INT64[1]
    if isinstance(value, list | tuple):
        return any(map(beyond_int64, value))
    if isinstance(value, dict):
        return any(map(beyond_int64, value.values()))
    return False


def any_beyond_int64(batch: Sequence[ReadableSpan]) -> bool:
    mappings = [s.attributes for s in batch]
    mappings += [e.attributes for s in batch for e in s.events]
    mappings += [link.attributes for s in batch for link in s.links]
    return any(beyond_int64(dict(m or {})) for m in mappings)


@settings(max_examples=300, deadline=None)
@given(st.lists(spans(), max_size=8))
def test_random_batches_encode_as_the_sdk_does(batch: list[ReadableSpan]) -> None:
    encoder = SpanEncoder()
    fast = assert_same_request(batch, encoder)
    # The second time every attribute comes from the cache.
    assert encoder.encode(batch) == fast
    # The fast path handled everything but what the SDK itself refuses.
    assert encoder.fallbacks == 2 * any_beyond_int64(batch)


# --- equal values of different types ---------------------------------------

# Equal in Python (one dict slot), each encoded as its own type.
LOOKALIKES: list[tuple[Any, str]] = [
    (True, "bool_value"),
    (1, "int_value"),
    (1.0, "double_value"),
    (False, "bool_value"),
    (0, "int_value"),
    (0.0, "double_value"),
    (-0.0, "double_value"),
    ("1", "string_value"),
    (b"1", "bytes_value"),
    ((1,), "array_value"),
    ((True,), "array_value"),
]


@pytest.mark.parametrize("first", range(len(LOOKALIKES)))
def test_a_cached_value_never_answers_for_an_equal_one_of_another_type(first: int) -> None:
    encoder = SpanEncoder()
    order = LOOKALIKES[first:] + LOOKALIKES[:first]  # each type gets cached first once
    context, resource = SpanContext(1, 2, False), RESOURCES[0]
    batch = [
        ReadableSpan("s", context=context, resource=resource, attributes={"v": value})
        for value, _ in order
    ]
    fast = assert_same_request(batch, encoder)
    assert encoder.encode(batch) == fast
    sent = otlp.ExportTraceServiceRequest.FromString(fast).resource_spans[0]
    for span, (value, kind) in zip(sent.scope_spans[0].spans, order, strict=True):
        sent_value = span.attributes[0].value
        assert sent_value.WhichOneof("value") == kind, value
        if kind == "double_value":
            assert repr(sent_value.double_value) == repr(value)  # -0.0 stays -0.0


def test_the_cache_stays_bounded_over_many_distinct_values() -> None:
    encoder = SpanEncoder(max_cached=64)
    for batch_start in range(0, 2_000, 100):
        batch = [
            ReadableSpan(
                f"/squawk.v1.PolicyService/M{n}",
                context=SpanContext(n + 1, n + 1, False),
                attributes={"squawk.upstream": f"upstream-{n}", "squawk.attempt": n},
            )
            for n in range(batch_start, batch_start + 100)
        ]
        assert_same_request(batch, encoder)
        assert encoder.cached <= 64
    assert encoder.fallbacks == 0


# --- the daemon's own spans ------------------------------------------------


def daemon_spans() -> Sequence[ReadableSpan]:
    """Spans from a real daemon: decisions, a breaker opening, a batch, a refusal."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "squawk"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    target = f"127.0.0.1:{free_port()}"
    traceparent = (("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),)

    async def main() -> None:
        daemon = Daemon(
            ServeSettings(Config(load_policy(None, environ={})), (target,)),
            tracing=(provider, None),
        )
        await daemon.start()
        try:
            async with grpc.aio.insecure_channel(target) as channel:
                stub = pb_grpc.PolicyServiceStub(channel)
                # Ten failures of one upstream open its breaker (the default profile).
                for attempt in range(1, 11):
                    request = pb.DecideRetryRequest(
                        attempt=attempt % 3 + 1, http_status=503, upstream="amadeus"
                    )
                    await stub.DecideRetry(request, metadata=traceparent, timeout=5)
                await stub.Classify(pb.ClassifyRequest(error_message="error 429"), timeout=5)
                await stub.Admit(pb.AdmitRequest(upstream="amadeus"), timeout=5)
                batch = pb.DecideRetryBatchRequest(
                    requests=[pb.DecideRetryRequest(attempt=1, http_status=400)] * 3
                )
                await stub.DecideRetryBatch(batch, timeout=5)
                with pytest.raises(grpc.aio.AioRpcError):
                    await stub.DecideRetry(pb.DecideRetryRequest(attempt=0), timeout=5)
        finally:
            await daemon.stop()

    asyncio.run(main())
    return exporter.get_finished_spans()


def test_the_daemons_spans_encode_as_the_sdk_does() -> None:
    spans = daemon_spans()
    decisions = [s for s in spans if (s.attributes or {}).get("squawk.action") == "RETRY"]
    assert decisions and all(s.parent is not None and s.parent.is_remote for s in decisions)
    assert {"rpc.system", "rpc.method", "squawk.profile"} <= set(decisions[0].attributes or {})
    events = [e.name for s in spans for e in s.events]
    assert "squawk.breaker.transition" in events
    assert any(s.parent is None for s in spans)

    encoder = SpanEncoder()
    fast = assert_same_request(spans, encoder)
    sent = otlp.ExportTraceServiceRequest.FromString(fast).SerializeToString()
    assert sent == encode_spans(spans).SerializeToString()
    assert encoder.fallbacks == 0  # also fails if the SDK's span internals move


# --- the exporter ----------------------------------------------------------


class RecordingReceiver(OtlpReceiver):
    """The loopback collector, also keeping each export's metadata."""

    def __init__(self) -> None:
        super().__init__()
        self.metadata: list[dict[str, str | bytes]] = []

    def Export(
        self, request: otlp.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> otlp.ExportTraceServiceResponse:
        self.metadata.append(dict(context.invocation_metadata()))
        return super().Export(request, context)


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingReceiver]:
    """A collector, and the standard variables pointing the SDK's exporters at it."""
    sink = RecordingReceiver()
    with sink:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", sink.endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-squawk-pod=pod-7")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "5")
        yield sink


def test_the_exporter_sends_what_it_encodes(receiver: RecordingReceiver) -> None:
    spans = daemon_spans()
    exporter = _exporter({})
    assert isinstance(exporter, GrpcSpanExporter)
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    assert receiver.requests == [encode_spans(spans)]
    assert receiver.metadata[0]["x-squawk-pod"] == "pod-7"
    # The SDK called the encoder: its export still goes through _translate_data.
    assert exporter.encoder.cached > 0
    assert exporter.encoder.fallbacks == 0


def test_the_daemons_provider_exports_and_counts_every_span(receiver: RecordingReceiver) -> None:
    traced = tracer_provider_from_env(os.environ)
    assert traced is not None
    provider, processor = traced
    ended = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(ended))
    tracer = provider.get_tracer("squawk.test")
    for n in range(40):
        with tracer.start_as_current_span("/squawk.v1.PolicyService/DecideRetry") as span:
            span.set_attributes({"squawk.attempt": n % 3 + 1, "squawk.action": "RETRY"})
    shutdown_tracing(provider, processor, timeout_s=10)

    received = [
        span
        for request in receiver.requests
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]
    expected = encode_spans(ended.get_finished_spans()).resource_spans[0].scope_spans[0].spans
    assert received == list(expected)
    assert processor.ended == 40
    assert processor.unexported == 0
