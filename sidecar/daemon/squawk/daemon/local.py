"""Answers from the core in this process, as a daemon just started on the
same policy gives them: what `squawk classify` and `squawk decide` print
without --target.

The servicer keeps no synchronous twin of its RPCs for this: the CLI calls
the core and the wire conversions itself, as the servicer does. A named
upstream has no state yet in a new process, so the failure asked about is
its first (the pod's registry records it as DecideRetry would).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from squawk.policy import Policy, classify, decide
from squawk.v1 import policy_pb2 as pb
from squawk.wire import (
    attempt_state,
    classification_message,
    decision_message,
    failed_attempt,
    failure,
)

from .server.tracking.registry import Upstreams

__all__ = ["classify_locally", "decide_locally"]


def classify_locally(
    policy: Policy, request: pb.ClassifyRequest, clock: Callable[[], float] = time.time
) -> pb.ClassifyResponse:
    profile = policy.profile(request.profile)
    return classification_message(classify(failure(request), profile, clock))


def decide_locally(
    policy: Policy,
    request: pb.DecideRetryRequest,
    clock: Callable[[], float] = time.time,
    rng: random.Random | None = None,
) -> pb.DecideRetryResponse:
    profile = policy.profile(request.profile)
    rng = rng or random.Random()
    state = attempt_state(request)
    decision = decide(state, profile, clock, rng, policy.max_body_bytes)
    if request.upstream:
        decision = Upstreams(policy).after_failure(
            profile,
            request.upstream,
            failed_attempt(state, decision, clock),
            decision,
            state.deadline,
        )
    return decision_message(decision)
