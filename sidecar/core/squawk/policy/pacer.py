"""The pacer: when a call to one upstream may start, for the whole pod.

The server keeps one Pacer per (profile, upstream) inside its UpstreamState;
admit() asks `pace()` after the cool-down and the breaker let a call
through, and record_outcome() feeds every finished call to `observe()`.

Where the pace comes from, the first that applies (`PaceSource`):

1. POLICY: the policy's `rate_limit` (rate and burst; token_rate and
   token_burst for an LLM API, whose Admit carries an estimated `cost`).
2. HEADERS: the upstream's own rate-limit headers (squawk.policy.ratelimit
   reads them into a RateLimitHint) on any outcome, successes included.
   The header's family says which kind of quota it is (Quota.refills). A
   bucket that refills (OpenAI, Anthropic: `reset` is when it is full
   again) refills `(limit - remaining) / reset` units a second whatever its
   level; `remaining` is rounded down, so the pace is the least it can be,
   `(limit - remaining - 1) / reset`, the largest such bound read within
   HEADER_MEMORY (a reading at least half full says nothing: it is not what
   limits the calls, and its rounding would pace them far too low), and
   with nothing remaining a start waits for one unit to come back. A
   window that starts over (GitHub, X, the IETF fields) allows
   `remaining / reset` until its reset, or `limit / window` when it names
   its window (the larger), paced at HEADER_HEADROOM of it: the
   headers were written before the calls now in flight were counted. With
   nothing remaining every start waits for the reset. Either may start
   what it has left at once (HEADER_HEADROOM of `remaining`, at least one:
   the burst), so a quota with thousands left never queues a burst of
   calls one slot apart. A hold is at most the upstream's max_cool_down
   (observe's `max_hold`) and never past MAX_HOLD. A header
   pace lapses after `quiet` without fresh headers. A throttle that carries
   its own quota is answered by it, not by the shared cool-down
   (squawk.policy.upstream).
3. LEARNED: a CUBIC rate from throttling, as the AWS SDKs' adaptive retry
   mode learns it (botocore/retries/throttling.py CubicCalculator, BETA 0.7
   and SCALE_CONSTANT 0.4; adaptive.py's RateClocker, 0.5 s buckets
   smoothed 0.8; bucket.py's 0.5/s floor; the new rate capped at twice the
   measured rate). After a cut at W_max, rate(t) = C (t - K)^3 + W_max with
   K = cbrt(W_max (1 - BETA) / C), so it restarts at BETA W_max. Two
   deviations, because one pacer serves the whole pod: it cuts at most once
   per measurement bucket (TCP reacts once per round trip; every 429 of a
   pod cutting the rate would collapse it to the floor in a second), and
   W_max is the measured *success* rate -- what the upstream served, which
   is its capacity while it throttles -- not botocore's send rate capped by
   the current rate, which compounds BETA on every cut. Every outcome moves
   the measurement's clock and a bucket without a success folds in as
   0/s, so an upstream that stops serving decays W_max to the floor within
   a few buckets, as botocore's min(measured, current) would; but buckets
   in which nothing reported are no reading (botocore spreads a bucket's
   count over them), and the calls still out during the cool-down of the
   throttle that armed the pace count in that throttle's bucket. A cut
   reads its bucket before the successes of the same moment have all
   reported: once that bucket is complete, W_max rises to what it served. Nothing ties
   a reported success to an admitted call, so once a bucket of the learned
   pace's own grants is measured (botocore's measured_tx_rate), the
   success rate it reads is at most that: made-up successes cannot lift
   the pace. The first throttle
   after a quiet period only arms it (the shared cool-down answers that
   one); the second within `quiet` cuts, and the pace answers it (no
   second cool-down). A throttle whose Retry-After is
   past squawk.policy.upstream.CLOSED_AFTER (2 s) still cools the pod: the
   upstream is closed, not full. It switches off (NONE) after
   `quiet` without a throttle; botocore's stays on for good.

Beside the rate, for an upstream that slows down rather than rejects, a
concurrency limit (`concurrency: true`), as Netflix concurrency-limits'
AIMDLimit: +1 when a call succeeds with at least half the limit in flight,
x0.9 on a slow call (at most once per bucket), within 2..1000. It is only
switched on by evidence, never limiting a healthy upstream: a call is slow
past twice the baseline latency (a slow mean), and the limit switches on
when the fast mean passes that too -- the upstream's latency itself
doubled -- at 0.9 x what the upstream holds then (Little's law: the rate
served x the latency). It switches off after `quiet` without a slow call.
A full limit refuses (UPSTREAM_SATURATED) with retry_after about the time
a slot frees. In-flight calls are counted while the limit is on (the calls
already out when it switched on report into a count floored at 0), in two
epochs of FLIGHT_EPOCH, so a call whose outcome never comes leaves the
count after at most two epochs. AIMDLimit's drop signal is a timeout; the
outcome says nothing of one, so slowness stands in for it.

Without any of them the pacer does nothing: pace() grants at once, returns
the state it was given, and a busy executor may take up to MAX_PERMITS
permits with one answer (a lease of LEASE; the staleness this allows -- a
breaker that opens, a pace that begins while permits are out -- is at most
one lease).

Starts are spaced by GCRA, the generic cell rate algorithm (ITU-T I.371):
one theoretical arrival time per rate, advanced by 1 / rate per call and
by cost / token_rate per token unit; a call starts at the later of the two
(and of a header hold). It is FIFO by arrival, so executors asking together
are served in turn: fair between them. A grant reserves its slot; a refusal
reserves nothing.

A call is refused (UPSTREAM_SATURATED) rather than queued when its start
would be later than the step's `deadline`, or later than the longest wait
the queue grants: `max_queue_delay`, or, while the short queue is on, a
short one of max(CODEL_TARGET, SHORT_SLOTS slots). The short queue comes
on once every call for CODEL_INTERVAL would have waited past the short
limit (one that waited less starts the interval again), and goes off only
when the queue is found empty. That is CoDel's rule (Nichols & Jacobson,
2012: it drops once the sojourn time stayed above its target for an
interval), with its target counted in slots as well because at 50
calls/s one slot is already 20 ms, and with the hysteresis of Facebook's
"Fail at Scale" ("if the queue has not been empty for the last 100 ms, the
time spent in the queue is limited to 5 ms"): leaving the short queue as
soon as one call fits it would let the backlog form again every interval.
A queue that is merely non-empty below capacity is not shortened. So the
backlog of an overload never delays the calls that arrive after it.
Facebook's adaptive LIFO is not taken: a grant is already a reserved
start, and the short queue bounds what LIFO would skip.
A refusal's retry_after is the time until the queue is short again (at
least CODEL_INTERVAL, so refused callers do not spin), jittered upwards by
cooldown.spread. It names its cause (squawk.policy.shed): the queue's
limit when the start is past it, else the deadline; the full concurrency
limit; and which of the rate, the token rate or a hold made the wait.

Every input is bounded: the config refuses a rate outside
[MIN_POLICY_RATE, 1e6] (one a day), a burst outside 1..1e6, a token rate
outside [MIN_POLICY_RATE, 1e9] (NaN and infinity included) naming the
field, and no start is computed past two weeks from now; header values
that are negative, NaN, huge or far away are ignored or capped, every rate
has a floor and every hold an end, so nothing an upstream sends stops the
pod for more than MAX_HOLD.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import timedelta
from typing import NamedTuple

from .cooldown import spread
from .limits import MAX_PERMITS, MAX_POLICY_DURATION, check_count, check_number, check_positive
from .ratelimit import Quota, RateLimitHint
from .shed import Shed, ShedCause, WaitCause
from .timing import seconds, time_left
from .types import PaceSource, PolicyInputError

__all__ = [
    "BETA",
    "BUCKET",
    "CODEL_INTERVAL",
    "CODEL_TARGET",
    "LEASE",
    "MAX_BURST",
    "MAX_HOLD",
    "MAX_RATE",
    "MAX_TOKEN_RATE",
    "MIN_POLICY_RATE",
    "MIN_RATE",
    "SCALE",
    "SHARED_SOURCES",
    "SHORT_SLOTS",
    "SMOOTHING",
    "Pace",
    "PaceSample",
    "PaceSnapshot",
    "Pacer",
    "RateLimitConfig",
    "hold",
    "hold_at_most",
    "observe",
    "pace",
    "pace_source",
    "pacer_is_idle",
    "pacer_snapshot",
]

MAX_RATE = 1e6
MAX_BURST = 1_000_000
MAX_TOKEN_RATE = 1e9
# The least rate and token rate a policy may declare: one a day. A slot of
# 1 / rate must stay a time the clock and a Duration can hold.
MIN_POLICY_RATE = 1 / 86_400
# How long the permits after the first of a multi-permit grant stay valid.
LEASE = timedelta(milliseconds=200)
# CUBIC, as botocore's CubicCalculator and RateClocker.
BETA = 0.7
SCALE = 0.4
BUCKET = 0.5
SMOOTHING = 0.8
MIN_RATE = 0.5
# The floor of a header pace (one call an hour would still be a pace; a
# lower one is a header's noise) and the longest a quota with nothing
# remaining holds every start (the shared cool-down's default cap).
MIN_HEADER_RATE = 1 / 3600
# How long a header reading's bound on the rate holds (see _read_hint).
HEADER_MEMORY = 1.0
# The share of a window's `remaining / reset` the pacer uses (see the docstring).
HEADER_HEADROOM = 0.95
MAX_HOLD = timedelta(minutes=5)
# The queue (see the module docstring).
CODEL_TARGET = 0.005
CODEL_INTERVAL = 0.1
SHORT_SLOTS = 4
# AIMD, as Netflix concurrency-limits' AIMDLimit: +1 on a success while at
# least half the limit is in flight, x BACKOFF on a slow call, within
# MIN_LIMIT..MAX_LIMIT. A call is slow past SLOW_FACTOR times the baseline
# latency (a slow mean, weight LATENCY_BASE_WEIGHT); the limit switches on
# when the fast mean (weight LATENCY_FAST_WEIGHT) passes that too.
BACKOFF = 0.9
MIN_LIMIT = 2
MAX_LIMIT = 1_000
SLOW_FACTOR = 2.0
# ... and only when it is also this much (seconds) past the baseline: a call
# of microseconds doubles by scheduling noise alone (a healthy loopback
# upstream's 20 us becomes 60 us), and outcomes the clients send in batches
# (up to 50 ms late) keep such calls counted in flight long after they
# ended, so a limit learned from their latency would shed a healthy
# upstream. Netflix's AIMDLimit backs off only at an absolute timeout (5 s
# by default); this floor keeps the relative rule for calls that slow down
# by a measurable amount.
SLOW_MIN = 0.01
LATENCY_FAST_WEIGHT = 0.1
LATENCY_BASE_WEIGHT = 0.01
# Calls admitted and never reported leave the count after one to two epochs.
FLIGHT_EPOCH = 120.0
# A real cost's weight in the running mean that stands in for an unknown one.
_COST_WEIGHT = 0.2
_ZERO = timedelta(0)
_MAX_HOLD_S = MAX_HOLD.total_seconds()
# No start is ever computed later than this past now: past every wait a
# grant may get (max_queue_delay is at most 7 days), so it only refuses, and
# a token burst of 1e9 at one unit a day never overflows a timedelta.
_FAR = 2 * MAX_POLICY_DURATION.total_seconds()


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


class Pacer(NamedTuple):
    """One upstream's pace; Pacer() is "nothing known".

    A NamedTuple, not a frozen dataclass: a paced Admit and every outcome
    build a new one, and a frozen dataclass's __init__ (one
    object.__setattr__ per field) costs ten times as much for its 16 fields.
    """

    # GCRA's theoretical arrival times: calls, and token units.
    tat: float = -math.inf
    token_tat: float = -math.inf
    # CoDel: since when every call has waited past the short limit (+inf
    # once one did not), and whether the short queue is on (until the
    # queue is found empty).
    above_since: float = math.inf
    short_on: bool = False
    # The refused queue's end: when the last refused caller was told to
    # come back; reset whenever the queue is found empty.
    shed_until: float = -math.inf
    # The running mean of real costs, for an Admit that sent none.
    mean_cost: float = 0.0
    # HEADERS: the rates the last hint allowed, until when they hold, and
    # the moment before which nothing starts (a quota with nothing left).
    header_rate: float = 0.0
    header_token_rate: float = 0.0
    # The calls that may start together: what the quota has left.
    header_burst: float = 1.0
    header_until: float = -math.inf
    hold_until: float = -math.inf
    # LEARNED: CUBIC's W_max (0 = never cut), K, the last cut, the last throttle.
    w_max: float = 0.0
    k: float = 0.0
    cut_at: float = -math.inf
    throttled_at: float = -math.inf
    # The success rate, measured in BUCKET-second buckets (botocore's RateClocker).
    bucket_at: float = -math.inf
    bucket_count: int = 0
    measured: float = 0.0
    # Until when outcomes count in the bucket of the throttle that armed
    # the pace (its cool-down; see _cut).
    paused_until: float = -math.inf
    # The rate the learned pace granted, measured the same way (botocore's
    # measured_tx_rate): a success rate above it is made up.
    sent_at: float = -math.inf
    sent_count: int = 0
    sent: float = 0.0
    # CONCURRENCY (AIMD): the limit (0 = never on), the calls admitted and
    # not reported in this epoch and the one before, the epoch's start, the
    # last slow call, the last decrease, and the latency's fast and slow means.
    limit: float = 0.0
    flight: int = 0
    flight_old: int = 0
    epoch_at: float = -math.inf
    slow_at: float = -math.inf
    decreased_at: float = -math.inf
    latency_fast: float = 0.0
    latency_base: float = 0.0


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


_NOW = Pace(True, _ZERO, None, 1)


class _Rates(NamedTuple):
    source: PaceSource
    rate: float  # calls/s, 0 = none
    burst: float  # calls
    token_rate: float  # units/s, 0 = none
    tokens: float  # token burst, units


_NONE = _Rates(PaceSource.NONE, 0.0, 1.0, 0.0, 0.0)


def _limited(pacer: Pacer, config: RateLimitConfig, now: float) -> bool:
    return pacer.limit > 0.0 and now - pacer.slow_at < config._quiet_s


def _flight(pacer: Pacer, now: float) -> tuple[int, int, float]:
    """(old, current, epoch start) at `now`: an epoch over rolls the count."""
    if now - pacer.epoch_at < FLIGHT_EPOCH:
        return pacer.flight_old, pacer.flight, pacer.epoch_at
    if now - pacer.epoch_at < 2 * FLIGHT_EPOCH:
        return pacer.flight, 0, pacer.epoch_at + FLIGHT_EPOCH
    return 0, 0, now


def _learning(pacer: Pacer, config: RateLimitConfig, now: float) -> bool:
    return pacer.w_max > 0.0 and now - pacer.throttled_at < config._quiet_s


def _rates(pacer: Pacer, config: RateLimitConfig, now: float) -> _Rates:
    if config._policy:
        return _Rates(
            PaceSource.POLICY,
            config.rate or 0.0,
            float(config.burst),
            config.token_rate or 0.0,
            config._tokens,
        )
    if now < pacer.header_until:
        tokens = pacer.header_token_rate
        return _Rates(PaceSource.HEADERS, pacer.header_rate, pacer.header_burst, tokens, tokens)
    if _learning(pacer, config, now):
        return _Rates(PaceSource.LEARNED, _cubic(pacer, now), 1.0, 0.0, 0.0)
    return _NONE


# The paces that describe the upstream's whole quota, which the fleet's
# pods divide: declared for it, or read from its headers.
SHARED_SOURCES = (PaceSource.POLICY, PaceSource.HEADERS)


def _shared(rates: _Rates, share: float) -> _Rates:
    """`rates` cut to a pod's `share` of them: the rates and the bursts (a
    burst at least one call; a token burst at least one second's share)."""
    return _Rates(
        rates.source,
        rates.rate * share,
        max(1.0, rates.burst * share),
        rates.token_rate * share,
        rates.tokens * share,
    )


def _cubic(pacer: Pacer, now: float) -> float:
    """CUBIC's rate at `now` (see the module docstring), floored and capped."""
    rate = SCALE * (now - pacer.cut_at - pacer.k) ** 3 + pacer.w_max
    rate = min(rate, 2.0 * _checked(pacer, _served(pacer)), MAX_RATE)
    return max(rate, MIN_RATE)


def _checked(pacer: Pacer, served: float) -> float:
    """`served`, learning, at most the rate the learned pace granted (once
    a whole bucket of its grants was measured): nothing ties a reported
    success to an admitted call, and made-up successes must not lift the
    pace."""
    if pacer.sent <= 0.0:
        return served
    return max(min(served, max(pacer.sent, pacer.sent_count / BUCKET)), MIN_RATE)


def _served(pacer: Pacer) -> float:
    """The success rate: the smoothed one, or the current bucket's so far
    if more (a lower bound of its rate, which sees a change that began
    within the bucket); at least MIN_RATE."""
    return _served_rate(pacer.measured, pacer.bucket_count)


def _served_rate(measured: float, count: int) -> float:
    return max(measured, count / BUCKET, MIN_RATE)


def _start(pacer: Pacer, rates: _Rates, now: float, units: float) -> float:
    """The earliest start GCRA gives a call of `units` token units at `now`."""
    start = max(now, pacer.hold_until)
    if rates.rate:
        start = max(start, pacer.tat - (rates.burst - 1.0) / rates.rate)
    if rates.token_rate and units:
        need = min(units, rates.tokens)
        start = max(start, pacer.token_tat + (need - rates.tokens) / rates.token_rate)
    return min(start, now + _FAR)


def _why(
    pacer: Pacer,
    rates: _Rates,
    now: float,
    units: float,
    wait: float,
    longest: float,
    short_on: bool,
    deadline: timedelta | None,
) -> Shed:
    """What refused a start `wait` seconds away (squawk.policy.shed): the
    queue's limit when the wait passes it (the deadline too, when it does),
    else the deadline; and which of _start's three starts made the wait."""
    left = None if deadline is None else seconds(deadline)
    late = left is not None and wait >= left
    if wait > longest:
        cause = ShedCause.SHORT_QUEUE if short_on else ShedCause.QUEUE
        limit, past = longest, left if late else None
    else:
        assert left is not None  # refused within the queue: the deadline
        cause, limit, past = ShedCause.DEADLINE, left, None
    by = WaitCause.HOLD
    start = pacer.hold_until
    if rates.rate and pacer.tat - (rates.burst - 1.0) / rates.rate > start:
        by, start = WaitCause.RATE, pacer.tat - (rates.burst - 1.0) / rates.rate
    if rates.token_rate and units:
        need = min(units, rates.tokens)
        if pacer.token_tat + (need - rates.tokens) / rates.token_rate > start:
            by = WaitCause.TOKENS
    return Shed(cause, wait, limit, rates.rate, rates.token_rate, rates.source, by, past)


def _slot(rates: _Rates, units: float) -> float:
    slot = 1.0 / rates.rate if rates.rate else 0.0
    if rates.token_rate and units:
        slot = max(slot, units / rates.token_rate)
    return slot


def pace(
    pacer: Pacer,
    config: RateLimitConfig,
    now: float,
    *,
    cost: float = 0.0,
    deadline: timedelta | None = None,
    permits: int = 1,
    rng: random.Random | None = None,
    share: float = 1.0,
) -> tuple[Pacer, Pace]:
    """(pacer, pace): when one call (or `permits` calls) may start.

    `share`: the fraction of a declared or announced rate this pod may use
    (the fleet divides an upstream's rate between its pods,
    squawk.policy.fleet.share); a learned rate is the pod's own already.

    `cost`: the call's estimated token units (0 = unknown: the mean of the
    real costs seen stands in). `deadline`: the time left before the
    step's deadline; None = none. `permits` > 1 is granted (up to
    MAX_PERMITS) only when nothing paces. `rng` jitters a refusal's
    retry_after (None: the exact time). The caller bounds the inputs
    (squawk.policy.upstream.admit checks them).
    """
    if (
        not config._policy
        and now >= pacer.header_until
        and now >= pacer.hold_until
        and not _learning(pacer, config, now)
        and not _limited(pacer, config, now)
    ):
        if permits == 1:
            return pacer, _NOW
        return pacer, Pace(True, _ZERO, None, min(permits, MAX_PERMITS))
    limited = _limited(pacer, config, now)
    old, current, epoch = _flight(pacer, now)
    if limited and old + current >= int(pacer.limit):
        # Full: a slot frees about every latency / limit seconds.
        left = min(max(pacer.latency_fast / pacer.limit, CODEL_INTERVAL), _MAX_HOLD_S)
        full = Shed(ShedCause.IN_FLIGHT, 0.0, float(int(pacer.limit)))
        return pacer, Pace(False, _ZERO, spread(time_left(now + left, now), rng), 0, full)
    rates = _rates(pacer, config, now)
    if share < 1.0 and rates.source in SHARED_SOURCES:
        rates = _shared(rates, share)
    units = cost if cost > 0.0 else pacer.mean_cost
    start = _start(pacer, rates, now, units)
    empty = start <= now
    slot = _slot(rates, units)
    short = min(max(CODEL_TARGET, SHORT_SLOTS * slot), config._max_wait_s)
    wait = time_left(start, now)
    # CoDel: the short queue comes on once every call for an interval
    # would have waited past the short limit, and goes off only when the
    # queue is found empty (see the module docstring).
    if empty:
        above, short_on = math.inf, False
    else:
        above = min(pacer.above_since, now) if seconds(wait) > short else math.inf
        short_on = pacer.short_on or now - above >= CODEL_INTERVAL
    longest = short if short_on else config._max_wait_s
    late = deadline is not None and wait >= deadline
    if wait and (late or seconds(wait) > longest):
        # The refused queue: the refused caller's turn if every caller
        # refused before it came back in order (see the module docstring).
        shed = max(pacer.shed_until, start) + slot
        left = min(max(shed - now, CODEL_INTERVAL), _MAX_HOLD_S)
        why = _why(pacer, rates, now, units, seconds(wait), longest, short_on, deadline)
        refused = Pace(False, _ZERO, spread(time_left(now + left, now), rng), 0, why)
        return pacer._replace(above_since=above, short_on=short_on, shed_until=shed), refused
    tat = max(pacer.tat, start) + 1.0 / rates.rate if rates.rate else pacer.tat
    token_tat = pacer.token_tat
    if rates.token_rate and units:
        token_tat = _token_debt(
            max(token_tat, start) + units / rates.token_rate, start, config, rates
        )
    shed = -math.inf if empty else pacer.shed_until
    sent_at, sent_count, sent = pacer.sent_at, pacer.sent_count, pacer.sent
    if rates.source is PaceSource.LEARNED:
        # RateClocker again, for the grants: fold on entering a new bucket,
        # a stretch without grants (a hold) no reading, as in _measure.
        bucket = math.floor(now / BUCKET) * BUCKET
        sent_count += 1
        if bucket > sent_at:
            if sent_at != -math.inf:
                sent = SMOOTHING * sent_count / BUCKET + (1.0 - SMOOTHING) * sent
                sent_count = 0
            sent_at = bucket
    granted = _replace(
        pacer,
        sent_at=sent_at,
        sent_count=sent_count,
        sent=sent,
        tat=tat,
        token_tat=token_tat,
        above_since=above,
        short_on=short_on,
        shed_until=shed,
        flight_old=old if limited else pacer.flight_old,
        flight=current + 1 if limited else pacer.flight,
        epoch_at=epoch if limited else pacer.epoch_at,
    )
    return granted, Pace(True, wait, None, 1)


def observe(
    pacer: Pacer,
    config: RateLimitConfig,
    now: float,
    sample: PaceSample,
    *,
    max_hold: timedelta = MAX_HOLD,
) -> Pacer:
    """The pacer after one finished call (see the module docstring).

    `max_hold`: the longest a quota with nothing left holds every start
    (the upstream's max_cool_down; at most MAX_HOLD)."""
    changes: dict[str, float] = {}
    if sample.cost > 0.0:
        _correct_cost(pacer, config, now, sample, changes)
    if sample.hint is not None:
        _read_hint(pacer, config, now, sample.hint, changes, seconds(max_hold))
    if config.concurrency and (sample.latency is not None or pacer.limit):
        _aimd(pacer, config, now, sample, changes)
    if config.learn and not config._policy:
        _measure(pacer, now, changes, 1 if sample.success else 0)
        if sample.throttled:
            hold = min(_bounded_seconds(sample.retry_after), seconds(max_hold))
            _cut(pacer, config, now, changes, hold)
    if not changes:
        return pacer
    return _replace(pacer, **changes)


def _aimd(
    pacer: Pacer, config: RateLimitConfig, now: float, sample: PaceSample, changes: dict[str, float]
) -> None:
    limited = _limited(pacer, config, now)
    if limited:
        # One call fewer in flight: the older epoch's first.
        old, current, epoch = _flight(pacer, now)
        if old:
            old -= 1
        else:
            current = max(current - 1, 0)
        changes["flight_old"], changes["flight"], changes["epoch_at"] = old, current, epoch
    if sample.latency is None or not sample.counted or sample.throttled:
        return
    latency = seconds(sample.latency)
    base = pacer.latency_base
    if not base:
        changes["latency_base"] = changes["latency_fast"] = latency
        return
    fast = pacer.latency_fast + LATENCY_FAST_WEIGHT * (latency - pacer.latency_fast)
    changes["latency_fast"] = fast
    changes["latency_base"] = base + LATENCY_BASE_WEIGHT * (latency - base)
    slow = _slower(latency, base)
    if slow:
        changes["slow_at"] = now
    if not limited:
        if slow and _slower(fast, base):
            # Evidence: the mean itself doubled. Start from the calls the
            # upstream holds now (Little's law: rate served x latency), cut once.
            held = _served(pacer) * fast
            changes["limit"] = min(max(BACKOFF * held, MIN_LIMIT), MAX_LIMIT)
            changes["decreased_at"] = now
            changes["flight_old"], changes["flight"], changes["epoch_at"] = 0, 0, now
        return
    if slow:
        if now - pacer.decreased_at >= BUCKET:
            changes["limit"] = max(pacer.limit * BACKOFF, MIN_LIMIT)
            changes["decreased_at"] = now
    elif sample.success and 2 * (changes["flight_old"] + changes["flight"] + 1) >= pacer.limit:
        changes["limit"] = min(pacer.limit + 1.0, MAX_LIMIT)


def _slower(latency: float, base: float) -> bool:
    """Whether `latency` is slow against the baseline `base` (seconds)."""
    return latency > SLOW_FACTOR * base and latency - base > SLOW_MIN


def _correct_cost(
    pacer: Pacer, config: RateLimitConfig, now: float, sample: PaceSample, changes: dict[str, float]
) -> None:
    # Admit charged the estimate (or the mean, when it had none): charge
    # the difference now, so the token rate holds for what was really spent.
    charged = sample.estimated if sample.estimated > 0.0 else pacer.mean_cost
    mean = pacer.mean_cost
    changes["mean_cost"] = sample.cost if not mean else mean + _COST_WEIGHT * (sample.cost - mean)
    rates = _rates(pacer, config, now)
    if not rates.token_rate or pacer.token_tat == -math.inf:
        return
    tat = pacer.token_tat + (sample.cost - charged) / rates.token_rate
    changes["token_tat"] = _token_debt(tat, now, config, rates)


def _token_debt(tat: float, now: float, config: RateLimitConfig, rates: _Rates) -> float:
    # One call (its estimate, or its real cost over it) holds later starts
    # for at most the longest wait plus one burst: a cost of 1e9 against a
    # small token rate must not stop the pod for years.
    return min(tat, now + config._max_wait_s + rates.tokens / rates.token_rate)


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
    reset = _bounded_seconds(quota.reset)
    window = _bounded_seconds(quota.window)
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
        hold = min(1.0 / refill, _MAX_HOLD_S) if remaining < 1.0 else 0.0
        return rate, hold, burst
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
    hold = min(reset, _MAX_HOLD_S) if remaining < 1.0 else 0.0
    return rate, hold, burst


def _bounded_seconds(value: timedelta | None) -> float:
    if value is None:
        return 0.0
    # The parser keeps them within a day; a value past it is capped, never trusted.
    return min(max(seconds(value), 0.0), 86_400.0)


def _read_hint(
    pacer: Pacer,
    config: RateLimitConfig,
    now: float,
    hint: RateLimitHint,
    changes: dict[str, float],
    max_hold: float,
) -> None:
    calls = _quota_rate(hint.requests)
    tokens = _quota_rate(hint.tokens)
    if calls is None and tokens is None:
        return
    hold = min(max(calls[1] if calls else 0.0, tokens[1] if tokens else 0.0), max_hold)
    # Every reading of a refilling quota bounds its rate from below (see
    # _quota_rate), and the bounds of the last HEADER_MEMORY hold together:
    # the pace is the largest of them, which nears the true rate from below
    # as the readings' rounding differs, and forgets it soon after the
    # upstream's rate drops.
    recent = now - (pacer.header_until - config._quiet_s) < HEADER_MEMORY
    if calls is not None and recent and hint.requests is not None and hint.requests.refills:
        calls = (max(calls[0], pacer.header_rate), *calls[1:])
    if tokens is not None and recent and hint.tokens is not None and hint.tokens.refills:
        tokens = (max(tokens[0], pacer.header_token_rate), *tokens[1:])
    changes["header_rate"] = min(calls[0], MAX_RATE) if calls else 0.0
    changes["header_burst"] = calls[2] if calls else 1.0
    changes["header_token_rate"] = tokens[0] if tokens else 0.0
    if hold:
        changes["hold_until"] = max(pacer.hold_until, now + hold)
    changes["header_until"] = max(now + config._quiet_s, changes.get("hold_until", -math.inf))


def _measure(pacer: Pacer, now: float, changes: dict[str, float], add: int) -> None:
    # botocore's RateClocker.record: count, and on entering a new bucket
    # fold the count into the smoothed rate, as a rate over one bucket
    # (botocore: over every bucket since; see the module docstring). Every
    # outcome moves the clock, a failure adding 0: buckets without a success fold
    # in as 0/s, so a closed upstream's rate decays to the floor instead of
    # keeping the last rate it served (botocore gets there by cutting from
    # min(measured, current rate)).
    bucket = math.floor(now / BUCKET) * BUCKET
    if now < pacer.paused_until:
        bucket = min(bucket, pacer.bucket_at)  # see _cut
    count = pacer.bucket_count + add
    if pacer.bucket_at == -math.inf:
        changes["bucket_at"], changes["bucket_count"] = bucket, count
    elif bucket > pacer.bucket_at:
        rate = count / BUCKET
        changes["measured"] = SMOOTHING * rate + (1.0 - SMOOTHING) * pacer.measured
        if pacer.w_max > 0.0 and pacer.cut_at >= pacer.bucket_at:
            # The bucket of the last cut is complete: its successes are what
            # the upstream served while it throttled, the reading the cut
            # took only a part of (the throttle came before the successes
            # of the same moment were reported). W_max rises to it.
            _revise(pacer, pacer.bucket_count / BUCKET, changes)
        changes["bucket_at"], changes["bucket_count"] = bucket, 0
    elif add:
        changes["bucket_count"] = count


def _cut(
    pacer: Pacer, config: RateLimitConfig, now: float, changes: dict[str, float], hold: float
) -> None:
    changes["throttled_at"] = now
    if now - pacer.throttled_at >= config._quiet_s:
        # The first throttle after a quiet period only arms the pacer: the
        # shared cool-down answers it, and one 429 among healthy calls is
        # no rate to learn from (it would pace the pod at the floor).
        changes["w_max"] = 0.0
        if hold:
            # The cool-down it starts (`hold`, its Retry-After) stops the
            # pod's calls: until it ends, only the calls still out report,
            # and a bucket of theirs would read a fraction of what the
            # upstream serves, so the first cut after it would pace the
            # pod far below it for seconds. They count in this bucket.
            changes["paused_until"] = now + hold
        return
    if now - pacer.cut_at < BUCKET:
        return
    # W_max: what the upstream served (see the module docstring), as just
    # measured; while learning, no more than the pace granted.
    served = _served_rate(
        changes.get("measured", pacer.measured),
        int(changes.get("bucket_count", pacer.bucket_count)),
    )
    if _learning(pacer, config, now):
        served = _checked(pacer, served)
    else:
        # A new episode: grants counted in an old one say nothing now.
        changes["sent_at"], changes["sent_count"], changes["sent"] = -math.inf, 0, 0.0
    _set_w_max(min(served, MAX_RATE), changes)
    changes["cut_at"] = now


def _revise(pacer: Pacer, served: float, changes: dict[str, float]) -> None:
    # Held to what the pace granted (_checked), as a cut is: otherwise
    # successes no Admit granted, reported into the cut's bucket, would
    # lift W_max without bound, and the 2x-grants cap compound with it.
    w_max = min(_checked(pacer, served), MAX_RATE)
    if w_max > pacer.w_max:
        _set_w_max(w_max, changes)


def _set_w_max(w_max: float, changes: dict[str, float]) -> None:
    changes["w_max"] = w_max
    changes["k"] = (w_max * (1.0 - BETA) / SCALE) ** (1.0 / 3.0)


def hold(pacer: Pacer, until: float) -> Pacer:
    """The pacer holding every start until `until` (then spacing them at
    its pace): a cool-down handed over to it (squawk.policy.upstream)."""
    if until <= pacer.hold_until:
        return pacer
    return _replace(pacer, hold_until=until)


def hold_at_most(pacer: Pacer, latest: float) -> Pacer:
    """The pacer with no hold past `latest` (a reload that lowers
    max_cool_down shortens a hold as it does a cool-down)."""
    if pacer.hold_until <= latest:
        return pacer
    return _replace(pacer, hold_until=latest)


def pace_source(pacer: Pacer, config: RateLimitConfig, now: float) -> PaceSource:
    """Where the pace in force at `now` comes from."""
    return _rates(pacer, config, now).source


def pacer_snapshot(pacer: Pacer, config: RateLimitConfig, now: float) -> PaceSnapshot:
    """What the pacer says at `now`, for display; it changes nothing."""
    rates = _rates(pacer, config, now)
    limit, in_flight = 0, 0
    if _limited(pacer, config, now):
        old, current, _ = _flight(pacer, now)
        limit, in_flight = int(pacer.limit), old + current
    if rates is _NONE and now >= pacer.hold_until:
        return PaceSnapshot(PaceSource.NONE, 0.0, 0.0, _ZERO, limit, in_flight)
    start = _start(pacer, rates, now, pacer.mean_cost)
    return PaceSnapshot(
        rates.source if rates is not _NONE else PaceSource.HEADERS,
        rates.rate,
        rates.token_rate,
        time_left(start, now),
        limit,
        in_flight,
    )


def pacer_is_idle(pacer: Pacer, config: RateLimitConfig, now: float) -> bool:
    """Whether a fresh Pacer() would pace as `pacer` from `now` on: no
    header or learned pace (nor one armed by a throttle), no concurrency
    limit, and a policy pace's bursts refilled. What it
    only measures is not compared (the success rate, which a fresh pacer
    measures again within a bucket or two, and the mean cost, which only
    prices a call that sends none): holding the key for them would keep
    every upstream ever called."""
    return (
        now >= pacer.header_until
        and now >= pacer.hold_until
        and now - pacer.throttled_at >= config._quiet_s  # neither learning nor armed
        and not _limited(pacer, config, now)
        and pacer.tat <= now
        and pacer.token_tat <= now
    )


def _replace(pacer: Pacer, **changes: float) -> Pacer:
    return pacer._replace(**changes)  # type: ignore[arg-type]  # counts arrive as ints
