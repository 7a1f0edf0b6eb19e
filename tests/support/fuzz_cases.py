"""The wire fuzz's generator: one seeded stream of request bodies per RPC.

Case `index` of `rpc` under `seed` is built from its own
random.Random(f"{seed}/{rpc}/{index}"), so any case is rebuilt exactly from
those three values without replaying the stream before it. A case is:

- random: random bytes as the body;
- mutation: a valid request (from the vector files) damaged at the byte
  level (wire_bytes.MUTATIONS);
- hostile: a request built field by field from fuzz_values, well-formed
  protobuf holding values at and past every edge, plus the raw shapes the
  generated classes cannot write (huge batches, crafted Struct nesting,
  lone surrogates in JSON bodies);
- edge: the fixed worst cases of fuzz_edges, each sent once per run.

Admit, ReportOutcome and GetUpstreams draw their valid and hostile
requests from fuzz_upstreams, which also says how their daemon is readied.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message

from fuzz_edges import EDGE_EVERY, EDGES
from fuzz_upstreams import HOSTILE as UPSTREAM_HOSTILE
from fuzz_upstreams import SEEDS as UPSTREAM_SEEDS
from fuzz_values import (
    DURATION_NANOS,
    DURATION_SECONDS,
    INT32S,
    JSONISH,
    hostile_json,
    hostile_schema,
    hostile_string,
    length,
    profile_name,
    wait_headers,
)
from squawk.v1 import policy_pb2 as pb
from wire_bytes import field_bytes, mutate, struct_bytes

__all__ = ["REQUEST_TYPES", "RPCS", "Case", "case", "cases", "is_malformed"]

TESTS = Path(__file__).resolve().parents[1]
REQUEST_TYPES: dict[str, type[Message]] = {
    "Classify": pb.ClassifyRequest,
    "DecideRetry": pb.DecideRetryRequest,
    "DecideRetryBatch": pb.DecideRetryBatchRequest,
    "AnalyzeError": pb.AnalyzeErrorRequest,
    "CheckDispatch": pb.CheckDispatchRequest,
    "Admit": pb.AdmitRequest,
    "ReportOutcome": pb.ReportOutcomeRequest,
    "GetUpstreams": pb.GetUpstreamsRequest,
    "GetEvents": pb.GetEventsRequest,
}
RPCS = tuple(REQUEST_TYPES)
MAX_BATCH = 10_000  # the documented limit (docs/policy.md, "The service")


@dataclass(frozen=True)
class Case:
    rpc: str
    index: int
    label: str  # "random", "mutation:<ops>", "hostile:<what>" or "edge:<name>"
    payload: bytes


def is_malformed(rpc: str, payload: bytes) -> bool:
    """Whether protobuf itself refuses the bytes: the daemon must answer INVALID_ARGUMENT."""
    try:
        REQUEST_TYPES[rpc].FromString(payload)
    except Exception:
        return True
    return False


@cache
def _seeds() -> dict[str, list[bytes]]:
    """Valid requests for every RPC: from the project's own vector and case
    files, and for the upstream RPCs, which have none there, from fuzz_upstreams."""
    vectors = json.loads((TESTS / "vectors" / "decisions.json").read_text())
    cases_file = TESTS / "daemon" / "analysis" / "analysis_cases.json"
    analysis = json.loads(cases_file.read_text())["cases"]
    classify = [
        json_format.ParseDict(v["request"], pb.ClassifyRequest()) for v in vectors["classify"]
    ]
    decide = [
        json_format.ParseDict(v["request"], pb.DecideRetryRequest()) for v in vectors["decide"]
    ]
    analyze = [json_format.ParseDict(c["request"], pb.AnalyzeErrorRequest()) for c in analysis]
    dispatch = [
        pb.CheckDispatchRequest(parameters=a.original_request, parameter_schema=a.parameter_schema)
        for a in analyze
    ]
    batches = [
        pb.DecideRetryBatchRequest(requests=decide[i : i + 5]) for i in range(0, len(decide), 5)
    ]
    found: dict[str, Sequence[Message]] = {
        "Classify": classify,
        "DecideRetry": decide,
        "DecideRetryBatch": batches,
        "AnalyzeError": analyze,
        "CheckDispatch": dispatch,
    }
    return {rpc: [m.SerializeToString() for m in ms] for rpc, ms in found.items()} | UPSTREAM_SEEDS


def _duration(rng: random.Random, out: Any) -> str:
    out.seconds = rng.choice(DURATION_SECONDS)
    out.nanos = rng.choice(DURATION_NANOS)
    return "duration"


def _body(rng: random.Random) -> tuple[str, bytes]:
    roll = rng.random()
    retryable = rng.choice(("true", "false", "null", '"false"', "0"))
    if roll < 0.4:
        message = json.dumps(hostile_string(rng))
        text = f'{{"success": false, "error": {{"retryable": {retryable}, "message": {message}}}}}'
        return "body.envelope", text.encode()
    if roll < 0.6:
        inner = rng.choice(JSONISH)
        text = f'{{"success": false, "error": {{"retryable": {retryable}, "message": {inner}}}}}'
        return "body.jsonish", text.encode()
    if roll < 0.7:
        text = (
            '{"success": false, "error": {"retryable": false, "message": "\\ud800\\udc00x\\udfff"}}'
        )
        encoding = rng.choice(("utf-8", "utf-16", "utf-32", "utf-16-be"))
        return f"body.surrogate.{encoding}", text.encode(encoding)
    if roll < 0.8:
        return "body.random", b"{" + rng.randbytes(length(rng))
    return "body.string", hostile_string(rng).encode()


def _decide(rng: random.Random) -> tuple[str, pb.DecideRetryRequest]:
    r = pb.DecideRetryRequest(
        attempt=rng.choice(INT32S) if rng.random() < 0.4 else rng.randrange(1, 5),
        http_status=rng.choice(INT32S),
        transport_failure=rng.random() < 0.1,
        correction_available=rng.random() < 0.5,
        hitl_approved=rng.random() < 0.1,
        delegated_orchestrator=rng.random() < 0.05,
        cancelled=rng.random() < 0.05,
        validation_retries_used=rng.choice(INT32S) if rng.random() < 0.3 else 0,
        profile=profile_name(rng),
    )
    what = ["fields"]
    if rng.random() < 0.3:
        r.max_attempts = rng.choice(INT32S)
    if rng.random() < 0.3:
        r.max_validation_retries = rng.choice(INT32S)
    if rng.random() < 0.5:
        r.headers.update(wait_headers(rng))
        what.append("headers")
    if rng.random() < 0.4:
        what.append(_duration(rng, r.deadline))
    if rng.random() < 0.5:
        name, body = _body(rng)
        r.response_body = body
        what.append(name)
    if rng.random() < 0.3:
        r.capability, r.upstream = hostile_string(rng), hostile_string(rng)
        what.append("names")
    return "+".join(what), r


def _classify(rng: random.Random) -> tuple[str, bytes]:
    r = pb.ClassifyRequest(
        error_message=hostile_string(rng),
        http_status=rng.choice(INT32S),
        transport_failure=rng.random() < 0.1,
        profile=profile_name(rng),
    )
    if rng.random() < 0.6:
        r.headers.update(wait_headers(rng))
    return "fields", r.SerializeToString()


_GOOD_ITEM = pb.DecideRetryRequest(attempt=1, http_status=503)


def _batch(rng: random.Random) -> tuple[str, bytes]:
    roll = rng.random()
    if roll < 0.01:
        # Huge: at, one past and twice the limit, each with one bad item.
        n = rng.choice((MAX_BATCH, MAX_BATCH + 1, MAX_BATCH + 1, 2 * MAX_BATCH))
        items = [field_bytes(1, _GOOD_ITEM.SerializeToString())] * n
        items[rng.randrange(n)] = field_bytes(
            1, pb.DecideRetryRequest(attempt=0).SerializeToString()
        )
        return f"huge.{n}", b"".join(items)
    n = rng.choice((1, 2, 5, 20)) if rng.random() < 0.98 else 200
    batch = pb.DecideRetryBatchRequest()
    if roll < 0.3:
        # One hostile item among good ones: the rest must still be decided.
        batch.requests.extend([_GOOD_ITEM] * n)
        batch.requests[rng.randrange(n)].CopyFrom(_decide(rng)[1])
        return "one_hostile_item", batch.SerializeToString()
    labels, size = set(), 0
    for _ in range(n):
        label, item = _decide(rng)
        size += item.ByteSize()
        if size > 2**21 and batch.requests:
            break  # stay under gRPC's 4 MiB message limit most of the time
        labels.add(label.split("+")[-1])
        batch.requests.append(item)
    return "+".join(["items", *sorted(labels)]), batch.SerializeToString()


_HINTS = (
    "did you mean {v}?",
    "expected one of {vs}",
    "Invalid value for {k}: {v}",
    "{k} must be in format YYYY-MM-DD, got {v}",
    "error 400: INVALID {k}: {v}",
    "{k} must match pattern {v}",
    "{k}: expected integer, got string {v}",
)


def _error_text(rng: random.Random, keys: list[str]) -> str:
    if rng.random() < 0.3:
        return hostile_string(rng)
    hint = rng.choice(_HINTS)
    stem = hostile_string(rng, 24)
    values = ", ".join(
        f"{stem}{i}" for i in range(rng.choice((2, 50)) if rng.random() < 0.97 else 3000)
    )
    return hint.format(k=rng.choice(keys), v=hostile_string(rng), vs=values)


def _struct_deep(depth: int) -> bytes:
    """A Struct nested `depth` times through Value.struct_value, crafted as bytes."""
    inner = b""
    for _ in range(depth):
        value = field_bytes(5, inner)  # Value.struct_value
        inner = field_bytes(1, field_bytes(1, b"a") + field_bytes(2, value))  # fields["a"]
    return inner


def _analyze(rng: random.Random) -> tuple[str, bytes]:
    keys = [hostile_string(rng, 12) or "k" for _ in range(rng.randrange(1, 5))]
    r = pb.AnalyzeErrorRequest(
        http_status=rng.choice((400, 404, 409, 422)) if rng.random() < 0.7 else rng.choice(INT32S),
        error_response=_error_text(rng, keys),
        user_query=hostile_string(rng),
        capability_name=hostile_string(rng, 64),
        capability_description=hostile_string(rng),
        step_id=hostile_string(rng, 64),
    )
    stem = hostile_string(rng, 16)
    count = rng.choice((0, 1, 3)) if rng.random() < 0.98 else 2000
    r.protected_parameters.extend(f"{stem}{i}" for i in range(count))
    if rng.random() < 0.05:
        r.protected_parameters.append("")
    for name in ("validation_retries_used", "semantic_retries_used"):
        if rng.random() < 0.3:
            setattr(r, name, rng.choice(INT32S))
    for name in ("max_validation_retries", "max_semantic_retries"):
        if rng.random() < 0.3:
            setattr(r, name, rng.choice(INT32S))
    # The Structs are written as bytes: fields may come in any order on the wire.
    parts = [
        r.SerializeToString(),
        field_bytes(3, struct_bytes({k: hostile_json(rng) for k in keys})),
        field_bytes(8, struct_bytes(hostile_schema(rng, keys))),
    ]
    what = "fields"
    if rng.random() < 0.5:
        what += "+dependencies"
        for _ in range(rng.choice((1, 2, 3)) if rng.random() < 0.98 else 50):
            result = struct_bytes({k: hostile_json(rng) for k in [*keys, "other"]})
            entry = field_bytes(1, hostile_string(rng, 16).encode()) + field_bytes(2, result)
            parts.append(field_bytes(10, entry))
    if rng.random() < 0.05:
        # Nesting past protobuf's recursion limit, in the request or the schema.
        depth = rng.choice((99, 101, 200, 5000))
        what += f"+deep{depth}"
        parts.append(field_bytes(rng.choice((3, 8)), _struct_deep(depth)))
    return what, b"".join(parts)


def _dispatch(rng: random.Random) -> tuple[str, bytes]:
    keys = [hostile_string(rng, 12) or "k" for _ in range(rng.randrange(1, 6))]
    values = {k: hostile_json(rng) for k in keys}
    if rng.random() < 0.3:
        repeat = rng.choice((1, 1000)) if rng.random() < 0.9 else 100_000
        values[keys[0]] = rng.choice(("{{", "${", "{{a}}", "{{ }}")) * repeat
    data = field_bytes(1, struct_bytes(values)) + field_bytes(
        2, struct_bytes(hostile_schema(rng, keys))
    )
    if rng.random() < 0.05:
        depth = rng.choice((99, 101, 200, 5000))
        return f"deep{depth}", data + field_bytes(rng.choice((1, 2)), _struct_deep(depth))
    return "fields", data


def _decide_bytes(rng: random.Random) -> tuple[str, bytes]:
    label, r = _decide(rng)
    return label, r.SerializeToString()


HOSTILE: dict[str, Callable[[random.Random], tuple[str, bytes]]] = {
    "Classify": _classify,
    "DecideRetry": _decide_bytes,
    "DecideRetryBatch": _batch,
    "AnalyzeError": _analyze,
    "CheckDispatch": _dispatch,
} | UPSTREAM_HOSTILE


def _descriptor(rpc: str) -> Descriptor:
    return cast(Descriptor, REQUEST_TYPES[rpc].DESCRIPTOR)


def case(seed: int, rpc: str, index: int) -> Case:
    edge, offset = divmod(index, EDGE_EVERY)
    if offset == EDGE_EVERY // 2 and edge < len(EDGES[rpc]):
        label, data = EDGES[rpc][edge]()
        return Case(rpc, index, f"edge:{label}", data)
    rng = random.Random(f"{seed}/{rpc}/{index}")
    roll = rng.random()
    if roll < 0.15:
        return Case(rpc, index, "random", rng.randbytes(rng.choice((0, 1, 7, 64, 512, 8192))))
    if roll < 0.5:
        ops, data = mutate(rng, rng.choice(_seeds()[rpc]), _descriptor(rpc))
        return Case(rpc, index, f"mutation:{ops}", data)
    label, data = HOSTILE[rpc](rng)
    return Case(rpc, index, f"hostile:{label}", data)


def cases(seed: int, rpc: str, count: int) -> Iterator[Case]:
    for index in range(count):
        yield case(seed, rpc, index)
