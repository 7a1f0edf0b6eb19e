"""The pace an upstream's own rate-limit headers announce, and holds.

squawk.policy.ratelimit reads the headers into a RateLimitHint; this
machine turns each reading into a rate, a burst and a hold, and keeps them
for `quiet`. docs/upstreams.md §Pacing (item 2) tells the rules; the code
says how each bound is kept. A hold is also where the pacer takes over a
cool-down (squawk.policy.upstream), so `hold` and `hold_at_most` live here.

Every value is bounded: a negative, NaN, huge or far-away header is
ignored or capped, every rate has a floor and every hold ends within
MAX_HOLD, so nothing an upstream sends stops the pod for longer.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import NamedTuple

from .limits import MAX_BURST, MAX_RATE, MAX_TOKEN_RATE
from .ratelimit import Quota, RateLimitHint
from .timing import seconds

__all__ = [
    "HEADER_HEADROOM",
    "HEADER_MEMORY",
    "MAX_HOLD",
    "MAX_HOLD_S",
    "MIN_HEADER_RATE",
    "HeaderQuota",
    "bounded_seconds",
    "hold",
    "hold_at_most",
    "read",
]

# The floor of a header pace: one call an hour would still be a pace, a
# lower one is a header's noise.
MIN_HEADER_RATE = 1 / 3600
# How long a refilling quota's reading bounds its rate (see read).
HEADER_MEMORY = 1.0
# The share of a window's `remaining / reset` (and of `remaining` as a
# burst) the pacer uses: the headers were written before the calls now in
# flight were counted.
HEADER_HEADROOM = 0.95
# The longest any hold lasts, whatever the upstream sends.
MAX_HOLD = timedelta(minutes=5)
MAX_HOLD_S = MAX_HOLD.total_seconds()


class HeaderQuota(NamedTuple):
    # The rates the last hint allowed (calls/s, token units/s; 0 = none).
    rate: float = 0.0
    token_rate: float = 0.0
    # The calls that may start together: what the quota has left.
    burst: float = 1.0
    # Until when the rates hold.
    until: float = -math.inf
    # The moment before which nothing starts (a quota with nothing left,
    # or a cool-down handed over).
    hold_until: float = -math.inf


def read(
    quota: HeaderQuota, hint: RateLimitHint, now: float, quiet: float, max_hold: float
) -> HeaderQuota:
    """`quota` after one reading of the headers at `now`; `quiet`: how long
    it holds (seconds), `max_hold`: the longest hold (the upstream's
    max_cool_down, at most MAX_HOLD)."""
    calls = _quota_rate(hint.requests)
    tokens = _quota_rate(hint.tokens)
    if calls is None and tokens is None:
        return quota
    hold_s = min(max(calls[1] if calls else 0.0, tokens[1] if tokens else 0.0), max_hold)
    # Every reading of a refilling quota bounds its rate from below (see
    # _quota_rate), and the bounds of the last HEADER_MEMORY hold together:
    # the pace is the largest of them, which nears the true rate from below
    # as the readings' rounding differs, and forgets it soon after the
    # upstream's rate drops.
    recent = now - (quota.until - quiet) < HEADER_MEMORY
    if calls is not None and recent and hint.requests is not None and hint.requests.refills:
        calls = (max(calls[0], quota.rate), *calls[1:])
    if tokens is not None and recent and hint.tokens is not None and hint.tokens.refills:
        tokens = (max(tokens[0], quota.token_rate), *tokens[1:])
    hold_until = max(quota.hold_until, now + hold_s) if hold_s else quota.hold_until
    return HeaderQuota(
        min(calls[0], MAX_RATE) if calls else 0.0,
        tokens[0] if tokens else 0.0,
        calls[2] if calls else 1.0,
        max(now + quiet, hold_until if hold_s else -math.inf),
        hold_until,
    )


def hold(quota: HeaderQuota, until: float) -> HeaderQuota:
    """`quota` holding every start until `until`."""
    if until <= quota.hold_until:
        return quota
    return quota._replace(hold_until=until)


def hold_at_most(quota: HeaderQuota, latest: float) -> HeaderQuota:
    """`quota` with no hold past `latest`."""
    if quota.hold_until <= latest:
        return quota
    return quota._replace(hold_until=latest)


def bounded_seconds(value: timedelta | None) -> float:
    """A header's duration in seconds, 0 for none: the parser keeps them
    within a day; a value past it is capped, never trusted."""
    if value is None:
        return 0.0
    return min(max(seconds(value), 0.0), 86_400.0)


def _quota_rate(quota: Quota | None) -> tuple[float, float, float] | None:
    """(rate, hold, burst) a quota allows: its pace in units/s, how long
    nothing may start (0 = no hold), and how many may start together (what
    is left, at HEADER_HEADROOM, 1..MAX_BURST); None when it says nothing
    usable."""
    if quota is None:
        return None
    remaining, limit = quota.remaining, quota.limit
    if remaining is None or not 0.0 <= remaining < math.inf:
        return None
    burst = float(min(max(math.floor(HEADER_HEADROOM * remaining), 1), MAX_BURST))
    reset = bounded_seconds(quota.reset)
    window = bounded_seconds(quota.window)
    known = limit is not None and remaining <= limit < math.inf
    if quota.refills and known and reset:
        assert limit is not None
        # Every API counts `remaining` in whole calls or tokens, rounded
        # down: the bucket refills at least (used - 1) / reset and at most
        # used / reset. The least is the pace (and nearly full, it says
        # nothing), so the rounding can never pace above the refill rate.
        used = limit - remaining
        if used <= max(1.0, limit / 2):
            # At least half full: it is not what limits the calls now, and
            # with few calls used the rounding makes the least refill rate
            # far too low ((2 - 1) / reset for a bucket refilling 2 / reset).
            return None
        refill = (used - 1.0) / reset
        rate = min(max(refill, MIN_HEADER_RATE), MAX_TOKEN_RATE)
        hold_s = min(1.0 / refill, MAX_HOLD_S) if remaining < 1.0 else 0.0
        return rate, hold_s, burst
    rates = []
    if reset:
        rates.append(remaining / reset)
    if known and window:
        assert limit is not None
        rates.append(limit / window)
    if not rates:
        return None
    # Nothing left and no limit to refill to: only the hold, no pace after it.
    best = max(rates)
    rate = min(max(HEADER_HEADROOM * best, MIN_HEADER_RATE), MAX_TOKEN_RATE) if best else 0.0
    hold_s = min(reset, MAX_HOLD_S) if remaining < 1.0 else 0.0
    return rate, hold_s, burst
