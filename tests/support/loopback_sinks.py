"""An OTLP trace collector on loopback that records every export the daemon
sends it, and the texts a span carries.

The collector is the daemon's real peer, reached over a real socket by its
own exporter; a test reads what arrived, exactly as sent. The model server
beside it in the canary test is chat_server.ChatServer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as otlp_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["OtlpReceiver", "span_texts"]


class OtlpReceiver(otlp_grpc.TraceServiceServicer):
    """opentelemetry.proto.collector.trace.v1.TraceService on a free loopback port."""

    def __init__(self) -> None:
        self.requests: list[otlp.ExportTraceServiceRequest] = []
        self._lock = threading.Lock()
        self._server = grpc.server(ThreadPoolExecutor(max_workers=2))
        otlp_grpc.add_TraceServiceServicer_to_server(self, self._server)  # type: ignore[no-untyped-call]
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    def Export(
        self, request: otlp.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> otlp.ExportTraceServiceResponse:
        with self._lock:
            self.requests.append(request)
        return otlp.ExportTraceServiceResponse()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> OtlpReceiver:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)


def _any_text(value: AnyValue) -> Iterator[str]:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        for item in value.array_value.values:
            yield from _any_text(item)
    elif kind == "kvlist_value":
        yield from _attribute_texts("", value.kvlist_value.values)
    elif kind == "bytes_value":
        yield value.bytes_value.decode(errors="replace")
    elif kind is not None:
        yield str(getattr(value, kind))


def _attribute_texts(where: str, attributes: Any) -> Iterator[str]:
    kv: KeyValue
    for kv in attributes:
        yield f"{where}attribute {kv.key!r}: {kv.key}"
        for text in _any_text(kv.value):
            yield f"{where}attribute {kv.key!r} value: {text}"


def span_texts(request: otlp.ExportTraceServiceRequest) -> Iterator[str]:
    """Every text an exported span carries, each prefixed with where it sits."""
    for resource_spans in request.resource_spans:
        yield from _attribute_texts("resource ", resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                at = f"span {span.name!r} "
                yield f"{at}name: {span.name}"
                yield f"{at}status message: {span.status.message}"
                yield from _attribute_texts(at, span.attributes)
                for event in span.events:
                    yield f"{at}event {event.name!r}: {event.name}"
                    yield from _attribute_texts(f"{at}event {event.name!r} ", event.attributes)
                for link in span.links:
                    yield from _attribute_texts(f"{at}link ", link.attributes)
