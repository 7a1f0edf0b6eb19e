"""A declared cap on the calls in flight to one upstream: `max_in_flight`.

Providers that allow a handful of concurrent requests per key (z.ai, Kimi,
ElevenLabs: 1 to 15) refuse the next one outright; the pod must never have
more out than that. The policy declares the cap (`rate_limit:
{max_in_flight: K}`); every admission while it is declared takes a slot,
and the outcome of that admission frees it, however long the call runs (a
stream holds its slot until its outcome). A call whose outcome never comes
frees its slot after one to two epochs of FLIGHT_EPOCH, as the learned
concurrency limit's calls do (squawk.policy.flight).

Only an outcome that names a live admission of the pod reaches this
machine (the daemon ties each outcome to its admission), and of those only
one admitted since the cap was last declared frees a slot: the calls
already out when it was declared were never counted. So the count is
never below the admitted calls still out, whatever outcomes are reported,
true or made up. The learned concurrency limit still applies under the
cap (squawk.policy.pacer refuses at the lower of the two).

A full cap refuses (REASON_IN_FLIGHT_CAP) with a short wait before asking
again: the runners wait it out within the step's deadline, as a
semaphore's waiters do, instead of failing the step.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .aimd import MAX_LIMIT
from .flight import one_fewer, roll

__all__ = [
    "MAX_IN_FLIGHT",
    "NOT_DECLARED",
    "Capped",
    "declared",
    "finished",
    "in_flight",
    "refused",
    "started",
]

# The most calls in flight a policy may declare for one upstream: the
# learned limit's most, whose calls the daemon's admissions always hold.
MAX_IN_FLIGHT = MAX_LIMIT
# The latency mean's weight for one call.
_LATENCY_WEIGHT = 0.2
# A refused caller asks again after this share of the calls' mean length,
# within 5 ms and a second: a slot that frees is taken within about 5 % of a
# call's length (a caller asks about twenty times per call it waits for).
_POLL_SHARE = 0.05
_SOONEST = 0.005
_LATEST = 1.0
# ... unless the refusals come faster than POLLS x sqrt(cap) per call's
# length, or MAX_ASKS a second: then many callers wait, a slot that frees is
# taken soon by one of them anyway, and each waits longer between asks in
# proportion, so the daemon answers about that many asks however many wait
# (twenty per call's length for a cap of 1, about 77 for a cap of 15; at
# most 100 a second, a slot taken within about 10 ms of freeing).
_POLLS = 20.0
_MAX_ASKS = 100.0
# The refusals' rate is an average over about this long (seconds).
_REFUSALS_S = 1.0


class Capped(NamedTuple):
    # The calls admitted and not reported in this epoch and the one before,
    # and the epoch's start.
    flight: int = 0
    flight_old: int = 0
    epoch_at: float = -math.inf
    # Since when the cap is declared (inf: not declared): a call admitted
    # before then was not counted, and its outcome frees no slot.
    on_at: float = math.inf
    # The mean latency of the calls it counted (seconds, 0 = none yet).
    latency: float = 0.0
    # The rate of its refusals (per second, an average over _REFUSALS_S),
    # and when it last moved.
    refusals: float = 0.0
    refused_at: float = -math.inf


NOT_DECLARED = Capped()


def declared(capped: Capped, now: float) -> Capped:
    """`capped` with the cap declared at `now` if it was not before."""
    if capped.on_at != math.inf:
        return capped
    return Capped(0, 0, now, now, capped.latency, capped.refusals, capped.refused_at)


def in_flight(capped: Capped, now: float) -> tuple[int, int, float]:
    """(old, current, epoch start) at `now` (squawk.policy.flight)."""
    return roll(capped.flight, capped.flight_old, capped.epoch_at, now)


def started(capped: Capped, now: float) -> Capped:
    """`capped` (declared) after a call admitted at `now` took a slot."""
    old, current, epoch = in_flight(capped, now)
    return capped._replace(flight=current + 1, flight_old=old, epoch_at=epoch)


def finished(capped: Capped, now: float, admitted_at: float, latency: float | None) -> Capped:
    """`capped` after the outcome at `now` of a call the pod admitted at
    `admitted_at`; `latency`: the call's (seconds), None when it sent none."""
    if admitted_at < capped.on_at:
        return capped
    old, current, epoch = in_flight(capped, now)
    old, current = one_fewer(old, current)
    mean = capped.latency
    if latency is not None and latency >= 0.0:
        mean = latency if not mean else mean + _LATENCY_WEIGHT * (latency - mean)
    return capped._replace(flight=current, flight_old=old, epoch_at=epoch, latency=mean)


def refused(capped: Capped, now: float, cap: int) -> tuple[Capped, float]:
    """(capped, seconds): after a full cap refused a caller at `now`, and how
    long that caller waits before asking again."""
    decay = math.exp(-max(now - capped.refused_at, 0.0) / _REFUSALS_S)
    rate = capped.refusals * decay + 1.0 / _REFUSALS_S
    wait = _POLL_SHARE * capped.latency
    if capped.latency > 0.0:
        wanted = min(_POLLS * math.sqrt(cap) / capped.latency, _MAX_ASKS)
        wait *= max(1.0, rate / wanted)
    return capped._replace(refusals=rate, refused_at=now), min(max(wait, _SOONEST), _LATEST)
