"""The shared cool-down: one upstream's Retry-After, honoured by the whole pod.

When a counted failure (see squawk.policy.outcome: 429, 503, ...) carries a
wait hint -- Retry-After or grpc-retry-pushback-ms, already parsed by the
caller -- the upstream cools down until `now + wait`: admit() refuses calls
with UPSTREAM_COOLING_DOWN and guard_retry() stretches a shorter retry
delay to the time left. The server asked one executor to wait; every other
executor in the pod would hit the same limit.

- Overlapping hints: the later end wins, so a short hint never cuts a
  longer cool-down short.
- A hint is capped at MAX_RETRY_AFTER (a day), the same cap the header
  parser applies, so one upstream's answer cannot lock it for years.
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

__all__ = ["NOT_COOLING", "cool_down"]

# The end of a cool-down that never began.
NOT_COOLING = -math.inf


def cool_down(until: float, now: float, wait: timedelta | None, share: bool) -> float:
    """The cool-down's end after a counted failure with hint `wait` at `now`."""
    if not share or wait is None:
        return until
    return max(until, now + seconds(min(wait, MAX_RETRY_AFTER)))
