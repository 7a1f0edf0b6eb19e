"""Secret canaries: one per secret shape, placed in every string field of
every PolicyService RPC, each unique so a leak names its field and shape.

A canary's marker `QZ<slot>X<shape>QZ` sits inside the secret part of its
shape (the token, the password, the key), in letters and digits every
shape allows; finding a marker anywhere, in any case, is a leak of that
secret. The quoted password keeps its marker in its third word, so
redacting only the first word is still a leak.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from squawk.v1 import policy_pb2 as pb
from wire_bytes import field_bytes, struct_bytes

__all__ = ["MARKER", "SHAPES", "SLOTS", "Call", "calls", "marker", "where"]

MARKER = re.compile(r"QZ(\d{3})X(\d{2})QZ", re.IGNORECASE)


def marker(slot: int, shape: int) -> str:
    return f"QZ{slot:03d}X{shape:02d}QZ"


# (name, text holding the secret around marker m). Token shapes are padded
# to the lengths their real issuers use.
SHAPES: tuple[tuple[str, Callable[[str], str]], ...] = (
    ("bearer", lambda m: f"Authorization: Bearer {m}tok9f8e7d6c5b4a"),
    ("api_key=", lambda m: f"api_key={m}k3yv4lue"),
    ("password=", lambda m: f"password={m}hunter2"),
    ("quoted password", lambda m: f'password="correct horse {m} battery staple"'),
    ("AWS_SECRET_ACCESS_KEY=", lambda m: f"AWS_SECRET_ACCESS_KEY={m}wJalrXUtnFEMIK7MDENG"),
    ("GITHUB_TOKEN=", lambda m: f"GITHUB_TOKEN={m}gh0123456789"),
    ("DB_PASSWORD=", lambda m: f"DB_PASSWORD={m}s3cr3t"),
    ("openai sk-", lambda m: f"sk-proj-{m}abcdefghijklmnop"),
    ("stripe sk_live_", lambda m: f"sk_live_{m}abcdefghijklmn"),
    ("github ghp_", lambda m: f"ghp_{m}{'a1B2' * 7}"[:40]),
    ("aws AKIA", lambda m: f"AKIA{m.upper()}ABCDEF"),
    ("google AIza", lambda m: f"AIza{m}{'Sy0_' * 7}"[:39]),
    ("jwt", lambda m: f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ{m}In0.{m}c2lnbmF0dXJl"),
    ("slack xoxb-", lambda m: f"xoxb-123456789012-{m}-abcdefABCDEF"),
    ("url credentials", lambda m: f"https://deploy:{m}pw@db.internal.example/orders"),
    ("?access_token=", lambda m: f"https://api.example.com/v1/search?q=x&access_token={m}tok"),
)


@dataclass(frozen=True)
class Call:
    slot: str
    shape: str
    rpc: str
    request: bytes
    # The statuses this call may answer: "OK", "INVALID_ARGUMENT" (the
    # caller's mistake carries the canary), or both where the rule for the
    # value is not settled.
    expect: frozenset[str]


OK = frozenset({"OK"})
REFUSED = frozenset({"INVALID_ARGUMENT"})
EITHER = OK | REFUSED

# A 4xx the offline analyzer cannot fix, so the model is asked; layer 4
# finds two candidates under unrelated keys, so the model is asked again
# with the dependency results.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["currency"],
    "properties": {
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "ISO 4217 code"},
        "amount": {"type": "number"},
    },
}
PARAMS: dict[str, Any] = {"amount": 100, "currency": "Switzerland"}
DEPENDENCIES: dict[str, dict[str, Any]] = {"geo": {"iso3": "CHE", "money": "CHF"}}


def _classify(**fields: Any) -> Message:
    base: dict[str, Any] = {"error_message": "upstream error 503", "http_status": 503}
    return pb.ClassifyRequest(**(base | fields))


def _decide(**fields: Any) -> pb.DecideRetryRequest:
    base: dict[str, Any] = {"attempt": 1, "http_status": 503, "capability": "search_hotels"}
    return pb.DecideRetryRequest(**(base | fields))


def _envelope(text: str) -> bytes:
    return json.dumps({"success": False, "error": {"message": text, "retryable": True}}).encode()


def _analyze(
    params: dict[str, Any] | None = None,
    schema: dict[str, Any] | None = None,
    dependencies: dict[str, dict[str, Any]] | None = None,
    **fields: Any,
) -> bytes:
    base: dict[str, Any] = {
        "http_status": 400,
        "error_response": "Invalid currency code: Switzerland",
        "user_query": "pay the hotel in Zurich",
        "capability_name": "pay_invoice",
        "capability_description": "Pays an invoice in the given currency.",
        "step_id": "step-2",
    }
    request = pb.AnalyzeErrorRequest(**(base | fields))
    parts = [
        request.SerializeToString(),
        field_bytes(3, struct_bytes(PARAMS if params is None else params)),
        field_bytes(8, struct_bytes(SCHEMA if schema is None else schema)),
    ]
    for step, result in (DEPENDENCIES if dependencies is None else dependencies).items():
        entry = field_bytes(1, step.encode()) + field_bytes(2, struct_bytes(result))
        parts.append(field_bytes(10, entry))
    return b"".join(parts)


def _dispatch(params: dict[str, Any], schema: dict[str, Any]) -> bytes:
    return field_bytes(1, struct_bytes(params)) + field_bytes(2, struct_bytes(schema))


def _batch(*items: pb.DecideRetryRequest) -> bytes:
    return pb.DecideRetryBatchRequest(requests=items).SerializeToString()


def _bytes(message: Message) -> bytes:
    return message.SerializeToString()


_props = SCHEMA["properties"]
# (slot, rpc, expected statuses, request holding text t). A refused twin of
# a valid call (attempt 0, a negative retry count) checks that a refusal
# does not spill the rest of the request anywhere either.
SLOTS: tuple[tuple[str, str, frozenset[str], Callable[[str], bytes]], ...] = (
    ("Classify.error_message", "Classify", OK, lambda t: _bytes(_classify(error_message=t))),
    ("GetEvents.upstream", "GetEvents", EITHER, lambda t: _bytes(pb.GetEventsRequest(upstream=t))),
    ("GetEvents.profile", "GetEvents", REFUSED, lambda t: _bytes(pb.GetEventsRequest(profile=t))),
    ("Classify.profile", "Classify", REFUSED, lambda t: _bytes(_classify(profile=t))),
    ("Classify.header name", "Classify", OK, lambda t: _bytes(_classify(headers={t: "1"}))),
    ("Classify.header value", "Classify", OK, lambda t: _bytes(_classify(headers={"X-Auth": t}))),
    (
        "Classify.Retry-After value",
        "Classify",
        OK,
        lambda t: _bytes(_classify(headers={"Retry-After": t})),
    ),
    (
        "DecideRetry.response_body envelope message",
        "DecideRetry",
        OK,
        lambda t: _bytes(_decide(response_body=_envelope(t))),
    ),
    (
        "DecideRetry.response_body raw text",
        "DecideRetry",
        OK,
        lambda t: _bytes(_decide(response_body=f"<html>502 Bad Gateway {t}</html>".encode())),
    ),
    ("DecideRetry.header name", "DecideRetry", OK, lambda t: _bytes(_decide(headers={t: "1"}))),
    (
        "DecideRetry.header value",
        "DecideRetry",
        OK,
        lambda t: _bytes(_decide(headers={"Authorization": t})),
    ),
    ("DecideRetry.capability", "DecideRetry", OK, lambda t: _bytes(_decide(capability=t))),
    ("DecideRetry.upstream", "DecideRetry", OK, lambda t: _bytes(_decide(upstream=t))),
    ("DecideRetry.profile", "DecideRetry", REFUSED, lambda t: _bytes(_decide(profile=t))),
    (
        "DecideRetry.envelope message, refused call",
        "DecideRetry",
        REFUSED,
        lambda t: _bytes(_decide(attempt=0, response_body=_envelope(t), upstream=t)),
    ),
    (
        "DecideRetryBatch item envelope message",
        "DecideRetryBatch",
        OK,
        lambda t: _batch(_decide(), _decide(response_body=_envelope(t), http_status=400)),
    ),
    (
        "DecideRetryBatch item headers",
        "DecideRetryBatch",
        OK,
        lambda t: _batch(_decide(headers={t: t, "Retry-After": "1"})),
    ),
    (
        "DecideRetryBatch item capability/upstream",
        "DecideRetryBatch",
        OK,
        lambda t: _batch(_decide(capability=t, upstream=t)),
    ),
    (
        "DecideRetryBatch bad item profile",
        "DecideRetryBatch",
        OK,
        lambda t: _batch(_decide(), _decide(profile=t, upstream=t)),
    ),
    (
        "DecideRetryBatch bad item attempt",
        "DecideRetryBatch",
        OK,
        lambda t: _batch(_decide(attempt=0, capability=t, response_body=_envelope(t))),
    ),
    ("AnalyzeError.error_response", "AnalyzeError", OK, lambda t: _analyze(error_response=t)),
    (
        "AnalyzeError.error_response after the hint",
        "AnalyzeError",
        OK,
        lambda t: _analyze(error_response=f"Invalid currency code: Switzerland ({t})"),
    ),
    (
        "AnalyzeError.original_request value",
        "AnalyzeError",
        OK,
        lambda t: _analyze(params=PARAMS | {"note": t}),
    ),
    (
        "AnalyzeError.original_request failing value",
        "AnalyzeError",
        OK,
        lambda t: _analyze(params=PARAMS | {"currency": t}),
    ),
    (
        "AnalyzeError.original_request key",
        "AnalyzeError",
        OK,
        lambda t: _analyze(params=PARAMS | {t: "x"}),
    ),
    (
        "AnalyzeError.parameter_schema string",
        "AnalyzeError",
        OK,
        lambda t: _analyze(
            schema=SCHEMA | {"properties": _props | {"amount": {"type": "number", "title": t}}}
        ),
    ),
    (
        "AnalyzeError.parameter_schema enum value",
        "AnalyzeError",
        OK,
        lambda t: _analyze(
            schema=SCHEMA
            | {"properties": _props | {"currency": {"type": "string", "enum": ["CHF", t]}}}
        ),
    ),
    (
        "AnalyzeError.parameter_schema key",
        "AnalyzeError",
        OK,
        lambda t: _analyze(schema=SCHEMA | {"properties": _props | {t: {"type": "string"}}}),
    ),
    (
        "AnalyzeError.parameter_schema required name",
        "AnalyzeError",
        OK,
        lambda t: _analyze(schema=SCHEMA | {"required": ["currency", t]}),
    ),
    ("AnalyzeError.user_query", "AnalyzeError", OK, lambda t: _analyze(user_query=t)),
    ("AnalyzeError.capability_name", "AnalyzeError", OK, lambda t: _analyze(capability_name=t)),
    (
        "AnalyzeError.capability_description",
        "AnalyzeError",
        OK,
        lambda t: _analyze(capability_description=t),
    ),
    ("AnalyzeError.step_id", "AnalyzeError", OK, lambda t: _analyze(step_id=t)),
    (
        "AnalyzeError.protected_parameters",
        "AnalyzeError",
        OK,
        lambda t: _analyze(protected_parameters=[t, "amount"]),
    ),
    (
        "AnalyzeError.dependency_results step",
        "AnalyzeError",
        OK,
        lambda t: _analyze(dependencies={t: DEPENDENCIES["geo"]}),
    ),
    (
        "AnalyzeError.dependency_results value",
        "AnalyzeError",
        OK,
        lambda t: _analyze(dependencies={"geo": DEPENDENCIES["geo"] | {"note": t}}),
    ),
    (
        "AnalyzeError.dependency_results key",
        "AnalyzeError",
        OK,
        lambda t: _analyze(dependencies={"geo": DEPENDENCIES["geo"] | {t: "CHF"}}),
    ),
    (
        "AnalyzeError every field, refused call",
        "AnalyzeError",
        REFUSED,
        lambda t: _analyze(
            params={t: t},
            schema={"properties": {t: {"type": "string", "description": t}}},
            dependencies={t: {t: t}},
            error_response=t,
            user_query=t,
            capability_name=t,
            capability_description=t,
            step_id=t,
            protected_parameters=[t],
            validation_retries_used=-1,
        ),
    ),
    (
        "CheckDispatch.parameters value",
        "CheckDispatch",
        OK,
        lambda t: _dispatch({"currency": "CHF", "note": t}, SCHEMA),
    ),
    (
        "CheckDispatch.parameters value outside the enum",
        "CheckDispatch",
        OK,
        lambda t: _dispatch({"currency": t}, {"properties": {"currency": {"enum": ["CHF"]}}}),
    ),
    (
        "CheckDispatch.parameters value with a placeholder",
        "CheckDispatch",
        OK,
        lambda t: _dispatch({"currency": "{{" + t + "}}"}, SCHEMA),
    ),
    (
        "CheckDispatch.parameters key",
        "CheckDispatch",
        OK,
        lambda t: _dispatch(
            {"currency": "CHF", t: {"a": 1}}, {"properties": {t: {"type": "array"}}}
        ),
    ),
    (
        "CheckDispatch.parameter_schema string",
        "CheckDispatch",
        OK,
        lambda t: _dispatch({"currency": "CHF"}, SCHEMA | {"description": t}),
    ),
    (
        "CheckDispatch.parameter_schema required name",
        "CheckDispatch",
        OK,
        lambda t: _dispatch({"currency": "CHF"}, {"required": [t]}),
    ),
    (
        "CheckDispatch.parameter_schema enum value",
        "CheckDispatch",
        OK,
        lambda t: _dispatch(
            {"currency": "EUR"}, {"properties": {"currency": {"enum": [t, "CHF"]}}}
        ),
    ),
    (
        "CheckDispatch with a NaN beside the canary",
        "CheckDispatch",
        EITHER,
        lambda t: _dispatch({"currency": t, "amount": float("nan")}, {"required": [t]}),
    ),
)


def calls() -> list[Call]:
    """Every slot with every shape: len(SLOTS) * len(SHAPES) calls."""
    out = []
    for i, (slot, rpc, expect, build) in enumerate(SLOTS):
        for j, (shape, text) in enumerate(SHAPES):
            out.append(Call(slot, shape, rpc, build(text(marker(i, j))), expect))
    return out


def where(found: re.Match[str]) -> tuple[str, str]:
    """The (slot, shape) a marker belongs to."""
    return SLOTS[int(found[1])][0], SHAPES[int(found[2])][0]
