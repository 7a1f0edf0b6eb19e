"""The edge of every PolicyService call: parsing, refusals and errors.

A body that is not a valid message becomes INVALID_ARGUMENT naming
`request`; a domain error becomes INVALID_ARGUMENT naming the field, with
a `google.rpc.BadRequest`; anything unexpected becomes INTERNAL with a
generic message and the traceback in the log, so a request can never crash
the daemon. Every message that reaches a caller passes `shown_text`:
redacted, bounded, valid UTF-8.

A call that reaches its method with less than BEHIND_S of its deadline
left is answered RESOURCE_EXHAUSTED at once, not decided (the clients'
fallback answers it): deciding it would only answer after its caller gave
up. Under more callers than it can serve, the daemon otherwise spends its
time on answers nobody waits for, and the work it does in time collapses
(bench/REPORT.md, "The daemon's own overload"); dropped early, the stale
calls cost it little, and the fresh ones are decided in time. The share of
calls that arrive so sets the daemon's overload level (overload.py), which
sheds AnalyzeError and Classify first, then DecideRetryBatch. Every such
answer carries gRPC's retry pushback, and a ReportOutcome's outcomes are
counted, never dropped silently.

The span of a refused call keeps less than the caller is told: the code and
the field, as the schema names it. A refusal's text can echo a body's keys
or a header's name, which are not secrets `shown_text` would catch but are
not the daemon's to export either.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar, cast

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2

from squawk.policy import PolicyInputError
from squawk.policy.text import shown_text
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

from ..telemetry.observer import Observer
from ..telemetry.spans import CallSpan, ServerSpans
from . import overload
from .bodies import Malformed, Unparsed, reader
from .turns import Turns

__all__ = [
    "BEHIND",
    "BEHIND_S",
    "INTERNAL",
    "MAX_ERROR_CHARS",
    "OVERLOADED",
    "PUSHBACK",
    "boundary",
    "register",
]

# The longest status message a refused call carries.
MAX_ERROR_CHARS = 1_024
# A field path names request fields and caller-chosen keys; this bounds the keys.
MAX_FIELD_CHARS = 256
INTERNAL = "internal error; see the daemon's log"
# The least time left (seconds) a call needs to be decided and answered
# before its deadline: a decision takes about a millisecond on an idle
# daemon, its answer's trip back the rest.
BEHIND_S = 0.005
BEHIND = (
    "not decided: the call reached the daemon too close to its deadline"
    " (the daemon is behind its callers); the client's fallback answers it"
)
OVERLOADED = (
    "not decided: the daemon is overloaded and sheds this kind of call first"
    " (its overload level); the client's fallback answers it"
)
# gRPC's retry pushback (A6): how long a caller should wait before asking
# again, one overload interval (a level is set per interval).
PUSHBACK = (("grpc-retry-pushback-ms", str(round(overload.INTERVAL * 1000))),)
# The standard trailer of gRPC's rich error model (what grpcio-status writes).
_STATUS_DETAILS = "grpc-status-details-bin"
_NO_DETAILS: tuple[tuple[str, bytes], ...] = ()


class _Observed(Protocol):
    _observer: Observer
    _spans: ServerSpans | None
    _turns: Turns
    _overload: overload.Overload


S = TypeVar("S", bound=_Observed)
Req = TypeVar("Req")
Resp = TypeVar("Resp")
Method = Callable[[S, Req, grpc.aio.ServicerContext[Req, Resp]], Awaitable[Resp]]


def register(servicer: pb_grpc.PolicyServiceServicer, server: grpc.aio.Server) -> None:
    """Serve PolicyService on `server`, parsing requests with `bodies.reader`.

    The generated add_PolicyServiceServicer_to_server, but for the deserializer.
    """
    service = pb.DESCRIPTOR.services_by_name["PolicyService"]
    handlers = {
        m.name: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, m.name),
            request_deserializer=reader(message_factory.GetMessageClass(m.input_type)),
            response_serializer=message_factory.GetMessageClass(m.output_type).SerializeToString,
        )
        for m in service.methods
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    server.add_registered_method_handlers(service.full_name, handlers)


def boundary(method: Method[S, Req, Resp]) -> Method[S, Req, Resp]:
    rpc = method.__name__
    shed = overload.shed_class(rpc)

    @functools.wraps(method)
    async def wrapper(self: S, request: Req, context: grpc.aio.ServicerContext[Req, Resp]) -> Resp:
        left = context.time_remaining()
        behind = left is not None and left < BEHIND_S
        before = self._overload
        self._overload = state = overload.arrived(before, time.monotonic(), behind)
        if state.level != before.level:
            self._observer.overload_level(state.level, before.level)
        if behind:
            self._observer.refused(rpc, "behind")
            if isinstance(request, pb.ReportOutcomeRequest):
                self._observer.shed_outcomes(len(request.outcomes))
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, BEHIND, PUSHBACK)
        if overload.sheds(state, shed):
            self._observer.refused(rpc, "overloaded")
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, OVERLOADED, PUSHBACK)
        spans = self._spans
        if spans is None:
            return await _answer(self, method, request, context, None)
        span = spans.open(rpc, context)  # type: ignore[arg-type]
        if not isinstance(span, CallSpan):  # not sampled
            return await _answer(self, method, request, context, None)
        try:
            return await _answer(self, method, request, context, span)
        except asyncio.CancelledError:
            # The caller went away: nothing failed that the span could explain.
            span.ended(grpc.StatusCode.CANCELLED)
            raise
        finally:
            span.close()

    return wrapper


async def _answer(
    self: S,
    method: Method[S, Req, Resp],
    request: Req,
    context: grpc.aio.ServicerContext[Req, Resp],
    span: CallSpan | None,
) -> Resp:
    rpc = method.__name__
    refusal: PolicyInputError | None = None
    schema: Descriptor | None = None
    try:
        if isinstance(request, Unparsed):
            # A large body, parsed in turns (bodies.py); the result is the
            # method's message or Malformed, as the deserializer's would be.
            request = cast(Req, await request.parse(self._turns))
        if isinstance(request, Malformed):
            self._observer.refused(rpc, "malformed")
            refusal = PolicyInputError("request", f"not a valid {request.type_name} message")
        else:
            return await method(self, request, context)
    except asyncio.CancelledError:
        self._observer.refused(rpc, "cancelled")
        raise
    except PolicyInputError as exc:
        self._observer.refused(rpc, "invalid_argument")
        refusal = exc
        # The stubs type a generated message's descriptor as a union with upb's.
        schema = cast(Descriptor, request.DESCRIPTOR) if isinstance(request, Message) else None
    except grpc.aio.AbortError:
        raise
    except Exception:
        self._observer.refused(rpc, "internal", exc_info=True)
    # Abort outside the except block, so the AbortError does not carry the
    # original exception (and its unredacted text) into a span's event.
    if refusal is None:
        code, message, details = grpc.StatusCode.INTERNAL, INTERNAL, _NO_DETAILS
        reason = INTERNAL
    else:
        code = grpc.StatusCode.INVALID_ARGUMENT
        message, details = _bad_request(refusal)
        reason = schema_path(schema, refusal.field)
    if span is not None:
        span.refused(code, reason)
    await context.abort(code, message, details)
    raise AssertionError("unreachable: abort raises")


def schema_path(schema: Descriptor | None, field: str) -> str:
    """The start of a refusal's field path that names the schema's fields.

    "outcomes[2].upstream" is kept whole; "original_request.<key>" and
    "headers['<name>']" stop where the caller's own text (a JSON key, a
    header name) would begin. A path that names no field is "request".
    """
    kept: list[str] = []
    for step in field.split("."):
        name, bracket, index = step.partition("[")
        found = schema.fields_by_name.get(name) if schema is not None else None
        if found is None:
            break
        schema = found.message_type
        if schema is None or schema.GetOptions().map_entry or schema.file.package != "squawk.v1":
            kept.append(name)  # a scalar, a map or a Struct: what follows is the caller's
            break
        if not bracket:
            kept.append(name)
        elif found.is_repeated and index.endswith("]") and index[:-1].isdigit():
            kept.append(step)
        else:
            kept.append(name)
            break
    return ".".join(kept) or "request"


def _bad_request(exc: PolicyInputError) -> tuple[str, tuple[tuple[str, bytes], ...]]:
    """The status message and the `google.rpc.BadRequest` trailer for a refusal.

    Both are bounded and redacted (an error echoes a caller's value, and it
    reaches spans); the message keeps its "field: description" form so a
    client without the google.rpc types can still read the field.
    """
    field = shown_text(exc.field, MAX_FIELD_CHARS)
    description = shown_text(exc.message, MAX_ERROR_CHARS)
    message = shown_text(f"{field}: {description}", MAX_ERROR_CHARS)
    violation = error_details_pb2.BadRequest.FieldViolation(field=field, description=description)
    status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=message)
    status.details.add().Pack(error_details_pb2.BadRequest(field_violations=[violation]))
    return message, ((_STATUS_DETAILS, status.SerializeToString()),)
