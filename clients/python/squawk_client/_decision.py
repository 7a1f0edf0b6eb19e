"""The decision a client hands to its caller, from the daemon or the fallback."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import timedelta

from sidecar.convert import attempt_state
from sidecar.policy import Action, Reason, builtin_profile, decide
from sidecar.policy import Decision as CoreDecision
from sidecar.proto import policy_pb2 as pb

__all__ = ["Decision", "fallback_decision", "from_message"]

# The fallback is the "default" profile with corrections disabled: without
# the daemon there is no analyzer, and a 4xx must never be resent unchanged.
_FALLBACK_PROFILE = builtin_profile("default")


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    delay: timedelta
    reason: Reason
    explanation: str
    consumes_attempt: bool
    # True when the daemon could not be reached and the local policy answered.
    fallback: bool = False


def from_message(message: pb.DecideRetryResponse) -> Decision:
    return Decision(
        action=Action(message.action),
        delay=message.delay.ToTimedelta(),
        reason=Reason(message.reason),
        explanation=message.explanation,
        consumes_attempt=message.consumes_attempt,
    )


def _from_core(decision: CoreDecision) -> Decision:
    return Decision(
        action=decision.action,
        delay=decision.delay,
        reason=decision.reason,
        explanation=decision.explanation,
        consumes_attempt=decision.consumes_attempt,
        fallback=True,
    )


def fallback_decision(request: pb.DecideRetryRequest) -> Decision:
    """Answer locally; raises PolicyInputError for input the daemon would refuse."""
    state = replace(attempt_state(request), correction_available=False)
    return _from_core(decide(state, _FALLBACK_PROFILE, time.time))
