"""The pace an upstream's own rate-limit headers announce, and holds.

squawk.policy.ratelimit reads the headers into a RateLimitHint; this
machine turns each reading into a rate, a burst and a hold, and keeps them
for `quiet`. docs/upstreams.md §Pacing (item 2) tells the rules; the code
says how each bound is kept; `hold_at_most` shortens a hold when a reload
lowers `max_cool_down`.

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
    "BOOST",
    "BOOST_EVERY",
    "HEADER_HEADROOM",
    "HEADER_MEMORY",
    "MAX_BOOST",
    "MAX_HOLD",
    "MAX_HOLD_S",
    "MIN_HEADER_RATE",
    "HeaderQuota",
    "bounded_seconds",
    "hold_at_most",
    "read",
]

# The floor of a header pace: one call an hour would still be a pace, a
# lower one is a header's noise.
MIN_HEADER_RATE = 1 / 3600
# How long a refilling quota's reading bounds its rate (see read).
HEADER_MEMORY = 1.0
# Outcomes over headers: a pace whose quota stays at least half full rises
# by BOOST each BOOST_EVERY (up to MAX_BOOST times what its readings
# prove), one whose quota is nearly spent (LOW of it left) falls back by as
# much, before the upstream has to refuse a call to say so.
BOOST = 1.25
BOOST_EVERY = 0.5
LOW = 0.1
COARSE = 0.1
# A quota read lower than when the pace rose by more than this share of it
# is draining; by less, it is the count's noise (whole calls, calls in
# flight), which must not hold the pace down.
DRAIN = 0.1
SETTLE_DOWN = 1.1
MAX_BOOST = 4.0
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
    # The moment before which nothing starts (a quota with nothing left).
    hold_until: float = -math.inf
    # A refilling request quota's readings: the largest least refill rate
    # read in the half of HEADER_MEMORY that started at `bound_at`, and in
    # the half before it; the pace is the larger, or what outcomes lifted
    # it to (see _unused), when it rose and the share left then.
    bound: float = 0.0
    bound_before: float = 0.0
    bound_at: float = -math.inf
    lifted: float = 0.0
    boosted_at: float = -math.inf
    # The share of the quota left when the pace last rose, and the least
    # read since.
    level: float = 0.0
    lowest: float = 1.0
    # The end of the hold the last spent reading set: a reading with calls
    # left again ends it.
    spent_until: float = -math.inf
    # Until when the headers are not believed: a throttle came with a
    # reading that said the quota was at least half unused.
    doubted_until: float = -math.inf


def read(
    quota: HeaderQuota,
    hint: RateLimitHint,
    now: float,
    quiet: float,
    max_hold: float,
    *,
    binding: bool = False,
    throttled: bool = False,
) -> HeaderQuota:
    """`quota` after one reading of the headers at `now`; `quiet`: how long
    it holds (seconds), `max_hold`: the longest hold (the upstream's
    max_cool_down, at most MAX_HOLD); `binding`: calls wait for the pace's
    slots (a quota left unused then says the pace is too low); `throttled`:
    the reading came with a throttle."""
    calls = _quota_rate(hint.requests)
    tokens = _quota_rate(hint.tokens)
    if throttled and (
        (calls is not None and calls.unused)
        or (calls is None and tokens is not None and tokens.unused)
    ):
        # The upstream refused a call while its headers said the quota
        # was at least half unused: they do not describe the limit that
        # throttles (a lie, or another limit, as GitHub's secondary ones),
        # and outcomes, not them, pace the calls for `quiet`.
        quota = quota._replace(doubted_until=now + quiet)
    if calls is not None and calls.level >= 0.0:
        # The least share left read while the pace binds, over at least
        # BOOST_EVERY: a quota left unused while nothing waits says nothing
        # of the pace.
        if binding:
            quota = quota._replace(lowest=min(quota.lowest, calls.level))
        else:
            quota = quota._replace(lowest=calls.level, boosted_at=now)
    if calls is not None and calls.unused:
        if binding and calls.coarse:
            # A reset written finely proves the rate: only a coarse one's
            # pace is corrected up by a quota left unused.
            quota = _unused(quota, now, quiet, calls.level, calls.window)
        if not calls.rate:
            return quota  # a refilling quota at least half full: no bound
    if tokens is not None and tokens.unused and not tokens.rate:
        tokens = None
    if calls is None and tokens is None:
        return quota
    hold_s = min(max(calls.hold if calls else 0.0, tokens.hold if tokens else 0.0), max_hold)
    hold_until, spent_until = quota.hold_until, quota.spent_until
    if hold_s:
        hold_until, spent_until = max(hold_until, now + hold_s), now + hold_s
    elif hold_until == spent_until > now:
        # Calls left again (a window that started over, a reset read
        # rounded up): the quota's own hold ends.
        hold_until = spent_until = now
    bound, before, bound_at, lifted = 0.0, 0.0, now, 0.0
    if calls is not None:
        # A refilling quota's reading bounds its rate from below (see
        # _quota_rate), a window's reads the pace that spends what is left
        # by its reset; the pace is the largest of the last half to whole
        # HEADER_MEMORY, which nears the true rate as the readings'
        # rounding differs, masks a reading that lies low, and forgets it
        # all soon after the upstream's rate drops. Outcomes lift it.
        bound, before, bound_at = _bounds(quota, now, calls.rate)
        lifted = quota.lifted
        if calls.low and now - quota.boosted_at >= BOOST_EVERY:
            # Nearly spent: the pace sends more than the quota allows.
            lifted, quota = lifted / SETTLE_DOWN, quota._replace(boosted_at=now)
    rate = max(bound, before, lifted)
    token_rate = tokens.rate if tokens else 0.0
    if tokens is not None and hint.tokens is not None and hint.tokens.refills:
        recent = now - (quota.until - quiet) < HEADER_MEMORY
        token_rate = max(token_rate, quota.token_rate) if recent else token_rate
    return HeaderQuota(
        min(rate, MAX_RATE),
        token_rate,
        calls.burst if calls else 1.0,
        max(now + quiet, hold_until if hold_s else -math.inf),
        hold_until,
        bound,
        before,
        bound_at,
        lifted,
        quota.boosted_at,
        quota.level,
        quota.lowest,
        spent_until,
        quota.doubted_until,
    )


def _bounds(quota: HeaderQuota, now: float, reading: float) -> tuple[float, float, float]:
    """(bound, bound_before, bound_at) after one reading of a least refill
    rate at `now`: the largest of each half of HEADER_MEMORY, so that the
    two in force span the last half to whole of it."""
    half = HEADER_MEMORY / 2
    if now - quota.bound_at < half:
        return max(quota.bound, reading), quota.bound_before, quota.bound_at
    if now - quota.bound_at < 2 * half:
        return reading, quota.bound, quota.bound_at + half
    return reading, 0.0, now


def _unused(
    quota: HeaderQuota, now: float, quiet: float, level: float, window: float
) -> HeaderQuota:
    """`quota` after a reading of a request quota at least half left
    (`level` of it) while its pace is in force. When it never fell under
    half since the pace last rose, and is no lower than then, the pace
    leaves capacity unused (the least refill rate a bucket's readings can
    prove is below the true one; a reset that is not the window's says
    little): it rises by BOOST each BOOST_EVERY, up to MAX_BOOST times what
    the readings prove, and holds on. "No lower" is within DRAIN: a reading
    a call or two under the last one is noise. A window spent within itself and full
    again at its reset (the least is read over a whole `window`), or a
    quota draining, does not rise."""
    if now >= quota.until or quota.bound <= 0.0:
        return quota
    if now - quota.boosted_at < max(BOOST_EVERY, window):
        return quota
    if level < quota.level - DRAIN or quota.lowest < 0.5:
        return quota._replace(level=level, lowest=level, boosted_at=now)
    proven = max(quota.bound, quota.bound_before)
    lifted = min(quota.rate * BOOST, MAX_BOOST * proven, MAX_RATE)
    return quota._replace(
        rate=lifted, lifted=lifted, boosted_at=now, until=now + quiet, level=level, lowest=level
    )


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


class _Reading(NamedTuple):
    rate: float  # units/s, 0 = only the hold (or, unused, nothing known)
    hold: float  # seconds nothing may start, 0 = none
    burst: float  # calls that may start together
    # The share of the quota left (-1: no limit to share), and whether it
    # is nearly spent (LOW of it left, or less).
    level: float = -1.0
    low: bool = False
    # The quota's window (seconds, 0 = none named): how long its readings
    # take to say it went unused.
    window: float = 0.0
    # Its reset is written coarsely for its length (a grain of a tenth of
    # it or more): the rate it proves may be far below the true one.
    coarse: bool = False

    @property
    def unused(self) -> bool:
        """At least half the quota is left: not what limits the calls now."""
        return self.level >= 0.5


def _quota_rate(quota: Quota | None) -> _Reading | None:
    """What a quota allows: its pace in units/s, how long nothing may start
    (0 = no hold), and how many may start together (what is left, at
    HEADER_HEADROOM, 1..MAX_BURST); _UNUSED for a refilling quota at least
    half full; None when it says nothing usable."""
    if quota is None:
        return None
    remaining, limit = quota.remaining, quota.limit
    if remaining is None or not 0.0 <= remaining < math.inf:
        return None
    burst = float(min(max(math.floor(HEADER_HEADROOM * remaining), 1), MAX_BURST))
    reset = bounded_seconds(quota.reset)
    # The true reset may be up to a grain later than written (a whole
    # second, for Anthropic's times and the IETF fields): a rate is read
    # from the latest it can be, so that it is never more than the true one.
    latest = reset + min(quota.grain, 1.0)
    coarse = quota.grain >= COARSE * latest
    window = bounded_seconds(quota.window)
    known = limit is not None and remaining <= limit < math.inf
    if quota.refills and known and latest:
        assert limit is not None
        # Every API counts `remaining` in whole calls or tokens, rounded
        # down: the bucket refills at least (used - 1) / latest and at most
        # used / (reset - grain). The least is the pace (and nearly full, it
        # says nothing), so the rounding can never pace above the refill rate.
        used = limit - remaining
        if used <= max(1.0, limit / 2):
            # At least half full: it is not what limits the calls now, and
            # with few calls used the rounding makes the least refill rate
            # far too low ((2 - 1) / reset for a bucket refilling 2 / reset).
            level = remaining / limit if limit else 1.0
            return _Reading(0.0, 0.0, burst, level, coarse=coarse)
        refill = (used - 1.0) / latest
        rate = min(max(refill, MIN_HEADER_RATE), MAX_TOKEN_RATE)
        hold_s = min(1.0 / refill, MAX_HOLD_S) if remaining < 1.0 else 0.0
        low = remaining < max(1.0, LOW * limit)
        return _Reading(rate, hold_s, burst, remaining / limit, low, coarse=coarse)
    rates = []
    if reset:
        rates.append(remaining / latest)
    if known and window:
        assert limit is not None
        rates.append(limit / window)
    if not rates:
        return None
    # Nothing left and no limit to refill to: only the hold, no pace after it.
    best = max(rates)
    rate = min(max(HEADER_HEADROOM * best, MIN_HEADER_RATE), MAX_TOKEN_RATE) if best else 0.0
    hold_s = min(reset, MAX_HOLD_S) if remaining < 1.0 else 0.0
    # What may start together: what is left beyond what the pace itself
    # sends until the reset (a window of 20 a second read as 19/s and a
    # burst of 19 would send 38 in it), at least one.
    burst = max(1.0, min(burst, math.floor(remaining - rate * latest)))
    if not known:
        return _Reading(rate, hold_s, burst)
    assert limit is not None
    level = remaining / limit if limit else 1.0
    low = remaining < max(1.0, LOW * limit)
    return _Reading(rate, hold_s, burst, level, low, window, coarse)
