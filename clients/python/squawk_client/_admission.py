"""Admit's request and answer, bounded on the way out and on the way in.

What the client sends stays within AdmitRequest's bounds (its proto
comments), and an answer from the daemon (or anything at its address) is
read safely: a negative wait is none, a grant starts at least its own call,
and a reason or breaker state this client does not know reads as a grant's
or a closed breaker's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from squawk.policy import BreakerState, Criticality, Fairness, Reason
from squawk.policy.limits import MAX_ADMIT_DEADLINE, MAX_PERMITS
from squawk.policy.shed import MAX_EXPLANATION_CHARS
from squawk.policy.text import shown_text
from squawk.v1 import policy_pb2 as pb

__all__ = ["LEASED", "OPEN", "Admission", "admission", "admit_request"]


@dataclass(frozen=True, slots=True)
class Admission:
    """The pod's answer to "may I call this upstream now?"."""

    allowed: bool
    # ADMITTED, or why not: CIRCUIT_OPEN, UPSTREAM_COOLING_DOWN,
    # UPSTREAM_SATURATED (the pace cannot start the call in time, or its
    # concurrency limit is full; `explanation` says which), IN_FLIGHT_CAP
    # (the declared cap on calls in flight is full: ask again after
    # retry_after).
    reason: Reason
    # When refused: how long until a call could be admitted.
    retry_after: timedelta
    breaker_state: BreakerState
    # A half-open probe: its outcome decides whether the breaker closes.
    probe: bool
    # True when the daemon could not be asked and the client let the call
    # through (admission fails open: the pod's state is only in the daemon).
    fallback: bool = False
    # When allowed: wait this long, then dispatch (the pacer's start; zero = now).
    wait: timedelta = timedelta(0)
    # When allowed: how many dispatches this answer starts (0 when refused).
    permits: int = 1
    # When permits > 1: how long the permits after the first stay valid, from
    # the answer; None otherwise.
    lease: timedelta | None = None
    # UPSTREAM_SATURATED: the daemon's sentence naming the limit that refused
    # the call and its number; "" from a daemon that sends none.
    explanation: str = ""
    # When allowed: the admission's id, which the call's outcome names so
    # that it counts for the learned concurrency limit (every permit of a
    # lease shares it); "" when the daemon gives none.
    admission_id: str = ""
    # When permits > 1 under a pace: the spare permits start this far
    # apart after the first (see squawk_client._leases); zero otherwise.
    spacing: timedelta = timedelta(0)
    # When allowed: the call holds a slot of the upstream's declared cap on
    # calls in flight; its outcome is reported at once.
    holds_slot: bool = False
    # When refused by the daemon: its id for the refusal, which `squawk
    # explain ID` (ExplainDecision) explains; "" when it kept none.
    decision_id: str = ""


OPEN = Admission(True, Reason.ADMITTED, timedelta(0), BreakerState.CLOSED, False, fallback=True)
# A dispatch started on a spare permit of an earlier multi-permit grant.
LEASED = Admission(True, Reason.ADMITTED, timedelta(0), BreakerState.CLOSED, False)

# AdmitRequest's bounds are the core's (see its proto comments). A step
# deadline longer than a day is sent as a day: no paced wait comes near it,
# so the answer is the same.


def admit_request(
    upstream: str,
    capability: str,
    profile: str,
    deadline: timedelta | None,
    cost: float,
    permits: int,
    criticality: Criticality | None = None,
    fairness: Fairness | None = None,
) -> pb.AdmitRequest:
    request = pb.AdmitRequest(
        upstream=upstream,
        capability=capability,
        profile=profile,
        cost=cost,
        permits=min(max(permits, 1), MAX_PERMITS),
        criticality=0 if criticality is None else int(criticality),  # type: ignore[arg-type]
    )
    if fairness is not None:
        request.fairness_key, request.fairness_weight = fairness
    if deadline is not None:
        request.deadline.FromTimedelta(min(max(deadline, timedelta(0)), MAX_ADMIT_DEADLINE))
    return request


def _breaker_state(value: int) -> BreakerState:
    # An answer that leaves the state unset (or names one this client does
    # not know, from a newer daemon) says nothing is open.
    try:
        return BreakerState(value)
    except ValueError:
        return BreakerState.CLOSED


def _admit_reason(value: int, allowed: bool) -> Reason:
    # A reason left unset or unknown to this client: a grant admits, and a
    # refusal is waited out for its retry_after, as a cool-down is.
    try:
        return Reason(value)
    except ValueError:
        return Reason.ADMITTED if allowed else Reason.UPSTREAM_COOLING_DOWN


def admission(reply: pb.AdmitResponse) -> Admission:
    # The daemon bounds these; a zero-permit grant still starts this one call.
    allowed = reply.allowed
    permits = min(max(reply.permits, 1), MAX_PERMITS) if allowed else 0
    return Admission(
        allowed=allowed,
        reason=_admit_reason(reply.reason, allowed),
        retry_after=reply.retry_after.ToTimedelta(),
        breaker_state=_breaker_state(reply.breaker_state),
        probe=reply.probe,
        wait=max(reply.wait.ToTimedelta(), timedelta(0)) if allowed else timedelta(0),
        permits=permits,
        lease=reply.lease.ToTimedelta() if permits > 1 and reply.HasField("lease") else None,
        # Whatever answers at the daemon's address: bounded and redacted
        # before it reaches an error message.
        explanation=shown_text(reply.explanation, MAX_EXPLANATION_CHARS) if not allowed else "",
        admission_id=_admission_id(reply.admission_id) if allowed else "",
        spacing=_spacing(reply) if permits > 1 else timedelta(0),
        holds_slot=allowed and reply.holds_slot,
        decision_id="" if allowed else decision_id(reply.decision_id),
    )


# The longest spacing honoured: a lease is at most a second (the client's
# MAX_LEASE), so anything longer starts no spare permit within it.
_MAX_SPACING = timedelta(seconds=1)


def _spacing(reply: pb.AdmitResponse) -> timedelta:
    return min(max(reply.spacing.ToTimedelta(), timedelta(0)), _MAX_SPACING)


def decision_id(text: str) -> str:
    """A decision_id as the daemon gives it (a short printable token), or ""
    for anything else: an answer is hostile input until bounded."""
    if len(text) <= MAX_DECISION_ID and text.isascii() and text.isprintable():
        return text
    return ""


MAX_DECISION_ID = 64


def _admission_id(text: str) -> str:
    # Sent back as it came, so only in the shape the daemon gives (16
    # lowercase hex digits): anything else would have the report refused.
    if len(text) == _ID_DIGITS and _HEX.issuperset(text):
        return text
    return ""


_ID_DIGITS = 16
_HEX = frozenset("0123456789abcdef")
