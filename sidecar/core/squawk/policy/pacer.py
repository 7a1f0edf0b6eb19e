"""The pacer: when a call to one upstream may start, for the whole pod.

(Skeleton: the API is fixed; every call starts at once until the rules land.)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta
from typing import NamedTuple

from .limits import MAX_POLICY_DURATION, check_count, check_number, check_positive
from .ratelimit import RateLimitHint
from .types import PaceSource, PolicyInputError

__all__ = [
    "LEASE",
    "MAX_BURST",
    "MAX_PERMITS",
    "MAX_RATE",
    "MAX_TOKEN_RATE",
    "Pace",
    "PaceSample",
    "PaceSnapshot",
    "Pacer",
    "RateLimitConfig",
    "observe",
    "pace",
    "pacer_is_idle",
    "pacer_snapshot",
]

MAX_RATE = 1e6
MAX_BURST = 1_000_000
MAX_TOKEN_RATE = 1e9
MAX_PERMITS = 100
# How long the permits after the first of a multi-permit grant stay valid.
LEASE = timedelta(milliseconds=200)
_ZERO = timedelta(0)


@dataclass(frozen=True, slots=True)
class RateLimitConfig:
    """The policy's `rate_limit:` for a profile or an `upstreams:` entry."""

    rate: float | None = None
    burst: int = 1
    token_rate: float | None = None
    token_burst: float = 0.0
    learn: bool = True
    quiet: timedelta = timedelta(seconds=30)
    max_queue_delay: timedelta = timedelta(seconds=2)
    concurrency: bool = True

    def __post_init__(self) -> None:
        if self.rate is not None:
            check_number("rate", self.rate, MAX_RATE)
        check_count("burst", self.burst, high=MAX_BURST)
        if self.token_rate is not None:
            check_number("token_rate", self.token_rate, MAX_TOKEN_RATE)
        check_number("token_burst", self.token_burst, MAX_TOKEN_RATE, zero=True)
        check_positive("quiet", self.quiet)
        if self.quiet > MAX_POLICY_DURATION:
            raise PolicyInputError("quiet", "must be at most 7 days")
        check_positive("max_queue_delay", self.max_queue_delay)
        if self.max_queue_delay > MAX_POLICY_DURATION:
            raise PolicyInputError("max_queue_delay", "must be at most 7 days")


@dataclass(frozen=True, slots=True)
class Pacer:
    """One upstream's pace; Pacer() is "nothing known"."""


class Pace(NamedTuple):
    allowed: bool
    # Allowed: when to start (zero = now); refused: zero.
    wait: timedelta
    # Refused: jittered time until a new call could start without a long wait.
    retry_after: timedelta | None
    # Allowed: how many calls this grant starts (>1 only when nothing paces).
    permits: int


class PaceSnapshot(NamedTuple):
    source: PaceSource
    rate: float
    token_rate: float
    queue_delay: timedelta
    concurrency_limit: int
    in_flight: int


class PaceSample(NamedTuple):
    """One finished call, as the pacer reads it."""

    throttled: bool
    success: bool
    counted: bool
    latency: timedelta | None = None
    cost: float = 0.0
    estimated: float = 0.0
    hint: RateLimitHint | None = None
    retry_after: timedelta | None = None


_NOW = Pace(True, _ZERO, None, 1)


def pace(
    pacer: Pacer,
    config: RateLimitConfig,
    now: float,
    *,
    cost: float = 0.0,
    deadline: timedelta | None = None,
    permits: int = 1,
    rng: random.Random | None = None,
) -> tuple[Pacer, Pace]:
    """(pacer, pace): when one call (or `permits` calls) may start."""
    return pacer, _NOW if permits == 1 else Pace(True, _ZERO, None, permits)


def observe(pacer: Pacer, config: RateLimitConfig, now: float, sample: PaceSample) -> Pacer:
    """The pacer after one finished call."""
    return pacer


def pacer_snapshot(pacer: Pacer, config: RateLimitConfig, now: float) -> PaceSnapshot:
    """What the pacer says at `now`, for display; it changes nothing."""
    return PaceSnapshot(PaceSource.NONE, 0.0, 0.0, _ZERO, 0, 0)


def pacer_is_idle(pacer: Pacer, config: RateLimitConfig, now: float) -> bool:
    """Whether a fresh Pacer() would behave exactly as `pacer` from `now` on."""
    return True
