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
"""

from __future__ import annotations

import math
from datetime import timedelta

from .headers import MAX_RETRY_AFTER
from .timing import seconds
from .types import PolicyInputError

__all__ = [
    "DEFAULT_MAX_COOL_DOWN",
    "MAX_COOL_DOWN",
    "MIN_COOL_DOWN",
    "NOT_COOLING",
    "check_max_cool_down",
    "cool_down",
    "held",
    "shared_wait",
]

# The end of a cool-down that never began.
NOT_COOLING = -math.inf
DEFAULT_MAX_COOL_DOWN = timedelta(minutes=5)
# max_cool_down's bounds: under a second rounds away at the millisecond the
# fleet stores; over a day is more than any hint the header parser keeps.
MIN_COOL_DOWN = timedelta(seconds=1)
MAX_COOL_DOWN = MAX_RETRY_AFTER


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
