"""Tracing set-up from the standard OTEL_* variables.

No exporter unless one is configured: with neither OTEL_TRACES_EXPORTER nor an
OTLP endpoint set (or with OTEL_SDK_DISABLED=true) there is no tracer
provider at all and the daemon pays nothing for tracing. The provider is
returned, never installed globally: library code does not own the process.

A collector that is down or slow must not slow decisions, so spans go
through the SDK's BatchSpanProcessor (a bounded queue exported on its own
thread, sized by OTEL_BSP_*); spans that do not fit are dropped and counted.
Nor may it slow the exit: `shutdown_tracing` gives the final flush a fixed
time and then reports how many spans never reached the collector.

The export thread holds the interpreter while it encodes a batch, stalling
the event loop, so OTLP/gRPC batches are encoded by span_encoding, some ten
times faster than the SDK's encoder; OTLP/HTTP keeps the SDK's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

__all__ = [
    "EXPORT_BATCH_SIZE",
    "FLUSH_BOUND_S",
    "CountingBatchSpanProcessor",
    "shutdown_tracing",
    "tracer_provider_from_env",
]

log = logging.getLogger(__name__)

# The longest a shutdown waits for queued spans to reach the collector. The
# SDK's own shutdown waits up to 30 s, and each export up to the exporter's
# timeout (OTEL_EXPORTER_OTLP_TIMEOUT, 10 s) with retries inside it: either
# alone outlasts a typical grace period.
FLUSH_BOUND_S = 2.0
# Spans per export unless OTEL_BSP_MAX_EXPORT_BATCH_SIZE says otherwise.
EXPORT_BATCH_SIZE = 128


class _CountingExporter(SpanExporter):
    """Counts the spans the collector accepted, and shuts the exporter once.

    The SDK calls `export` from one thread at a time (its export lock), so the
    count needs no lock of its own.
    """

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self.exported = 0
        self._closed = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
        return result

    def shutdown(self) -> None:
        # Called by us to cut a hung export short, then again by the SDK.
        if not self._closed.is_set():
            self._closed.set()
            self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class CountingBatchSpanProcessor(BatchSpanProcessor):
    """BatchSpanProcessor that counts what it was given, dropped and exported.

    The SDK drops silently (its queue is a bounded deque); the counts are what
    an operator needs to see that a collector cannot keep up, and what the
    shutdown reports as lost. Reading the queue is the one reach into SDK
    internals, and degrades to "no queue-full count" if they change.
    """

    def __init__(self, exporter: SpanExporter, max_export_batch_size: int | None = None) -> None:
        self._counting = _CountingExporter(exporter)
        super().__init__(self._counting, max_export_batch_size=max_export_batch_size)
        # Sampled spans handed to the processor, and those its full queue dropped.
        self.ended = 0
        self.dropped = 0
        inner = getattr(self, "_batch_processor", None)
        self._queue = getattr(inner, "_queue", None)

    def on_end(self, span: ReadableSpan) -> None:
        # The SDK exports sampled spans only; unsampled ones are not "lost".
        if span.context is not None and span.context.trace_flags.sampled:
            self.ended += 1
            queue = self._queue
            if queue is not None and queue.maxlen is not None and len(queue) >= queue.maxlen:
                self.dropped += 1
        super().on_end(span)

    @property
    def unexported(self) -> int:
        """Sampled spans the collector has not accepted (dropped, failed or unsent)."""
        return self.ended - self._counting.exported

    def abandon(self) -> None:
        """Shut the exporter: an export hung on the collector ends now."""
        self._counting.shutdown()


def shutdown_tracing(
    provider: TracerProvider, processor: CountingBatchSpanProcessor | None, timeout_s: float
) -> None:
    """Flush queued spans and shut tracing down, for at most `timeout_s`.

    The SDK's shutdown waits on the collector for up to 30 s (a dead or
    silent collector costs the whole exporter timeout, retries included), so
    it runs on a daemon thread that is left behind when the bound passes:
    the process exits without it. The alternative, the SDK's own timeout
    arguments, bounds only part of the path (an export in progress is not
    interrupted) and reaches further into its internals.
    """
    flusher = threading.Thread(target=provider.shutdown, name="span-flush", daemon=True)
    flusher.start()
    flusher.join(max(timeout_s, 0.0))
    gave_up = flusher.is_alive()
    if gave_up and processor is not None:
        processor.abandon()
    if processor is None:
        if gave_up:
            log.warning("tracing: gave up flushing spans after %.1fs", timeout_s)
        return
    lost = processor.unexported
    if lost:
        log.warning(
            "tracing: %d of %d spans were not exported (%d dropped earlier by the full "
            "export queue; the rest refused by the collector or still unsent when the "
            "%.1fs flush ended)",
            lost,
            processor.ended,
            processor.dropped,
            timeout_s,
        )
    else:
        log.info("tracing: all %d spans exported", processor.ended)


def _exporter(environ: Mapping[str, str]) -> SpanExporter:
    protocol = environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    )
    if protocol.startswith("http"):
        # The SDK's encoding: this exporter has no seam for a faster one.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HTTPExporter,
        )

        return HTTPExporter()
    # Imported here, like the SDK's exporters: without tracing, none is loaded.
    from .span_encoding import GrpcSpanExporter

    return GrpcSpanExporter()


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
        ),
        # The daemon flushes within its grace period (shutdown_tracing); the
        # SDK's exit hook would wait up to 30 s more on a dead collector.
        shutdown_on_exit=False,
    )
    # The export thread holds the GIL while it encodes a batch, and the
    # loop waits that long: the SDK's 512 spans held it for about 5 ms
    # (squawk_event_loop_lag_seconds, DecideRetry at 1,000 calls/s), 128
    # for about 1. OTEL_BSP_MAX_EXPORT_BATCH_SIZE still wins when set.
    batch = None if "OTEL_BSP_MAX_EXPORT_BATCH_SIZE" in environ else EXPORT_BATCH_SIZE
    processor = CountingBatchSpanProcessor(_exporter(environ), batch)
    provider.add_span_processor(processor)
    return provider, processor
