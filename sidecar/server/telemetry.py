"""Tracing set-up from the standard OTEL_* variables.

No exporter unless one is configured: with neither OTEL_TRACES_EXPORTER nor an
OTLP endpoint set (or with OTEL_SDK_DISABLED=true) there is no tracer
provider at all and the daemon pays nothing for tracing. The provider is
returned, never installed globally: library code does not own the process.

A collector that is down or slow must not slow decisions, so spans go
through the SDK's BatchSpanProcessor (a bounded queue exported on its own
thread, sized by OTEL_BSP_*); spans that do not fit are dropped and counted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

__all__ = ["CountingBatchSpanProcessor", "tracer_provider_from_env"]

log = logging.getLogger(__name__)


class CountingBatchSpanProcessor(BatchSpanProcessor):
    """BatchSpanProcessor that counts the spans its full queue drops.

    The SDK drops silently (its queue is a bounded deque); the count is what
    an operator needs to see that a collector cannot keep up. Reading the
    queue is the one reach into SDK internals, and degrades to "no count" if
    they change.
    """

    def __init__(self, exporter: SpanExporter) -> None:
        super().__init__(exporter)
        self.dropped = 0
        inner = getattr(self, "_batch_processor", None)
        self._queue = getattr(inner, "_queue", None)

    def on_end(self, span: ReadableSpan) -> None:
        queue = self._queue
        if queue is not None and queue.maxlen is not None and len(queue) >= queue.maxlen:
            self.dropped += 1
        super().on_end(span)


def _exporter(environ: Mapping[str, str]) -> SpanExporter:
    protocol = environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    )
    if protocol.startswith("http"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HTTPExporter,
        )

        return HTTPExporter()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GRPCExporter,
    )

    return GRPCExporter()


def tracer_provider_from_env(
    environ: Mapping[str, str],
) -> tuple[TracerProvider, CountingBatchSpanProcessor] | None:
    """A provider exporting over OTLP as the OTEL_* variables say, or None."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporter_name = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if exporter_name == "none" or (not exporter_name and not endpoint):
        return None
    if exporter_name not in ("", "otlp"):
        log.warning("OTEL_TRACES_EXPORTER=%s is not supported; using otlp", exporter_name)
    # Resource.create() reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES;
    # the provider reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG.
    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": "squawk"} if "OTEL_SERVICE_NAME" not in environ else {}
        )
    )
    processor = CountingBatchSpanProcessor(_exporter(environ))
    provider.add_span_processor(processor)
    return provider, processor
