"""Distinct DecideRetry requests, as a pod's executors send them.

The daemon keeps the answers of stateless DecideRetry requests by their
bytes (server/rpc/decisions.py, an LRU of MAX_ENTRIES), so a row that sends the
same bytes on every call measures a dictionary lookup, not a decision.
Real executors' requests differ: the attempt, the deadline left, the status,
the body's text (ids, numbers, timings) and headers such as x-request-id
and Retry-After. This corpus varies each of those, from a fixed seed, and
holds CORPUS_FACTOR times as many requests as the daemon keeps: sent in
turn, every request comes back only after more than MAX_ENTRIES others, so
an LRU never holds it and every call is decided afresh.

Every request names no upstream (the stateless path the goals read), stays
under MAX_KEY_BYTES (so the daemon pays the miss with its key and
bookkeeping, as for any executor), and gives Retry-After in seconds, never
as an HTTP date, so its answer reads no clock and can be checked exactly
(workloads.py) against the same policy decided in-process.
"""

from __future__ import annotations

import functools
import random
from datetime import timedelta

from squawk.daemon.server.rpc.decisions import MAX_ENTRIES, MAX_KEY_BYTES
from squawk.v1 import policy_pb2 as pb

__all__ = ["CORPUS_FACTOR", "CORPUS_SEED", "batches", "corpus"]

CORPUS_SEED = 22
# Requests per entry the daemon keeps: enough that no request recurs
# before MAX_ENTRIES others have been sent.
CORPUS_FACTOR = 4

_CAPABILITIES = ("search_hotels", "book_flight", "get_weather", "quote_fx", "send_invoice")
# Mostly the statuses executors retry, as a queue of failing calls would be,
# and some they do not (a 400 whose body asks for a correction, a 401).
_STATUSES = (503, 503, 503, 502, 504, 500, 429, 429, 408, 400, 401)
_HOSTS = ("api.example.com", "eu.partner.example", "hotels-3.internal", "fx.example.net")


def _body(rng: random.Random, status: int) -> bytes:
    """An upstream's error body: text or JSON with ids, numbers and timings."""
    host = rng.choice(_HOSTS)
    trace = f"{rng.getrandbits(64):016x}"
    kind = rng.randrange(4)
    if kind == 0:
        text = (
            f"upstream {host} answered {status} after {rng.randrange(5, 30_000)} ms "
            f"(pool {rng.randrange(1, 64)}, trace {trace})"
        )
    elif kind == 1:
        text = (
            f'{{"error": {{"code": {status}, "message": "backend {host} busy, '
            f'{rng.randrange(1, 500)} requests queued", "trace_id": "{trace}"}}}}'
        )
    elif kind == 2 and status != 401:
        # The executor guide's envelope, retryable or not.
        retryable = "true" if rng.random() < 0.7 else "false"
        text = (
            f'{{"success": false, "error": {{"code": "E{rng.randrange(1000, 9999)}", '
            f'"message": "order {rng.randrange(10**6, 10**7)} not processed", '
            f'"retryable": {retryable}}}}}'
        )
    else:
        text = f"Error {status}: city_code PARIS-{rng.randrange(100)} is not valid at {host}"
    return text.encode()


def _request(rng: random.Random, n: int) -> pb.DecideRetryRequest:
    status = rng.choice(_STATUSES)
    request = pb.DecideRetryRequest(
        # Most failures are a first attempt's; some have used up the budget.
        attempt=rng.choices((1, 2, 3, 4), (5, 3, 2, 1))[0],
        http_status=status,
        response_body=_body(rng, status),
        capability=rng.choice(_CAPABILITIES),
    )
    # Unique per request, as every executor's call is: the corpus cannot hold
    # two equal requests whatever the other fields drew.
    request.headers["x-request-id"] = f"req-{n:06d}-{rng.getrandbits(48):012x}"
    request.headers["content-type"] = "application/json"
    if status in (429, 503) and rng.random() < 0.5:
        request.headers["Retry-After"] = str(rng.randint(1, 20))
    if rng.random() < 0.9:
        request.deadline.FromTimedelta(timedelta(milliseconds=rng.randrange(200, 60_000)))
    if rng.random() < 0.2:
        request.max_attempts = rng.randint(2, 6)
    return request


@functools.cache
def corpus(size: int = CORPUS_FACTOR * MAX_ENTRIES, seed: int = CORPUS_SEED) -> tuple[bytes, ...]:
    """`size` distinct serialized DecideRetry requests, from `seed`."""
    rng = random.Random(seed)
    found = tuple(_request(rng, n).SerializeToString(deterministic=True) for n in range(size))
    if len(set(found)) != size or max(map(len, found)) > MAX_KEY_BYTES:
        raise AssertionError("the corpus must hold distinct requests the daemon would keep")
    return found


def batches(batch_size: int, size: int = CORPUS_FACTOR * MAX_ENTRIES) -> tuple[bytes, ...]:
    """The corpus cut into DecideRetryBatch requests of `batch_size` each."""
    requests = [pb.DecideRetryRequest.FromString(b) for b in corpus(size)]
    return tuple(
        pb.DecideRetryBatchRequest(requests=requests[i : i + batch_size]).SerializeToString()
        for i in range(0, len(requests) - batch_size + 1, batch_size)
    )
