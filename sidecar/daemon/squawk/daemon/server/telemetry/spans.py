"""The server span of each PolicyService call, recorded at the call's boundary.

One SERVER span per call, the child of the caller's span when the call
carries trace context (W3C by default; whatever OTEL_PROPAGATORS names),
sampled by the tracer provider's sampler (OTEL_TRACES_SAMPLER), with the
RPC attributes of the OpenTelemetry conventions: rpc.system, rpc.service,
rpc.method, rpc.grpc.status_code, net.peer.* and rpc.user_agent.

Why not the SDK's tracer: a call's span is known whole only when the call
ends, and nothing inside the daemon makes child spans or propagates the
context onward. So the span is kept as a plain record while the call runs
(attributes in a dict, breaker transitions as events) and handed to the
provider's span processors as one finished ReadableSpan, as the SDK's own
`Span.end` does. That skips what the daemon's profile showed the SDK span
and the generic gRPC server interceptor spending per call: a lock and an
attribute-checking mapping per span, two context managers and a proxy
around the servicer context (about a third of a traced call's CPU, in a
py-spy profile of DecideRetry at saturation; bench/REPORT.md). The
attributes are the daemon's own fields, already
bounded and redacted (telemetry/observer.py, `shown_text`), so the SDK's per-value
checks had nothing to do.

Health checks and reflection are never traced: they would drown the
decisions in noise.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Protocol
from urllib.parse import unquote

import grpc
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    INVALID_SPAN_CONTEXT,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.util.types import AttributeValue

from squawk.policy.limits import MAX_NAME_CHARS
from squawk.policy.text import shown_text
from squawk.v1 import policy_pb2 as pb

__all__ = ["MAX_EVENTS", "NO_SPAN", "SERVICE", "CallSpan", "ServerSpans", "SpanRecord", "current"]

log = logging.getLogger(__name__)

SERVICE = pb.DESCRIPTOR.services_by_name["PolicyService"].full_name
# Events kept per span, as the SDK's default limit: one ReportOutcome can
# move a thousand breakers, and the span says how many events it dropped.
MAX_EVENTS = 128
# Distinct user agents and peers remembered with their attributes; a pod
# has a few of each, and a connection's peer is the same on every call.
_CACHED = 256
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSAMPLED = TraceFlags(TraceFlags.DEFAULT)
_OK = Status(StatusCode.UNSET)

Attributes = Mapping[str, AttributeValue]


class SpanRecord(Protocol):
    """What the servicer and the observer do with the current call's span."""

    def is_recording(self) -> bool: ...
    def set_attributes(self, attributes: Attributes) -> None: ...
    def add_event(self, name: str, attributes: Attributes) -> None: ...
    def get_span_context(self) -> SpanContext: ...


class _NoSpan:
    """The span of a call nobody traces (no provider, or not sampled)."""

    __slots__ = ()

    def is_recording(self) -> bool:
        return False

    def set_attributes(self, attributes: Attributes) -> None:
        pass

    def add_event(self, name: str, attributes: Attributes) -> None:
        pass

    def get_span_context(self) -> SpanContext:
        return INVALID_SPAN_CONTEXT

    def ended(self, code: grpc.StatusCode) -> None:
        pass

    def refused(self, code: grpc.StatusCode, reason: str) -> None:
        pass

    def close(self) -> None:
        pass


NO_SPAN = _NoSpan()
_current: ContextVar[SpanRecord] = ContextVar("squawk_call_span", default=NO_SPAN)


def current() -> SpanRecord:
    """The span of the call being answered (NO_SPAN outside a traced call)."""
    return _current.get()


class CallSpan:
    """A sampled call's span while the call runs; `close` ends and exports it."""

    __slots__ = (
        "_events",
        "_owner",
        "_start",
        "_status",
        "_token",
        "attributes",
        "context",
        "name",
        "parent",
    )

    def __init__(
        self,
        owner: ServerSpans,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        attributes: dict[str, AttributeValue],
    ) -> None:
        self._owner = owner
        self.name = name
        self.context = context
        self.parent = parent
        self.attributes = attributes
        self._events: BoundedList[Event] | None = None
        self._status = _OK
        self._start = time.time_ns()
        self._token = _current.set(self)

    def is_recording(self) -> bool:
        return True

    def set_attributes(self, attributes: Attributes) -> None:
        self.attributes.update(attributes)

    def add_event(self, name: str, attributes: Attributes) -> None:
        if self._events is None:
            self._events = BoundedList(MAX_EVENTS)
        self._events.append(Event(name, dict(attributes)))

    def get_span_context(self) -> SpanContext:
        return self.context

    def ended(self, code: grpc.StatusCode) -> None:
        """The call ends with `code`, and the span stays unmarked (the caller went away)."""
        self.attributes["rpc.grpc.status_code"] = code.value[0]

    def refused(self, code: grpc.StatusCode, reason: str) -> None:
        """The call ends with `code`, for a `reason` fit to export.

        Every refusal is an error span, a caller's mistake too: OpenTelemetry
        keeps a status description only on errors, and the reason is what
        an operator opens the span for. `rpc.grpc.status_code` tells the
        daemon's faults from the caller's.
        """
        self.ended(code)
        self._status = Status(StatusCode.ERROR, f"{code.name}: {reason}")

    def close(self) -> None:
        _current.reset(self._token)
        owner = self._owner
        try:
            owner.processor.on_end(self._finished())
        except Exception:
            owner.failed("hand a finished span to the span processors")

    def _finished(self) -> ReadableSpan:
        owner = self._owner
        return ReadableSpan(
            self.name,
            context=self.context,
            parent=self.parent,
            resource=owner.resource,
            attributes=self.attributes,
            events=self._events if self._events is not None else (),
            links=(),
            kind=SpanKind.SERVER,
            instrumentation_scope=owner.scope,
            status=self._status,
            start_time=self._start,
            end_time=time.time_ns(),
        )


class ServerSpans:
    """Opens the span of each call, as the provider's tracer would."""

    def __init__(self, provider: TracerProvider) -> None:
        self._sampler = provider.sampler
        self._ids = provider.id_generator
        self.resource = provider.resource
        # The one reach into the SDK: the processors `add_span_processor`
        # registered, which an SDK span's end() calls. test_telemetry's spans
        # go through it, so a change there fails the tests, not silently.
        self.processor: SpanProcessor = provider._active_span_processor
        self.scope = InstrumentationScope("squawk.daemon")
        methods = pb.DESCRIPTOR.services_by_name["PolicyService"].methods
        self._names = {m.name: f"/{SERVICE}/{m.name}" for m in methods}
        self._agents: dict[str, str] = {}
        self._peers: dict[str, Mapping[str, str]] = {}
        # Span failures so far: tracing is the operator's aid, so a failing
        # sampler, propagator or processor costs the span, never the call,
        # and one log line with its traceback, not one per call.
        self.failures = 0

    def failed(self, what: str) -> None:
        """Note a failure of the span code (called from an `except` block)."""
        self.failures += 1
        if self.failures == 1:
            log.warning("tracing: could not %s; the call goes on untraced", what, exc_info=True)

    def open(
        self, rpc: str, context: grpc.aio.ServicerContext[object, object]
    ) -> CallSpan | _NoSpan:
        """The call's span, current until it is closed; NO_SPAN when not sampled."""
        try:
            return self._open(rpc, context)
        except Exception:
            self.failed("open a call's span")
            return NO_SPAN

    def _open(
        self, rpc: str, context: grpc.aio.ServicerContext[object, object]
    ) -> CallSpan | _NoSpan:
        name = self._names[rpc]
        carrier = {
            k: v
            for k, v in context.invocation_metadata() or ()
            # Baggage: the daemon reads none and forwards none, and parsing
            # a caller's oversized one logs a warning per call.
            if isinstance(v, str) and k != "baggage"
        }
        # Never None: the sampler and get_current_span would read the
        # ambient context then, so a call without metadata could adopt
        # whatever span the process had current as its parent.
        parent_context = propagate.extract(carrier) if carrier else Context()
        found = trace.get_current_span(parent_context).get_span_context()
        parent = found if found.is_valid else None
        trace_id = found.trace_id if parent else self._ids.generate_trace_id()
        sampling = self._sampler.should_sample(parent_context, trace_id, name, SpanKind.SERVER)
        if sampling.decision is Decision.DROP:
            return NO_SPAN
        flags = _SAMPLED if sampling.decision is Decision.RECORD_AND_SAMPLE else _UNSAMPLED
        # No trace state: the caller's `tracestate` is caller data that would
        # reach the collector unredacted, and no call leaves the daemon that
        # could need it passed on.
        span_context = SpanContext(trace_id, self._ids.generate_span_id(), False, flags)
        attributes: dict[str, AttributeValue] = {
            **sampling.attributes,
            "rpc.system": "grpc",
            "rpc.service": SERVICE,
            "rpc.method": rpc,
            "rpc.grpc.status_code": grpc.StatusCode.OK.value[0],
        }
        agent = carrier.get("user-agent")
        if agent:
            attributes["rpc.user_agent"] = self._shown_agent(agent)
        attributes.update(self._peer(context.peer()))
        return CallSpan(self, name, span_context, parent, attributes)

    def _peer(self, peer: str) -> Mapping[str, str]:
        found = self._peers.get(peer)
        if found is None:
            found = _peer(peer)
            if len(self._peers) >= _CACHED:
                self._peers.clear()
            self._peers[peer] = found
        return found

    def _shown_agent(self, agent: str) -> str:
        # The user agent is the caller's string: it passes the same gate as
        # every other caller string on a span.
        shown = self._agents.get(agent)
        if shown is None:
            shown = shown_text(agent, MAX_NAME_CHARS)
            if len(self._agents) >= _CACHED:
                self._agents.clear()
            self._agents[agent] = shown
        return shown


def _peer(peer: str) -> Mapping[str, str]:
    """net.peer.* from gRPC's peer string ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000")."""
    kind, _, address = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return {}  # a Unix socket names no peer
    host, _, port = address.split(",", 1)[0].rpartition(":")
    ip = unquote(host)
    out = {"net.peer.ip": ip, "net.peer.port": port}
    if ip in ("[::1]", "127.0.0.1"):
        out["net.peer.name"] = "localhost"
    return out
