"""The pacer's values: its config (the policy's `rate_limit:`), what it
answers (Pace, PaceSnapshot) and what it reads of a finished call
(PaceSample). The rules are the pacer's (squawk.policy.pacer)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import NamedTuple

from .capped import MAX_IN_FLIGHT
from .limits import (
    MAX_BURST,
    MAX_POLICY_DURATION,
    MAX_RATE,
    MAX_TOKEN_RATE,
    check_count,
    check_number,
    check_positive,
)
from .ratelimit import RateLimitHint
from .shed import Shed
from .timing import seconds
from .types import Criticality, PaceSource, PolicyInputError

__all__ = [
    "LEASE",
    "MIN_POLICY_RATE",
    "Pace",
    "PaceSample",
    "PaceSnapshot",
    "RateLimitConfig",
]

# The least rate and token rate a policy may declare: one a day. A slot of
# 1 / rate must stay a time the clock and a Duration can hold.
MIN_POLICY_RATE = 1 / 86_400
# How long the permits after the first of a multi-permit grant stay valid.
LEASE = timedelta(milliseconds=200)


def _check_duration(name: str, value: timedelta) -> None:
    check_positive(name, value)
    if value > MAX_POLICY_DURATION:
        raise PolicyInputError(name, f"must be at most 7 days, got {value.total_seconds():g}s")


def _check_rate(name: str, value: float, high: float) -> None:
    check_number(name, value, high)
    if value < MIN_POLICY_RATE:
        raise PolicyInputError(name, f"must be at least one a day (1/86400), got {value}")


@dataclass(frozen=True, slots=True)
class RateLimitConfig:
    """The policy's `rate_limit:` for a profile or an `upstreams:` entry."""

    # Declared calls/s; None = not declared.
    rate: float | None = None
    # Calls that may start together at the declared rate.
    burst: int = 1
    # Declared token units/s (Admit's cost); None = none.
    token_rate: float | None = None
    # Token units that may start together; 0 = one second of token_rate.
    token_burst: float = 0.0
    # Learn a CUBIC rate from throttling when nothing else paces.
    learn: bool = True
    # A learned or header pace switches off after this long without throttling.
    quiet: timedelta = timedelta(seconds=30)
    # The longest paced wait ever granted (the deadline may cut it shorter).
    max_queue_delay: timedelta = timedelta(seconds=1)
    # Learn an AIMD concurrency limit for an upstream that slows down.
    concurrency: bool = True
    # The most calls in flight the pod may have out to the upstream, as its
    # provider allows; None = no cap (squawk.policy.capped).
    max_in_flight: int | None = None
    # The criticality of a call whose Admit sends none (a batch profile's
    # SHEDDABLE, an interactive upstream's CRITICAL_PLUS).
    criticality: Criticality = Criticality.CRITICAL
    # Derived once: pace() runs on every Admit.
    _policy: bool = field(init=False, repr=False, compare=False)
    _quiet_s: float = field(init=False, repr=False, compare=False)
    _max_wait_s: float = field(init=False, repr=False, compare=False)
    _tokens: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Refuse a value out of its bounds (PolicyInputError names the field)."""
        if self.rate is not None:
            _check_rate("rate", self.rate, MAX_RATE)
        check_count("burst", self.burst, high=MAX_BURST)
        if self.max_in_flight is not None:
            check_count("max_in_flight", self.max_in_flight, high=MAX_IN_FLIGHT)
        if self.token_rate is not None:
            _check_rate("token_rate", self.token_rate, MAX_TOKEN_RATE)
        check_number("token_burst", self.token_burst, MAX_TOKEN_RATE, zero=True)
        _check_duration("quiet", self.quiet)
        _check_duration("max_queue_delay", self.max_queue_delay)
        tokens = self.token_burst or (self.token_rate or 0.0)
        object.__setattr__(self, "_policy", self.rate is not None or self.token_rate is not None)
        object.__setattr__(self, "_quiet_s", seconds(self.quiet))
        object.__setattr__(self, "_max_wait_s", seconds(self.max_queue_delay))
        object.__setattr__(self, "_tokens", tokens)


class Pace(NamedTuple):
    allowed: bool
    # Allowed: when to start (zero = now); refused: zero.
    wait: timedelta
    # Refused: jittered time until a new call could start without a long wait.
    retry_after: timedelta | None
    # Allowed: how many calls this grant starts (>1 only when nothing paces).
    permits: int
    # Refused: which limit refused it, with its numbers (squawk.policy.shed).
    shed: Shed | None = None


class PaceSnapshot(NamedTuple):
    source: PaceSource
    # Calls/s in force, 0 = none.
    rate: float
    # Token units/s in force, 0 = none.
    token_rate: float
    # The wait a call admitted now would get.
    queue_delay: timedelta
    # 0 = none.
    concurrency_limit: int
    in_flight: int


class PaceSample(NamedTuple):
    """One finished call, as the pacer reads it."""

    # outcome.is_throttled.
    throttled: bool
    success: bool
    # Its verdict is SUCCESS or FAILURE, not IGNORED.
    counted: bool
    latency: timedelta | None = None
    # Real cost; 0 = unknown.
    cost: float = 0.0
    # The cost Admit was given; 0 = unknown.
    estimated: float = 0.0
    hint: RateLimitHint | None = None
    retry_after: timedelta | None = None
    # When the pod admitted the call (the live admission the outcome named);
    # None when it named none: the concurrency limit does not read it.
    admitted_at: float | None = None
    # How long before `now` the response came (seconds): its headers are
    # read as of then.
    age: float = 0.0
    # The upstream answered it and no quota refused it: a success, or a
    # failure with a status that is not a quota's throttle (a 500, a 529
    # overloaded_error). What the learned pace reads as served.
    passed: bool = False
