"""Two real servers on loopback that record everything the daemon sends them:
an OTLP trace collector and an OpenAI-compatible model.

Both are the daemon's real peers, reached over real sockets by its own
exporter and HTTP client; a test reads what arrived, exactly as sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as otlp_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

__all__ = ["ModelServer", "OtlpReceiver", "span_texts"]


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


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


def _completion(changes: dict[str, Any]) -> bytes:
    content = json.dumps({"changes": changes, "reason": "the error names this value"})
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "recorder",
        "choices": [choice],
    }
    return json.dumps(body).encode()


class ModelServer:
    """POST /v1/chat/completions on a free loopback port: records every
    request and answers each with a proposed change, one for parameter
    correction and one for re-resolution from dependency results (the
    system message says which is asked)."""

    def __init__(self, correct: dict[str, Any], contextual: dict[str, Any]) -> None:
        self.received: list[Received] = []
        replies = {False: _completion(correct), True: _completion(contextual)}
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with server._lock:
                    server.received.append(Received(self.path, dict(self.headers.items()), body))
                try:
                    system = json.loads(body)["messages"][0]["content"]
                except (ValueError, LookupError, TypeError):
                    system = ""
                reply = replies["dependency_results" in system]
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> ModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
