"""What each benchmark row sends, and how to tell that the answer is the one
the row means to measure.

Requests are serialized once here, with the daemon's own protobuf classes,
and the load generator sends those bytes unchanged. Each workload checks a
real answer to each of its requests before it is loaded and again after: a
row that would measure an error path (an UNIMPLEMENTED, a validation error),
or whose load moved the daemon's upstream state to other answers (an open
breaker, a spent retry budget), fails instead of reporting a fast error.

Rows without "+upstream" or "+store" name no upstream, so they measure
the stateless path. The "distinct" rows send a corpus of distinct requests
(corpus.py), as executors do, so that every call is decided afresh; the
others send the same bytes on every call, which the daemon answers from the
decisions it keeps: the best case, kept to show the reuse. The state rows
spread their calls over UPSTREAMS names, as a pod's executors would, and
need the bench policy (POLICY), which keeps every breaker closed and every
retry granted under load. The "+store" rows send the "+upstream" requests
at one fixed rate, so that the same row on the memory-store and on the
Redis-store daemon says what the wait on Redis adds to a decision
(store_cost.py).
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from google.protobuf import struct_pb2

from squawk.daemon.config import load_policy
from squawk.policy import decide
from squawk.v1 import policy_pb2 as pb
from squawk.wire import attempt_state, decision_message

from .corpus import batches, corpus
from .echo_server import ECHO_METHOD

__all__ = [
    "BATCH_DISTINCT",
    "DECIDE_DISTINCT",
    "DISPATCH",
    "DISPATCH_RATE",
    "ECHO",
    "ECHO_CORPUS",
    "ECHO_DISTINCT",
    "OUTCOMES_PER_REPORT",
    "POLICY",
    "STORE_ADMIT",
    "STORE_DECIDE",
    "STORE_RATE",
    "UPSTREAMS",
    "Workload",
    "admit_request",
    "analyze_request",
    "classify_request",
    "dispatch_workloads",
    "envelope_request",
    "report_request",
    "squawk_workloads",
    "store_workloads",
    "transient_request",
]

SERVICE = "/squawk.v1.PolicyService/"
# The built-in policy with thresholds the state rows cannot reach (see the file).
POLICY = Path(__file__).resolve().parent / "policy.yaml"
DECIDE_DISTINCT = "DecideRetry distinct"
BATCH_DISTINCT = "DecideRetryBatch distinct"
ECHO_DISTINCT = "Echo distinct"
# A corpus row's probe sends this many of its requests, spread over it: all
# 16,384 would take seconds before and after every row.
PROBED = 64
# A DecideRetry envelope of the kind the executor guide shows.
ENVELOPE = (
    b'{"success": false, "error": {"code": "QUOTA_EXHAUSTED", '
    b'"message": "daily quota for search_hotels is used up", "retryable": false}}'
)

# The upstream names the state rows rotate through: a few keys, as one
# pod's executors call a few upstreams, each seen by every executor.
UPSTREAMS = tuple(f"upstream-{i}" for i in range(8))
OUTCOMES_PER_REPORT = 10

Check = Callable[[bytes], str | None]


@dataclass(frozen=True)
class Workload:
    rpc: str
    method: str
    # Call n sends payloads[n % len(payloads)].
    payloads: tuple[bytes, ...]
    # Returns None when a reply is what the row measures, else what is wrong.
    check: Check
    # Decisions (or outcomes) per call: DecideRetryBatch answers many in one call.
    items: int = 1
    # Whether to run the fixed-rate rows too. A batch call is not comparable
    # at a rate in calls/s; the state rows ask what a call costs, which
    # saturation and CPU per call answer, so they skip the rates to keep the
    # run short.
    open_loop: bool = True
    # Only an open loop at this rate (calls/s), whatever --rates says: a
    # latency compared between two daemons at one known load (the +store rows).
    rate: float | None = None
    # Driven by this many Python executor processes through the client's
    # runner (dispatch.py) instead of the load generator; 0 = the generator.
    # `payloads` are then the Admit requests of the upstreams they dispatch to.
    executors: int = 0

    @property
    def probed(self) -> tuple[bytes, ...]:
        """The payloads checked before and after the load: all of a few, or
        PROBED of a corpus, evenly spaced."""
        step = max(1, len(self.payloads) // PROBED)
        return self.payloads[::step]


def _expect_decision(action: int, reason: int) -> Check:
    def check(reply: bytes) -> str | None:
        got = pb.DecideRetryResponse.FromString(reply)
        if (got.action, got.reason) != (action, reason):
            return f"answered {pb.Action.Name(got.action)}/{pb.Reason.Name(got.reason)}"
        return None

    return check


def _expect_one_of(replies: frozenset[bytes], what: str) -> Check:
    def check(reply: bytes) -> str | None:
        return None if reply in replies else f"answered {len(reply)} bytes that are not {what}"

    return check


@functools.cache
def _decided(payloads: tuple[bytes, ...]) -> frozenset[bytes]:
    """The answers the bench policy gives these requests, decided in-process:
    the daemon must give the same bytes (none reads a clock or random jitter)."""
    policy = load_policy(str(POLICY), environ={})

    def answer(payload: bytes) -> bytes:
        request = pb.DecideRetryRequest.FromString(payload)
        state = attempt_state(request)
        profile = policy.profile(request.profile)
        decision = decide(state, profile, time.time, random.Random(), policy.max_body_bytes)
        return decision_message(decision).SerializeToString()

    return frozenset(answer(p) for p in payloads)


def _expect_decided_batch(size: int) -> Check:
    """Every result a decision, and each one the in-process answer of its item."""
    answers = _decided(corpus())
    counted = _expect_batch(size)

    def check(reply: bytes) -> str | None:
        problem = counted(reply)
        if problem is not None:
            return problem
        got = pb.DecideRetryBatchResponse.FromString(reply)
        for result in got.results:
            if result.decision.SerializeToString() not in answers:
                return "answered a decision the bench policy does not give in-process"
        return None

    return check


def _expect_classification(reply: bytes) -> str | None:
    got = pb.ClassifyResponse.FromString(reply)
    if got.category != pb.ERROR_CATEGORY_RATE_LIMIT or "[REDACTED]" not in got.redacted_message:
        return f"answered {pb.ErrorCategory.Name(got.category)}: {got.redacted_message!r}"
    return None


def _expect_batch(size: int) -> Check:
    def check(reply: bytes) -> str | None:
        got = pb.DecideRetryBatchResponse.FromString(reply)
        errors = [r.error for r in got.results if r.WhichOneof("result") != "decision"]
        if len(got.results) != size or errors:
            return f"answered {len(got.results)} results, errors {errors[:3]}"
        return None

    return check


def _expect_admitted(reply: bytes) -> str | None:
    got = pb.AdmitResponse.FromString(reply)
    if not got.allowed or got.reason != pb.REASON_ADMITTED:
        return f"answered allowed={got.allowed} {pb.Reason.Name(got.reason)}"
    return None


def _expect_recorded(count: int) -> Check:
    def check(reply: bytes) -> str | None:
        got = pb.ReportOutcomeResponse.FromString(reply)
        return None if got.recorded == count else f"recorded {got.recorded} of {count}"

    return check


def _expect_suggestion(reply: bytes) -> str | None:
    got = pb.AnalyzeErrorResponse.FromString(reply)
    if got.source != pb.ANALYSIS_SOURCE_HEURISTIC or not got.suggested_changes.fields:
        return f"answered source {pb.AnalysisSource.Name(got.source)}: {got.reason!r}"
    return None


def transient_request(upstream: str = "") -> pb.DecideRetryRequest:
    request = pb.DecideRetryRequest(
        attempt=1, http_status=503, capability="search_hotels", upstream=upstream
    )
    request.deadline.FromTimedelta(timedelta(seconds=30))
    return request


def envelope_request() -> pb.DecideRetryRequest:
    return pb.DecideRetryRequest(
        attempt=1,
        http_status=503,
        response_body=ENVELOPE,
        headers={"Content-Type": "application/json"},
        capability="search_hotels",
    )


def admit_request(upstream: str) -> pb.AdmitRequest:
    return pb.AdmitRequest(upstream=upstream, capability="search_hotels")


def report_request(first: int, count: int = OUTCOMES_PER_REPORT) -> pb.ReportOutcomeRequest:
    """`count` successes, over UPSTREAMS from the `first`-th on."""
    latency = timedelta(milliseconds=120)
    outcomes = []
    for i in range(first, first + count):
        item = pb.Outcome(
            upstream=UPSTREAMS[i % len(UPSTREAMS)],
            capability="search_hotels",
            success=True,
            http_status=200,
        )
        item.latency.FromTimedelta(latency)
        outcomes.append(item)
    return pb.ReportOutcomeRequest(outcomes=outcomes)


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(value)
    return s


def analyze_request() -> pb.AnalyzeErrorRequest:
    # The executor's first correction request (tests/support/executor_trace.py).
    return pb.AnalyzeErrorRequest(
        http_status=400,
        error_response="error 400: INVALID CITY CODE: PARIS",
        original_request=_struct({"city_code": "PARIS", "check_in": "2026-04-01"}),
        parameter_schema=_struct(
            {
                "type": "object",
                "properties": {"city_code": {"type": "string", "enum": ["PAR", "LON", "NYC"]}},
            }
        ),
        capability_name="search_hotels",
    )


def classify_request() -> pb.ClassifyRequest:
    return pb.ClassifyRequest(
        error_message=(
            "search_hotels: upstream status 429 Too Many Requests from "
            "https://api.example.com/v1/hotels?city=PAR&api_key=k3y-8f2a91c0d7"
        ),
        headers={"Retry-After": "2", "Content-Type": "application/json"},
    )


def _each(requests: list[Any]) -> tuple[bytes, ...]:
    return tuple(r.SerializeToString() for r in requests)


def squawk_workloads(batch_size: int) -> list[Workload]:
    classify = classify_request()
    # Half transient, half envelope, as a queue of mixed failures would be.
    batch = pb.DecideRetryBatchRequest(
        requests=[
            transient_request() if i % 2 == 0 else envelope_request() for i in range(batch_size)
        ]
    )
    return [
        Workload("Classify", SERVICE + "Classify", _each([classify]), _expect_classification),
        Workload(
            "DecideRetry transient",
            SERVICE + "DecideRetry",
            _each([transient_request()]),
            _expect_decision(pb.ACTION_RETRY, pb.REASON_TRANSIENT_STATUS),
        ),
        Workload(
            DECIDE_DISTINCT,
            SERVICE + "DecideRetry",
            corpus(),
            _expect_one_of(_decided(corpus()), "the bench policy's in-process answer"),
        ),
        Workload(
            f"{BATCH_DISTINCT} x{batch_size}",
            SERVICE + "DecideRetryBatch",
            batches(batch_size),
            _expect_decided_batch(batch_size),
            items=batch_size,
            open_loop=False,
        ),
        Workload(
            "DecideRetry envelope",
            SERVICE + "DecideRetry",
            _each([envelope_request()]),
            _expect_decision(pb.ACTION_FAIL, pb.REASON_EXPLICIT_NOT_RETRYABLE),
        ),
        Workload(
            f"DecideRetryBatch x{batch_size}",
            SERVICE + "DecideRetryBatch",
            _each([batch]),
            _expect_batch(batch_size),
            items=batch_size,
            open_loop=False,
        ),
        Workload(
            "AnalyzeError offline",
            SERVICE + "AnalyzeError",
            _each([analyze_request()]),
            _expect_suggestion,
        ),
        Workload(
            "DecideRetry +upstream",
            SERVICE + "DecideRetry",
            _each([transient_request(u) for u in UPSTREAMS]),
            _expect_decision(pb.ACTION_RETRY, pb.REASON_TRANSIENT_STATUS),
            open_loop=False,
        ),
        Workload(
            "Admit +upstream",
            SERVICE + "Admit",
            _each([admit_request(u) for u in UPSTREAMS]),
            _expect_admitted,
            open_loop=False,
        ),
        Workload(
            f"ReportOutcome x{OUTCOMES_PER_REPORT}",
            SERVICE + "ReportOutcome",
            # Successes keep every breaker closed whatever the policy.
            _each([report_request(i) for i in range(len(UPSTREAMS))]),
            _expect_recorded(OUTCOMES_PER_REPORT),
            items=OUTCOMES_PER_REPORT,
            open_loop=False,
        ),
    ]


STORE_DECIDE, STORE_ADMIT = "DecideRetry +store", "Admit +store"
# The +store rows' rate. A call that waits on Redis costs the daemon about
# 0.3 ms more CPU at 1,000/s (the Redis client's Python), which keeps the
# Redis-store daemon's one core 80-100 % busy here, so its latency is
# queueing; at 200/s both daemons idle most of the time and the difference is
# the wait itself. At saturation the Redis answers would come late behind the
# queue, and the row would time the deadline.
STORE_RATE = 200.0


def store_workloads(rate: float = STORE_RATE) -> list[Workload]:
    """The calls that wait on the state store, at `rate`: a DecideRetry the
    policy answers RETRY (a 503, with a retry budget the bench policy never
    exhausts) and an Admit on an upstream whose breaker stays closed. Any
    other answer is decided by the pod alone, and would not wait on Redis."""
    return [
        Workload(
            STORE_DECIDE,
            SERVICE + "DecideRetry",
            _each([transient_request(u) for u in UPSTREAMS]),
            _expect_decision(pb.ACTION_RETRY, pb.REASON_TRANSIENT_STATUS),
            rate=rate,
        ),
        Workload(
            STORE_ADMIT,
            SERVICE + "Admit",
            _each([admit_request(u) for u in UPSTREAMS]),
            _expect_admitted,
            rate=rate,
        ),
    ]


DISPATCH = "Dispatch run_step +upstream"
# The dispatch row's rate, from EXECUTORS processes together: the rate at
# which the daemon's CPU per dispatch is judged (goals.py).
DISPATCH_RATE = 1000.0
EXECUTORS = 4


def dispatch_workloads(rate: float = DISPATCH_RATE) -> list[Workload]:
    """One dispatch through the Python runner to a healthy upstream, over the
    state rows' upstreams, at `rate` from EXECUTORS executors (dispatch.py).
    The probe checks that the daemon admits each of them."""
    return [
        Workload(
            DISPATCH,
            SERVICE + "Admit",
            _each([admit_request(u) for u in UPSTREAMS]),
            _expect_admitted,
            rate=rate,
            executors=EXECUTORS,
        )
    ]


# The echo floors get the DecideRetry request's bytes: the same size on the
# wire as the call they are the floor for.
ECHO = Workload(
    "Echo",
    ECHO_METHOD,
    _each([transient_request()]),
    lambda reply: (
        None if reply == transient_request().SerializeToString() else "echoed other bytes"
    ),
)

# The floor for the distinct rows: the same corpus, echoed.
ECHO_CORPUS = Workload(
    ECHO_DISTINCT,
    ECHO_METHOD,
    corpus(),
    _expect_one_of(frozenset(corpus()), "one of the corpus's requests"),
)
