"""Micro-benchmark of the pure policy core, and of the servicer's work around it.

"core" rows time `classify` and `decide` alone, on values already converted
from the benchmark's requests (the goal: <= 5 us per decision), and the
pod's upstream state (the `Upstreams` registry the daemon keeps: its
`after_failure` for a DecideRetry that names an upstream, `admit`, and
`record` for a reported success). "servicer" rows time what a call costs
the daemon outside gRPC: parse the request bytes, then the RPC method itself
(its boundary, the conversion, the decision, the reply), and serialize the
reply. The gap between the two is conversion and protobuf
work, which no core change can remove.

The "+upstream" rows rotate through the benchmark's upstream names under
the bench policy (bench/policy.yaml), which keeps every breaker closed and
every retry granted, as in `make bench`; the registry reads the monotonic
clock, as in the daemon.

Each row is the best of 5 repeats, each long enough (>= 0.2 s) to swamp
timer resolution; best-of is the usual choice for micro-benchmarks, as the
slower repeats measure the machine's noise, not the code.

Usage: python -m bench.core [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import timeit
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import grpc

from squawk.daemon.config import load_policy
from squawk.daemon.server.rpc.decisions import MAX_ENTRIES
from squawk.daemon.server.rpc.servicer import PolicyServicer
from squawk.daemon.server.tracking.registry import Upstreams
from squawk.policy import Failure, Outcome, classify, decide
from squawk.v1 import policy_pb2 as pb
from squawk.wire import attempt_state, failure

from .corpus import corpus
from .targets import POLICY
from .workloads import (
    OUTCOMES_PER_REPORT,
    UPSTREAMS,
    admit_request,
    classify_request,
    envelope_request,
    report_request,
    transient_request,
)

__all__ = ["CoreResult", "measure"]

BATCH = 100
T = TypeVar("T")


@dataclass(frozen=True)
class CoreResult:
    layer: str
    case: str
    us_per_decision: float


def _clock() -> float:
    return 1_700_000_000.0


def _best_us(fn: Callable[[], object], per_call: int = 1, min_time_s: float = 0.2) -> float:
    timer = timeit.Timer(fn)
    number, took = timer.autorange()
    number = max(1, int(number * min_time_s / max(took, 1e-9)))
    return min(timer.repeat(repeat=5, number=number)) / number / per_call * 1e6


class _Context:
    """What a servicer method reads of its gRPC context on its success path:
    the time left, none here (no deadline)."""

    def time_remaining(self) -> float | None:
        return None


CONTEXT = cast("grpc.aio.ServicerContext[Any, Any]", _Context())


def _cycle(items: Iterable[T]) -> Callable[[], T]:
    """The items in turn, one per call: a row's calls spread over its upstreams."""
    return itertools.cycle(list(items)).__next__


def _finish(awaitable: Awaitable[T]) -> T:
    """Run a servicer method that awaits nothing on its success path (Classify,
    DecideRetry, Admit, ReportOutcome) to its end in one step: an event loop's scheduling would
    cost more than the call."""
    call = cast(Coroutine[Any, Any, T], awaitable)  # an async def's call is a coroutine
    try:
        call.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    call.close()
    raise RuntimeError("the servicer method awaited something")


def _cases() -> list[tuple[str, str, Callable[[], object], int]]:
    # Without the environment, which may override the profile.
    policy = load_policy(str(POLICY), environ={})
    profile = policy.profile("")
    rng = random.Random(1)
    limit = policy.max_body_bytes
    cls = failure(classify_request())
    plain = Failure("Amadeus API error 400: INVALID CITY CODE: PARIS")
    transient, envelope = attempt_state(transient_request()), attempt_state(envelope_request())
    # No spans: the daemon without a tracer provider, as the untraced rows run it.
    servicer = PolicyServicer(policy, clock=_clock, rng=random.Random(1))
    upstreams = Upstreams(policy)
    upstream = _cycle(UPSTREAMS)
    transient_decision = decide(transient, profile, _clock, rng, limit)
    failed = Outcome(success=False, http_status=503)
    succeeded = Outcome(success=True, http_status=200)
    wire = {
        "classify": classify_request().SerializeToString(),
        "transient": transient_request().SerializeToString(),
        "envelope": envelope_request().SerializeToString(),
    }
    stateful = _cycle(transient_request(u).SerializeToString() for u in UPSTREAMS)
    # Twice as many distinct requests as the daemon keeps answers for, in
    # turn: every one is decided afresh (the cost of a request not seen before).
    unseen = _cycle(
        pb.DecideRetryRequest(
            attempt=1, http_status=503, capability=f"capability-{i}"
        ).SerializeToString()
        for i in range(2 * MAX_ENTRIES)
    )
    # The distinct rows' requests (corpus.py), in turn: varied as executors'
    # are, each decided afresh.
    distinct = _cycle(corpus())
    admits = _cycle(admit_request(u).SerializeToString() for u in UPSTREAMS)
    reports = _cycle(report_request(i).SerializeToString() for i in range(len(UPSTREAMS)))
    batch = pb.DecideRetryBatchRequest(
        requests=[transient_request() if i % 2 == 0 else envelope_request() for i in range(BATCH)]
    ).SerializeToString()
    loop = asyncio.new_event_loop()

    def batch_call() -> bytes:
        request = pb.DecideRetryBatchRequest.FromString(batch)
        # The context is only touched on error, which this batch has none of.
        reply = loop.run_until_complete(servicer.DecideRetryBatch(request, CONTEXT))
        return reply.SerializeToString()

    return [
        ("core", "Classify, no secret in the text", lambda: classify(plain, profile, _clock), 1),
        ("core", "Classify (bench request)", lambda: classify(cls, profile, _clock), 1),
        (
            "core",
            "DecideRetry transient",
            lambda: decide(transient, profile, _clock, rng, limit),
            1,
        ),
        ("core", "DecideRetry envelope", lambda: decide(envelope, profile, _clock, rng, limit), 1),
        # The state's share of a DecideRetry +upstream, on top of decide() above.
        # Not named "DecideRetry...": the core goal is decide()'s alone.
        (
            "core",
            "Upstreams.after_failure, RETRY kept",
            lambda: upstreams.after_failure(
                profile, upstream(), failed, transient_decision, transient.deadline
            ),
            1,
        ),
        ("core", "Upstreams.admit, admitted", lambda: upstreams.admit(profile, upstream()), 1),
        (
            "core",
            "Upstreams.record, a success",
            lambda: upstreams.record(profile, upstream(), succeeded),
            1,
        ),
        (
            "servicer",
            "Classify (bench request)",
            lambda: _finish(
                servicer.Classify(pb.ClassifyRequest.FromString(wire["classify"]), CONTEXT)
            ).SerializeToString(),
            1,
        ),
        (
            "servicer",
            "DecideRetry transient",
            lambda: _finish(
                servicer.DecideRetry(pb.DecideRetryRequest.FromString(wire["transient"]), CONTEXT)
            ).SerializeToString(),
            1,
        ),
        (
            "servicer",
            "DecideRetry envelope",
            lambda: _finish(
                servicer.DecideRetry(pb.DecideRetryRequest.FromString(wire["envelope"]), CONTEXT)
            ).SerializeToString(),
            1,
        ),
        (
            "servicer",
            "DecideRetry, a request not seen before",
            lambda: _finish(
                servicer.DecideRetry(pb.DecideRetryRequest.FromString(unseen()), CONTEXT)
            ).SerializeToString(),
            1,
        ),
        (
            "servicer",
            "DecideRetry distinct (the corpus)",
            lambda: _finish(
                servicer.DecideRetry(pb.DecideRetryRequest.FromString(distinct()), CONTEXT)
            ).SerializeToString(),
            1,
        ),
        ("servicer", f"DecideRetryBatch x{BATCH}, per decision", batch_call, BATCH),
        (
            "servicer",
            "DecideRetry transient +upstream",
            lambda: _finish(
                servicer.DecideRetry(pb.DecideRetryRequest.FromString(stateful()), CONTEXT)
            ).SerializeToString(),
            1,
        ),
        (
            "servicer",
            "Admit +upstream",
            lambda: _finish(
                servicer.Admit(pb.AdmitRequest.FromString(admits()), CONTEXT)
            ).SerializeToString(),
            1,
        ),
        (
            "servicer",
            f"ReportOutcome x{OUTCOMES_PER_REPORT}, per outcome",
            lambda: _finish(
                servicer.ReportOutcome(
                    pb.ReportOutcomeRequest.FromString(reports()),
                    CONTEXT,
                )
            ).SerializeToString(),
            OUTCOMES_PER_REPORT,
        ),
    ]


def measure(min_time_s: float = 0.2) -> list[CoreResult]:
    return [
        CoreResult(layer, case, round(_best_us(fn, per_call, min_time_s), 2))
        for layer, case, fn, per_call in _cases()
    ]


def render(results: list[CoreResult]) -> str:
    lines = [f"{'layer':<9} {'case':<38} {'us/call':>11}"]
    lines += [f"{r.layer:<9} {r.case:<38} {r.us_per_decision:>11.2f}" for r in results]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds per repeat")
    args = parser.parse_args()
    results = measure(args.min_time)
    print(render(results))
    if args.json:
        doc: list[dict[str, Any]] = [asdict(r) for r in results]
        args.json.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
