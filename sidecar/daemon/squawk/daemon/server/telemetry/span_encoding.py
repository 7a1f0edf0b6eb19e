"""Spans to OTLP bytes, written straight in the protobuf wire format.

The SDK's `encode_spans` builds a protobuf object for every attribute, event
and span: 60-70 µs a span, during which the export thread holds the
interpreter, so every call waiting on the event loop waits out the whole
512-span batch. The daemon's spans repeat themselves ("squawk.profile" =
"default", "rpc.system" = "grpc", ...), so `SpanEncoder` writes the bytes
itself and keeps the encoded KeyValue of each recurring attribute (about 7 µs
a span). `GrpcSpanExporter` is the SDK's OTLP/gRPC exporter encoding with it.

The answer is always the SDK's: the bytes parse to a message equal to
`encode_spans(spans)`. Anything this encoder does not handle (an int outside
int64, a value of an unknown type, a malformed span) sends the whole batch to
the SDK's encoder, which does what it always does with it (an attribute it
cannot encode, it logs and leaves out).

The OTLP/HTTP exporter keeps the SDK's encoding: it calls `encode_spans`
inside `export`, with no method to override short of rewriting `export`.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import DEFAULT_TRACE_STATE, TraceState
from opentelemetry.trace.status import Status, StatusCode

__all__ = ["MAX_CACHED", "GrpcSpanExporter", "SpanEncoder"]

log = logging.getLogger(__name__)

# Attribute values are caller data (upstream names, peer ports), so the cache
# of encoded attributes and span names is bounded: past this many entries it
# starts over.
MAX_CACHED: Final = 4096
# Longer texts are seldom repeated (stack traces) and gain little from a
# cache whose point is to skip small encodings; leaving them out also bounds
# the cache's memory (a few MB when full).
_MAX_CACHED_LEN: Final = 256
# The value types whose encoding `(key, type(value), value)` determines. The
# type is in the key because True == 1 == 1.0 share a dict slot. Floats stay
# out (0.0 == -0.0 encode differently), and so do tuples ((1,) == (True,)).
_CACHED_TYPES: Final = frozenset({str, int, bool, bytes, type(None)})

_I64_MIN: Final = -(1 << 63)
_I64_MAX: Final = (1 << 63) - 1
_U32_MAX: Final = (1 << 32) - 1
_U64_MASK: Final = (1 << 64) - 1

_FIXED32 = struct.Struct("<I").pack
_FIXED64 = struct.Struct("<Q").pack
_TIMES = struct.Struct("<BQBQ").pack  # start and end: two fixed64 fields
_DOUBLE = struct.Struct("<d").pack
_ONE_BYTE: Final = tuple(bytes((n,)) for n in range(0x80))

# Span.kind as the SDK maps it (SpanKind.INTERNAL is 0 in the API, 1 in OTLP).
_KIND: Final = {
    SpanKind.INTERNAL: b"\x30\x01",
    SpanKind.SERVER: b"\x30\x02",
    SpanKind.CLIENT: b"\x30\x03",
    SpanKind.PRODUCER: b"\x30\x04",
    SpanKind.CONSUMER: b"\x30\x05",
}
# Span.flags and Link.flags (fixed32): "is_remote is known", and whether it is.
_HAS_IS_REMOTE: Final = 0x100
_IS_REMOTE: Final = 0x200
_SPAN_FLAGS_LOCAL: Final = b"\x85\x01" + _FIXED32(_HAS_IS_REMOTE)
_SPAN_FLAGS_REMOTE: Final = b"\x85\x01" + _FIXED32(_HAS_IS_REMOTE | _IS_REMOTE)
_UNSET: Final = StatusCode.UNSET
_EMPTY_STATUS: Final = b"\x7a\x00"
_COPIES_TO_DICT: Final = (dict, MappingProxyType, BoundedAttributes)


class _Unsupported(Exception):
    """A value or span this encoder leaves to the SDK."""


def _varint(n: int) -> bytes:
    """An unsigned varint; callers mask negative ints to 64 bits first."""
    if n < 0x80:
        return _ONE_BYTE[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _delimited(body: bytes) -> bytes:
    return _varint(len(body)) + body


def _uint32(n: int) -> bytes:
    if not 0 <= n <= _U32_MAX:
        raise _Unsupported(n)
    return _varint(n)


def _any_value(value: Any) -> bytes:
    """The AnyValue body, checking types in the order the SDK's _encode_value does."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return b"\x0a" + _delimited(value.encode())
    if isinstance(value, int):
        if not _I64_MIN <= value <= _I64_MAX:
            raise _Unsupported(value)  # the SDK logs it and leaves the attribute out
        return b"\x18" + _varint(int(value) & _U64_MASK)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)
    if isinstance(value, bytes):
        return b"\x3a" + _delimited(value)
    if isinstance(value, Sequence):
        return b"\x2a" + _delimited(b"".join(b"\x0a" + _delimited(_any_value(v)) for v in value))
    if isinstance(value, Mapping):
        pairs = (b"\x0a" + _delimited(_key_value(str(k), v)) for k, v in value.items())
        return b"\x32" + _delimited(b"".join(pairs))
    raise _Unsupported(type(value))


def _key_value(key: Any, value: Any) -> bytes:
    if type(key) is not str:
        raise _Unsupported(type(key))
    encoded_key = key.encode()
    head = b"\x0a" + _delimited(encoded_key) if encoded_key else b""
    return head + b"\x12" + _delimited(_any_value(value))


def _optional_text(tag: bytes, text: str | None) -> bytes:
    """A proto3 string field: absent when None or empty."""
    if text is None:
        return b""
    encoded = text.encode()
    return tag + _delimited(encoded) if encoded else b""


class SpanEncoder:
    """Encodes span batches to ExportTraceServiceRequest bytes, caching attributes.

    Not locked: the SDK exports from one thread at a time, and a race on the
    cache could only cost a miss, never a wrong answer (entries are immutable).
    """

    def __init__(self, max_cached: int = MAX_CACHED) -> None:
        self._max_cached = max_cached
        self._cache: dict[tuple[Any, ...], bytes] = {}
        # Batches handed to the SDK's encoder (each is logged at debug level).
        self.fallbacks = 0

    @property
    def cached(self) -> int:
        return len(self._cache)

    def encode(self, spans: Sequence[ReadableSpan]) -> bytes:
        """The serialized ExportTraceServiceRequest the SDK would send for `spans`."""
        try:
            return self._request(spans)
        except Exception as exc:  # whatever the fast path cannot do, the SDK decides
            self.fallbacks += 1
            log.debug("span batch left to the SDK's encoder: %r", exc)
            return encode_spans(spans).SerializeToString()

    def _request(self, spans: Sequence[ReadableSpan]) -> bytes:
        # Grouped as the SDK groups (dicts keyed by resource, then scope, in
        # first-seen order), but a run of spans sharing the same two objects
        # (every span, in the daemon) skips the lookup: hashing a Resource
        # serializes its attributes to JSON.
        groups: dict[Resource, dict[InstrumentationScope | None, list[bytes]]] = {}
        resource: Resource | None = None
        scope: InstrumentationScope | None = None
        encoded: list[bytes] | None = None
        for span in spans:
            if (
                encoded is None
                or span.resource is not resource
                or (span.instrumentation_scope or None) is not scope
            ):
                resource, scope = span.resource, span.instrumentation_scope or None
                encoded = groups.setdefault(resource, {}).setdefault(scope, [])
            encoded.append(self._span(span))
        out = []
        for resource, scopes in groups.items():
            body = [b"\x0a", _delimited(self._attributes(b"\x0a", resource.attributes))]
            for scope, encoded_spans in scopes.items():
                body.append(b"\x12")
                body.append(_delimited(self._scope_spans(scope, encoded_spans)))
            body.append(_optional_text(b"\x1a", resource.schema_url))
            out.append(b"\x0a" + _delimited(b"".join(body)))
        return b"".join(out)

    def _scope_spans(self, scope: InstrumentationScope | None, spans: list[bytes]) -> bytes:
        body = [b"\x0a"]
        if scope is None:
            body.append(b"\x00")
        else:
            body.append(
                _delimited(
                    _optional_text(b"\x0a", scope.name)
                    + _optional_text(b"\x12", scope.version)
                    + self._attributes(b"\x1a", scope.attributes)
                )
            )
        for span in spans:
            body.append(b"\x12")
            body.append(_delimited(span))
        if scope is not None:
            body.append(_optional_text(b"\x1a", scope.schema_url))
        return b"".join(body)

    def _span(self, span: ReadableSpan) -> bytes:
        context = span.get_span_context()
        if context is None:
            raise _Unsupported("a span without a context")
        parent = span.parent
        parts = [
            b"\x0a\x10",
            context.trace_id.to_bytes(16, "big"),
            b"\x12\x08",
            context.span_id.to_bytes(8, "big"),
        ]
        trace_state = context.trace_state
        if trace_state is not DEFAULT_TRACE_STATE and trace_state:
            parts.append(_trace_state(trace_state))
        if parent:
            parts.append(b"\x22\x08")
            parts.append(parent.span_id.to_bytes(8, "big"))
        parts.append(self._name_and_kind(span.name, span.kind))
        start, end = span.start_time, span.end_time
        if start and end:
            parts.append(_TIMES(0x39, start, 0x41, end))
        else:
            parts.append(b"\x39" + _FIXED64(start) if start else b"")
            parts.append(b"\x41" + _FIXED64(end) if end else b"")
        # Three private fields, read as the SDK's properties would be, for a
        # tenth of their cost: `attributes` wraps the mapping in a read-only
        # proxy (whose copy costs three times the mapping's own), `events` and
        # `links` copy their lists under a lock, 0.5 µs each even when empty
        # (as they mostly are). The tests compare against the SDK's encoder,
        # which reads the properties.
        parts.append(self._attributes(b"\x4a", span._attributes))
        if span.dropped_attributes:
            parts.append(b"\x50" + _uint32(span.dropped_attributes))
        if span._events:
            for event in span.events:
                parts.append(b"\x5a")
                parts.append(_delimited(self._event(event)))
        if span.dropped_events:
            parts.append(b"\x60" + _uint32(span.dropped_events))
        if span._links:
            for link in span.links:
                parts.append(b"\x6a")
                parts.append(_delimited(self._link(link)))
        if span.dropped_links:
            parts.append(b"\x70" + _uint32(span.dropped_links))
        parts.append(_status(span.status))
        parts.append(_SPAN_FLAGS_REMOTE if parent and parent.is_remote else _SPAN_FLAGS_LOCAL)
        return b"".join(parts)

    def _name_and_kind(self, name: str, kind: SpanKind) -> bytes:
        # Span names recur as much as attributes do (one per RPC method).
        entry = (name, kind)
        encoded = self._cache.get(entry)
        if encoded is None:
            encoded = _optional_text(b"\x2a", name) + _KIND[kind]
            if len(name) <= _MAX_CACHED_LEN:
                self._store(entry, encoded)
        return encoded

    def _event(self, event: Event) -> bytes:
        timestamp = event.timestamp
        return (
            (b"\x09" + _FIXED64(timestamp) if timestamp else b"")
            + _optional_text(b"\x12", event.name)
            + self._attributes(b"\x1a", event.attributes)
            + (b"\x20" + _uint32(event.dropped_attributes) if event.dropped_attributes else b"")
        )

    def _link(self, link: Link) -> bytes:
        context = link.context
        # The SDK leaves Link.trace_state out; so does this.
        flags = _HAS_IS_REMOTE | (_IS_REMOTE if context.is_remote else 0)
        return (
            b"\x0a\x10"
            + context.trace_id.to_bytes(16, "big")
            + b"\x12\x08"
            + context.span_id.to_bytes(8, "big")
            + self._attributes(b"\x22", link.attributes)
            + (b"\x28" + _uint32(link.dropped_attributes) if link.dropped_attributes else b"")
            + b"\x35"
            + _FIXED32(flags)
        )

    def _attributes(self, tag: bytes, attributes: Mapping[str, Any] | None) -> bytes:
        """Each attribute as a `tag` field holding its KeyValue."""
        if not attributes:
            return b""
        # The SDK's attribute mappings iterate in Python, one __getitem__ per
        # key; their copy() is a plain dict, copied in C.
        if isinstance(attributes, _COPIES_TO_DICT):
            attributes = attributes.copy()
        keys, values = attributes.keys(), attributes.values()
        # map and zip run in C: no bytecode per attribute on a cache hit.
        try:
            encoded = list(map(self._cache.get, zip(keys, map(type, values), values, strict=True)))
        except TypeError:  # an unhashable value (a list or a dict): encode them all
            encoded = [None] * len(attributes)
        if not all(encoded):  # a miss (an encoded KeyValue is never empty)
            encoded = [
                done if done is not None else self._remember((key, type(value), value))
                for done, key, value in zip(encoded, keys, values, strict=True)
            ]
        # The tag as separator puts one before every KeyValue.
        return tag + tag.join(encoded)  # type: ignore[arg-type]

    def _remember(self, entry: tuple[Any, type, Any]) -> bytes:
        key, kind, value = entry
        encoded = _delimited(_key_value(key, value))
        if kind in _CACHED_TYPES and not (
            isinstance(value, str | bytes) and len(value) > _MAX_CACHED_LEN
        ):
            self._store(entry, encoded)
        return encoded

    def _store(self, entry: tuple[Any, ...], encoded: bytes) -> None:
        if len(self._cache) >= self._max_cached:
            self._cache.clear()
        self._cache[entry] = encoded


def _trace_state(trace_state: TraceState) -> bytes:
    text = ",".join(f"{key}={value}" for key, value in trace_state.items())
    return _optional_text(b"\x1a", text)


def _status(status: Status | None) -> bytes:
    if status is None:
        return b""
    code, description = status.status_code, status.description
    if code is _UNSET and not description:
        return _EMPTY_STATUS
    body = _optional_text(b"\x12", description)
    if code is not _UNSET:
        body += b"\x18" + _varint(code.value)
    return b"\x7a" + _delimited(body)


class GrpcSpanExporter(OTLPSpanExporter):
    """The SDK's OTLP/gRPC span exporter, encoding with `SpanEncoder`.

    Only the translation changes: configuration (the OTEL_EXPORTER_OTLP_*
    endpoint, headers, TLS, compression and timeout), retries and the channel
    stay the SDK's. `_translate_data` is a private SDK method; a test fails
    if the SDK stops calling it.

    The bytes are parsed back into a message because the SDK's stub sends
    messages: about 2 µs a span (the parse, then gRPC serializing it again)
    on top of the encoder's 7, where the SDK takes 60-70. Sending the bytes as
    they are would mean replacing the SDK's stub and channel set-up as well,
    more of its internals for that last fifth.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.encoder = SpanEncoder()

    def _translate_data(self, data: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
        return ExportTraceServiceRequest.FromString(self.encoder.encode(data))
