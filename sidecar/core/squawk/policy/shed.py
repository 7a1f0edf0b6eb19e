"""Why the pacer shed a call (UPSTREAM_SATURATED), and the sentence that says so.

The pacer refuses a call for one of six causes (`ShedCause`); `Shed`
carries the numbers that decided it, and `explain` renders them for
AdmitResponse.explanation. A refusal once said "cannot start before the
step's deadline" whatever refused it, and a caller refused by the queue's
1 s limit raised a 60 s deadline for nothing: the sentence names the limit
that was passed and the pace that made the wait, so the fix it suggests is
the right one.

The template is fixed: numbers and the words below, never caller text, so
it needs no redaction and stays short (MAX_EXPLANATION_CHARS).
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from .timing import shown_seconds as _duration
from .types import PaceSource

__all__ = ["MAX_EXPLANATION_CHARS", "Shed", "ShedCause", "WaitCause", "explain"]

# AdmitResponse.explanation's bound; the longest template is well under it.
MAX_EXPLANATION_CHARS = 512


class ShedCause(enum.Enum):
    """The limit a refused call would have passed."""

    # Its start is past the longest wait the queue grants (max_queue_delay).
    QUEUE = 1
    # ... past the short queue's limit, on while the pod sheds a sustained
    # overload (see squawk.policy.short_queue).
    SHORT_QUEUE = 2
    # ... within the queue's limit, but past the step's deadline.
    DEADLINE = 3
    # The concurrency limit is full: no start at all until a call ends.
    IN_FLIGHT = 4
    # The declared cap on calls in flight (rate_limit.max_in_flight) is full.
    CAP = 5
    # The call's fairness key asks more than its share of the pace while the
    # pace binds, and started its share's worth already, or would queue
    # (Shed.limit: the share, calls/s; Shed.rate: the pace).
    SHARE = 6


class WaitCause(enum.Enum):
    """What made the wait: the later of the pacer's three starts."""

    # The calls/s pace (Shed.rate).
    RATE = 1
    # The token units/s pace (Shed.token_rate), for the call's cost.
    TOKENS = 2
    # A hold: the upstream's quota has nothing left; nothing starts before
    # it ends.
    HOLD = 3


class Shed(NamedTuple):
    cause: ShedCause
    # Seconds the call would have waited; 0 for IN_FLIGHT.
    wait: float
    # The limit passed: seconds (QUEUE, SHORT_QUEUE: the queue's limit;
    # DEADLINE: the time left before it), or calls (IN_FLIGHT: the limit).
    limit: float
    # The pace in force (this pod's share of it): calls/s and token units/s,
    # 0 = none, and where it comes from.
    rate: float = 0.0
    token_rate: float = 0.0
    source: PaceSource = PaceSource.NONE
    waited_for: WaitCause = WaitCause.RATE
    # QUEUE and SHORT_QUEUE: the step's time left when the start is past it
    # too (seconds); None when it is not, or no deadline was given.
    deadline: float | None = None


_SOURCES = {
    PaceSource.POLICY: "declared in the policy",
    PaceSource.HEADERS: "read from the upstream's rate-limit headers",
    PaceSource.LEARNED: "learned from the upstream's throttling",
}


def explain(shed: Shed) -> str:
    """One sentence naming the limit `shed` passed and what made the wait."""
    if shed.cause is ShedCause.IN_FLIGHT:
        return (
            f"The upstream's concurrency limit of {_number(shed.limit)} calls in flight "
            "(learned as its latency rose) is full."
        )
    if shed.cause is ShedCause.CAP:
        return (
            f"The upstream's cap of {_number(shed.limit)} calls in flight "
            "(rate_limit.max_in_flight) is full."
        )
    if shed.cause is ShedCause.SHARE:
        source = _SOURCES.get(shed.source)
        pace = f"{_number(shed.rate)}/s" + (f" ({source})" if source else "")
        return (
            f"The call's fairness key asks more than its share of the pace of {pace}: "
            f"it starts at most {_number(shed.limit)}/s and does not queue "
            "ahead of keys asking less."
        )
    waited = f"The call would wait {_duration(shed.wait)} {_waited_for(shed)}"
    if shed.cause is ShedCause.DEADLINE:
        return f"{waited}, past the step's deadline {_duration(shed.limit)} away."
    if shed.cause is ShedCause.SHORT_QUEUE:
        limit = (
            f"past the short queue's limit of {_duration(shed.limit)} "
            "(the pod is shedding a sustained overload)"
        )
    else:
        limit = f"past the queue's limit of {_duration(shed.limit)} (rate_limit.max_queue_delay)"
    if shed.deadline is not None:
        limit += f" and the step's deadline {_duration(shed.deadline)} away"
    return f"{waited}, {limit}."


def _waited_for(shed: Shed) -> str:
    if shed.waited_for is WaitCause.HOLD:
        return "for the upstream's hold to end (its quota spent)"
    if shed.waited_for is WaitCause.TOKENS:
        pace = f"the token pace of {_number(shed.token_rate)} units/s"
    else:
        pace = f"the pace of {_number(shed.rate)}/s"
    source = _SOURCES.get(shed.source)
    return f"for {pace} ({source})" if source else f"for {pace}"


def _number(value: float) -> str:
    """A rate or a count: whole from 100 up, else three significant digits."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"
