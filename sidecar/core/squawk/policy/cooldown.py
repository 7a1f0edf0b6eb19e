"""The shared cool-down: one upstream's Retry-After, honoured by the whole pod.

When a counted failure (see squawk.policy.outcome: 429, 503, ...) carries a
wait hint -- Retry-After or grpc-retry-pushback-ms, already parsed by the
caller -- the upstream cools down until `now + wait`: admit() refuses calls
with UPSTREAM_COOLING_DOWN and guard_retry() stretches a shorter retry
delay to the time left. The server asked one executor to wait; every other
executor in the pod would hit the same limit.

- Overlapping hints: the later end wins, so a short hint never cuts a
  longer cool-down short.
- A shared hint is capped at the profile's `max_cool_down` (default 5
  minutes, at most MAX_RETRY_AFTER, a day): one answer -- a misconfigured
  server, a hostile one, a typo of 86400 -- cools every executor of the
  pod and, with the Redis store, of the fleet, and nothing but time ends a
  cool-down. Five minutes covers the per-minute rate limits and short
  maintenance windows that Retry-After usually announces; past that the
  breaker, which keeps counting, is the better judge. The executor that
  got the hint still waits its whole Retry-After: decide() reads the hint,
  not this cap.
- `share_retry_after: false` (per profile or upstream; default true) turns
  it off: the hint then reaches only the executor that got it, through
  decide().
- A hint on a success or on an uncounted failure (another 4xx) is not
  shared: it speaks for that caller's request, not for the upstream.

Every wait a refusal answers -- a cool-down's, and an open breaker's, in
admit() and guard_retry(), for the pod and the fleet -- goes through
spread(): executors refused together would otherwise all come back at the
same millisecond, and be refused together again.
"""

from __future__ import annotations

import math
import random
from datetime import timedelta

from .limits import MAX_RETRY_AFTER
from .timing import seconds
from .types import PolicyInputError

__all__ = [
    "COOL_DOWN_SPREAD_FRACTION",
    "DEFAULT_MAX_COOL_DOWN",
    "MAX_COOL_DOWN",
    "MAX_SPREAD",
    "MIN_COOL_DOWN",
    "NOT_COOLING",
    "SPREAD_FRACTION",
    "check_max_cool_down",
    "cool_down",
    "held",
    "shared_wait",
    "spread",
    "within",
]

# The end of a cool-down that never began.
NOT_COOLING = -math.inf
DEFAULT_MAX_COOL_DOWN = timedelta(minutes=5)
# max_cool_down's bounds: under a second rounds away at the millisecond the
# fleet stores; over a day is more than any hint the header parser keeps.
MIN_COOL_DOWN = timedelta(seconds=1)
MAX_COOL_DOWN = MAX_RETRY_AFTER
# A refusal's jitter (see spread()): up to a fifth of the wait, at most 5 s;
# a cool-down's, up to the wait itself.
SPREAD_FRACTION = 0.2
COOL_DOWN_SPREAD_FRACTION = 1.0
MAX_SPREAD = timedelta(seconds=5)
_ONE_MS = timedelta(milliseconds=1)


def check_max_cool_down(value: timedelta) -> None:
    if not MIN_COOL_DOWN <= value <= MAX_COOL_DOWN:
        raise PolicyInputError(
            "max_cool_down", f"must be between 1s and 24h, got {value.total_seconds():g}s"
        )


def shared_wait(wait: timedelta | None, share: bool, cap: timedelta) -> timedelta | None:
    """How long a counted failure's hint cools the upstream for everyone:
    None when it is not shared. The one rule, for the pod and the fleet."""
    if not share or wait is None:
        return None
    return min(wait, cap, MAX_RETRY_AFTER)


def cool_down(
    until: float, now: float, wait: timedelta | None, share: bool, cap: timedelta
) -> float:
    """The cool-down's end after a counted failure with hint `wait` at `now`."""
    shared = shared_wait(wait, share, cap)
    if shared is None:
        return until
    return max(until, now + seconds(shared))


def held(until: float, now: float, cap: timedelta) -> float:
    """A running cool-down's end under a (new) cap: a reload that lowers
    max_cool_down shortens the cool-downs already running to it."""
    return min(until, now + seconds(min(cap, MAX_RETRY_AFTER)))


def spread(
    left: timedelta, rng: random.Random | None, fraction: float = SPREAD_FRACTION
) -> timedelta:
    """A refusal's wait: `left` plus U(0, min(left x `fraction`,
    MAX_SPREAD)), in whole milliseconds; `left` itself when `rng` is None
    (a display, or a caller that wants the exact time).

    The jitter only adds: a wait shorter than `left` would come back while
    the refusing rule still refuses. The fraction is gRPC's connection
    backoff's (grpc/grpc doc/connection-backoff.md, JITTER = 0.2; grpc-go
    backoff.DefaultConfig), the same idea as AWS's "Exponential Backoff and
    Jitter" and Polly's jitter: spread the callers a limit refused together.
    A cool-down (COOL_DOWN_SPREAD_FRACTION) spreads them over up to its own
    length again: it holds back a whole pod's demand for that long (at 10x
    overload, hundreds of calls a second), and a fifth of a second's worth
    coming back at once was a herd the daemon could not answer in time,
    while callers that come back over a second still keep a full upstream
    busy. A breaker's half-open round admits only its probes anyway.
    The cap keeps a long wait close to what the rule said (a 5-minute
    cool-down ends within 5 s of its time, not a minute after), and the
    answer never passes MAX_RETRY_AFTER (a day), well within a protobuf
    Duration.
    """
    if rng is None or not left:
        return left
    most = min(left // _ONE_MS * fraction, MAX_SPREAD // _ONE_MS)
    extra = math.floor(rng.uniform(0, most))
    return min(left + extra * _ONE_MS, max(left, MAX_RETRY_AFTER))


def within(wait: timedelta, left: timedelta, deadline: timedelta | None) -> timedelta:
    """A jittered `wait` cut to the step's `deadline`, never below `left`
    (the time the rule still refuses): the jitter must not fail a step
    that could wait the refusal out (as guard_retry does for a RETRY)."""
    if deadline is None or deadline < left:
        return wait
    return min(wait, deadline)
