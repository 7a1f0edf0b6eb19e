"""`squawk explain ID`: why a step was refused (ExplainDecision).

The id is the decision_id a refused Admit or a FAIL from DecideRetry
carried (a runner's failure names it). It prints the decision, the
upstream's state when it was made and the upstream's events before it:

    decision 3fa2c1-17: Admit refused at 2026-12-07T10:55:03.120Z
    upstream: default payments
    reason: CIRCUIT_OPEN
      The circuit breaker for payments is open ...
    state then: breaker OPEN, pace none
    events before it:
      2026-12-07T10:55:01.123Z #12 breaker default payments CLOSED -> OPEN ...
"""

from __future__ import annotations

import argparse
from typing import TextIO

from squawk.policy import redact
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

from .dial import open_channel
from .event_list import event_line, when

__all__ = ["explain", "explanation_text"]


def explanation_text(r: pb.ExplainDecisionResponse) -> str:
    """The answer as `squawk explain` prints it."""
    verb = "refused" if r.rpc == "Admit" else "answered FAIL"
    pace = pb.PaceSource.Name(r.pace_source).removeprefix("PACE_SOURCE_").lower()
    if r.rate:
        pace += f" {r.rate:.3g}/s"
    breaker = pb.BreakerState.Name(r.breaker_state).removeprefix("BREAKER_STATE_")
    lines = [
        f"decision {r.decision_id}: {r.rpc} {verb} at {when(r.time)}",
        # A name is caller data: escaped, it cannot forge a line.
        f"upstream: {r.profile} {redact(repr(r.upstream)[1:-1])}",
        f"reason: {pb.Reason.Name(r.reason).removeprefix('REASON_')}",
        f"  {r.explanation}",
        f"state then: breaker {breaker}, pace {pace}",
        "events before it:" if r.events else "events before it: none kept",
        *(f"  {event_line(e)}" for e in r.events),
    ]
    return "\n".join(lines)


def explain(args: argparse.Namespace, out: TextIO) -> int:
    with open_channel(args) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)
        reply = stub.ExplainDecision(
            pb.ExplainDecisionRequest(decision_id=args.decision_id), timeout=10
        )
    out.write(explanation_text(reply) + "\n")
    return 0
