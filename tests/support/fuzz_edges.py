"""Fixed worst cases the random mix might miss: inputs at sizes where a
super-linear scan (regex backtracking, quadratic redaction, a hint scan
over a whitespace run, Levenshtein over a huge enum) costs seconds, and
values exactly at and past documented limits.

fuzz_cases sends the RPC's edges once each, early in every run (case
EDGE_EVERY * k + EDGE_EVERY // 2 is edge k), so a run of a few thousand
cases sends them all and the long run does not repeat them.
Each builder returns (label, request bytes).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from google.protobuf.duration_pb2 import Duration

from squawk.v1 import policy_pb2 as pb
from wire_bytes import field_bytes, struct_bytes

__all__ = ["EDGES", "EDGE_EVERY"]

EDGE_EVERY = 40
N = 65_536  # long enough that O(n^2) takes seconds, short enough to send fast
MIB = 2**20
EYJ = "eyJ-" * N  # every position starts a JWT-looking token that never ends
SPACES = " " * N
HINT_SPACES = "use" + SPACES  # "did you mean/use X" with X never coming
BACKTRACK = "a" * 40 + "!"
_RATE_FLOOD = {f"x-ratelimit-reset-{j}": "9" * 8_192 for j in range(64)}
YEAR_9999 = "Fri, 31 Dec 9999 23:59:59 GMT"  # "^(a+)+$" takes 2^40 steps to reject this
Edge = Callable[[], tuple[str, bytes]]


def _classify(label: str, **fields: Any) -> Edge:
    return lambda: (label, pb.ClassifyRequest(**fields).SerializeToString())


def _decide(label: str, **fields: Any) -> Edge:
    def build() -> tuple[str, bytes]:
        request = pb.DecideRetryRequest(attempt=1, http_status=503)
        for name, value in fields.items():
            if name == "deadline":
                request.deadline.seconds, request.deadline.nanos = value
            elif name == "headers":
                request.headers.update(value)
            else:
                setattr(request, name, value)
        return label, request.SerializeToString()

    return build


def _envelope(message: str) -> bytes:
    return json.dumps({"success": False, "error": {"message": message}}).encode()


def _analyze(label: str, params: Any, schema: Any, deps: Any = None, **fields: Any) -> Edge:
    def build() -> tuple[str, bytes]:
        base: dict[str, Any] = {"http_status": 400, "error_response": "error 400: invalid value"}
        base |= fields
        parts = [
            pb.AnalyzeErrorRequest(**base).SerializeToString(),
            field_bytes(3, struct_bytes(params)),
            field_bytes(8, struct_bytes(schema)),
        ]
        for step, result in (deps or {}).items():
            entry = field_bytes(1, step.encode()) + field_bytes(2, struct_bytes(result))
            parts.append(field_bytes(10, entry))
        return label, b"".join(parts)

    return build


def _dispatch(label: str, params: Any, schema: Any) -> Edge:
    return lambda: (
        label,
        field_bytes(1, struct_bytes(params)) + field_bytes(2, struct_bytes(schema)),
    )


def _batch(label: str, *items: pb.DecideRetryRequest, copies: int = 1) -> Edge:
    return lambda: (
        label,
        pb.DecideRetryBatchRequest(requests=list(items) * copies).SerializeToString(),
    )


def _admit(label: str, **fields: Any) -> Edge:
    return lambda: (label, pb.AdmitRequest(**fields).SerializeToString())


def _out(upstream: str, status: int = 503, headers: dict[str, str] | None = None) -> pb.Outcome:
    return pb.Outcome(upstream=upstream, http_status=status, headers=headers)


def _report(label: str, *items: pb.Outcome, copies: int = 1) -> Edge:
    return lambda: (
        label,
        pb.ReportOutcomeRequest(outcomes=list(items) * copies).SerializeToString(),
    )


def _listing(label: str, profile: str) -> Edge:
    return lambda: (label, pb.GetUpstreamsRequest(profile=profile).SerializeToString())


def _events(label: str, **fields: Any) -> Edge:
    return lambda: (label, pb.GetEventsRequest(**fields).SerializeToString())


def _latency(seconds: int) -> pb.Outcome:
    out = _out("latency")
    out.latency.seconds = seconds
    return out


_PATTERN = {"type": "string", "pattern": "^(a+)+$"}
_BIG_ENUM = [f"option-{i:05d}-" + "x" * 40 for i in range(10_000)]

EDGES: dict[str, list[Edge]] = {
    "Classify": [
        _classify("eyJ-message", error_message=EYJ),
        _classify("eyJ-profile", profile=EYJ),
        _classify("spaces-after-status-word", error_message="error" + " " * MIB),
        _classify("a-run-bang", error_message="a" * MIB + "!"),
        _classify("bearer-run", error_message="Bearer " * (N // 2)),
        _classify("assignment-run", error_message="api_key=" * (N // 2)),
        _classify("url-credentials-run", error_message="https://a:b@" * (N // 2)),
        _classify("retry-after-20-digits", headers={"Retry-After": "9" * 20}),
        _classify("pushback-20-digits", headers={"grpc-retry-pushback-ms": "9" * 20}),
        _classify("retry-after-year-9999", headers={"Retry-After": YEAR_9999}),
        _classify("10000-headers", headers={f"x-{i}": "v" for i in range(10_000)}),
        _classify("status-int32-min", http_status=-(2**31), error_message="x"),
    ],
    "DecideRetry": [
        _decide("eyJ-envelope-message", response_body=_envelope(EYJ)),
        _decide("eyJ-profile", profile=EYJ),
        _decide("eyJ-capability", capability=EYJ, upstream=EYJ),
        _decide("body-at-limit", response_body=b"{" + b" " * (MIB - 1)),
        _decide("body-over-limit", response_body=b" " * (MIB + 1)),
        _decide("nested-objects", response_body=b'{"a":' * (MIB // 5 - 1)),
        _decide(
            "surrogate-envelope", response_body=b'{"success":false,"error":{"message":"\\ud800"}}'
        ),
        _decide("deadline-int64-max", deadline=(2**63 - 1, 0)),
        _decide("deadline-mixed-signs", deadline=(1, -1)),
        _decide("deadline-nanos-int32-max", deadline=(0, 2**31 - 1)),
        _decide("retry-after-20-digits", headers={"Retry-After": "9" * 20}),
        _decide("pushback-20-digits", headers={"grpc-retry-pushback-ms": "9" * 20}),
        _decide("attempt-int32-max", attempt=2**31 - 1, max_attempts=2**31 - 1),
    ],
    "DecideRetryBatch": [
        _batch(
            "10000-bad-items", pb.DecideRetryRequest(attempt=0, profile="x" * 100), copies=10_000
        ),
        _batch("eyJ-profile-item", pb.DecideRetryRequest(attempt=1, profile=EYJ)),
        _batch("eyJ-capability-item", pb.DecideRetryRequest(attempt=1, capability=EYJ)),
        _batch(
            "retry-after-item", pb.DecideRetryRequest(attempt=1, headers={"Retry-After": "9" * 20})
        ),
        _batch("10001-items", pb.DecideRetryRequest(attempt=1), copies=10_001),
    ],
    "AnalyzeError": [
        _analyze("eyJ-error", {"a": "x"}, {}, error_response=EYJ),
        _analyze("spaces-error", {"a": "x"}, {}, error_response="x: expected integer" + SPACES),
        _analyze("use-spaces-error", {"a": "x"}, {}, error_response=HINT_SPACES),
        _analyze("one-of-spaces", {"a": "x"}, {}, error_response="a: one of" + SPACES + "b"),
        _analyze(
            "backtracking-pattern",
            {"code": BACKTRACK},
            {"properties": {"code": _PATTERN}},
            error_response="code is invalid, did you mean " + BACKTRACK,
        ),
        _analyze(
            "backtracking-dependencies",
            {"code": "b"},
            {"properties": {"code": _PATTERN}},
            {"geo": {f"code{i}": BACKTRACK for i in range(50)}},
            error_response="code is invalid",
        ),
        _analyze(
            "10000-enum-near-miss",
            {"cabin": "option-xxxxx-" + "x" * 40},
            {"properties": {"cabin": {"type": "string", "enum": _BIG_ENUM}}},
            error_response="cabin is not one of the allowed values",
        ),
        _analyze(
            "10000-leaf-dependencies",
            {"city": "Paris"},
            {"properties": {"city": {"type": "string", "enum": ["PAR"]}}},
            {f"s{i}": {"city": f"C{i}", "name": "x" * 20} for i in range(5000)},
            error_response="city is invalid",
        ),
        _analyze(
            "date-digits",
            {"day": "9" * 5000},
            {"properties": {"day": {"type": "string", "format": "date"}}},
            error_response="day must be in format YYYY-MM-DD",
        ),
        _analyze("error-over-limit", {"a": "x"}, {}, error_response="x" * (MIB + 1)),
        _analyze("retries-int32-max", {"a": "x"}, {}, validation_retries_used=2**31 - 1),
    ],
    "CheckDispatch": [
        _dispatch("braces", {"a": "{{" * (MIB // 4)}, {}),
        _dispatch("dollar-braces", {"a": "${" * (MIB // 4)}, {}),
        _dispatch("unclosed-reference-run", {"a": "{{ a" * (MIB // 8)}, {}),
        _dispatch("enum-10000", {"a": "z"}, {"properties": {"a": {"enum": _BIG_ENUM}}}),
        _dispatch("100000-required", {}, {"required": [f"k{i}" for i in range(100_000)]}),
        _dispatch("eyJ-enum-value", {"a": EYJ}, {"properties": {"a": {"enum": ["b"]}}}),
        _dispatch("eyJ-key", {EYJ: 1}, {"properties": {EYJ: {"type": "array"}}}),
    ],
    "Admit": [
        # The longest names a decision-log line holds, in 4-byte and escaped characters.
        _admit("emoji-names-at-limit", upstream="😀" * 256, capability="😀" * 256),
        _admit("nul-names-at-limit", upstream="\x00" * 256, capability="\x00" * 256),
        _admit("upstream-over-limit", upstream="u" * 257),
        _admit("eyJ-upstream", upstream=EYJ),
        _admit("eyJ-capability", upstream="a", capability=EYJ),
        _admit("eyJ-profile", upstream="a", profile=EYJ),
        # The pace's inputs at and past their bounds.
        _admit("cost-nan", upstream="a", cost=float("nan")),
        _admit("cost-max-double", upstream="a", cost=1.7976931348623157e308),
        _admit("permits-int32-max", upstream="a", permits=2**31 - 1),
        _admit("permits-int32-min", upstream="a", permits=-(2**31)),
        _admit("deadline-duration-max", upstream="a", deadline=Duration(seconds=315_576_000_000)),
        _admit("deadline-negative", upstream="a", deadline=Duration(seconds=-1)),
        _admit(
            "deadline-a-day-100-permits",
            upstream="a",
            deadline=Duration(seconds=86_400),
            permits=100,
            cost=1e9,
        ),
    ],
    "ReportOutcome": [
        _report("0-outcomes"),
        _report("1000-outcomes", _out("a"), copies=1000),
        _report("1001-outcomes", _out("a"), copies=1001),
        _report("100000-outcomes", _out("a"), copies=100_000),
        _report("bad-status-at-999", *[_out("a")] * 999, _out("a", 600)),
        _report("status-int32-min", _out("a", -(2**31))),
        # Rate-limit headers as many and as long as the boundary lets in, on
        # seven 429s (3.5 MiB): each is parsed for the pace.
        _report("ratelimit-header-flood", *[_out(f"r{i}", 429, _RATE_FLOOD) for i in range(7)]),
        # Ten failures each open 100 breakers in one call.
        _report("100-breakers-open", *[_out(f"b{i}") for i in range(100) for _ in range(10)]),
        _report(
            "1000-cooling-names-at-limit",
            *[_out(f"{i:04d}" + "😀" * 252, 429, {"Retry-After": "60"}) for i in range(1000)],
        ),
        _report("retry-after-20-digits", _out("c", 429, {"Retry-After": "9" * 20})),
        _report("pushback-20-digits", _out("c", 503, {"grpc-retry-pushback-ms": "9" * 20})),
        _report("retry-after-year-9999", _out("c", 503, {"Retry-After": YEAR_9999})),
        _report("retry-after-over-limit", _out("c", 503, {"Retry-After": "9" * 8193})),
        _report("65-headers", _out("c", 503, {f"x-{i}": "v" for i in range(65)})),
        _report("latency-int64-max", _latency(2**63 - 1)),
        _report("age-int64-max", pb.Outcome(upstream="c", age=Duration(seconds=2**63 - 1))),
        _report("admission-id-8192-chars", pb.Outcome(upstream="c", admission_id="a" * 8192)),
    ],
    "GetUpstreams": [
        _listing("eyJ-profile", EYJ),
        _listing("unknown-profile", "unknown"),
        _listing("nul-profile", "default\x00"),
        _listing("tokens-profile", "tokens"),
    ],
    "GetEvents": [
        _events("eyJ-upstream", upstream=EYJ),
        _events("eyJ-profile", profile=EYJ),
        _events("nul-upstream", upstream="open\x00"),
        _events("after-int64-max", after=2**63 - 1),
        _events("after-int64-min", after=-(2**63)),
        _events("page-int32-min", page_size=-(2**31)),
    ],
}
