"""The decision a client hands to its caller, from the daemon or the fallback."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta

from squawk.policy import Action, PolicyInputError, Profile, Reason, builtin_policy, decide
from squawk.policy import Decision as CoreDecision
from squawk.policy.env import apply_env
from squawk.v1 import policy_pb2 as pb
from squawk.wire import attempt_state, classification_message

from ._admission import decision_id
from ._errors import SquawkInputError

__all__ = ["Decision", "fallback_decision", "fallback_profile", "from_message"]

log = logging.getLogger("squawk_client")


def fallback_profile(environ: Mapping[str, str]) -> Profile:
    """The built-in "default" profile with the pod's SQUAWK_STEP_RETRY_* overrides,
    so the fallback waits as the daemon in the same pod would."""
    policy, warnings = apply_env(builtin_policy(), environ)
    for warning in warnings:
        log.warning("%s", warning)
    return policy.profile("default")


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    delay: timedelta
    reason: Reason
    explanation: str
    consumes_attempt: bool
    # The failure's classification under the same profile (Retry-After included).
    classification: pb.ClassifyResponse
    # True when the daemon could not be reached and the local policy answered.
    fallback: bool = False
    # Set when the pod's upstream state ended the attempt (CIRCUIT_OPEN,
    # RETRY_BUDGET_EXHAUSTED): how long until the upstream admits calls again.
    retry_after: timedelta | None = None
    # The daemon's id for a refusal it kept (a FAIL on a named upstream, an
    # Admit refused): `squawk explain ID` says why; "" when it kept none.
    decision_id: str = ""


def from_message(message: pb.DecideRetryResponse) -> Decision:
    return Decision(
        action=Action(message.action),
        delay=message.delay.ToTimedelta(),
        reason=Reason(message.reason),
        explanation=message.explanation,
        consumes_attempt=message.consumes_attempt,
        classification=message.classification,
        retry_after=message.retry_after.ToTimedelta() if message.HasField("retry_after") else None,
        decision_id=decision_id(message.decision_id),
    )


def _from_core(decision: CoreDecision) -> Decision:
    return Decision(
        action=decision.action,
        delay=decision.delay,
        reason=decision.reason,
        explanation=decision.explanation,
        consumes_attempt=decision.consumes_attempt,
        classification=classification_message(decision.classification),
        fallback=True,
    )


def fallback_decision(
    request: pb.DecideRetryRequest,
    profile: Profile,
    clock: Callable[[], float] = time.time,
) -> Decision:
    """Answer locally; raises SquawkInputError for input the daemon would refuse.

    Corrections are disabled: without the daemon there is no analyzer, and a
    non-transient 4xx must never be resent unchanged. `clock` (Unix seconds)
    is read only for a Retry-After date; the conformance runner fixes it.
    """
    try:
        state = replace(attempt_state(request), correction_available=False)
        return _from_core(decide(state, profile, clock))
    except PolicyInputError as bad:
        raise SquawkInputError(bad.field, str(bad)) from None
