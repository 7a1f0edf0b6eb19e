"""The pacer: when a call to one upstream may start, for the whole pod.

The server keeps one Pacer per (profile, upstream) inside its
UpstreamState; admit() asks `pace()` after the cool-down and the breaker
let a call through, and record_outcome() feeds every finished call to
`observe()`. docs/upstreams.md §Pacing is the manual.

A Pacer is the states of eight small machines, each in its own module with
its own rules; this module holds only the precedence between them:

- spacing.py: GCRA's arrival times (and the mean cost), which space starts;
- short_queue.py: CoDel's short queue, which bounds the wait and sheds;
- header_quota.py: the pace the upstream's headers announce, and holds;
- cubic.py (with clocker.py): the rate learned from throttling;
- aimd.py: the concurrency limit learned from slowness;
- capped.py: the cap on calls in flight the policy declares;
- fair.py: the max-min shares of a binding pace between fairness keys;
- precedence.py: the lane that starts critical calls ahead of sheddable ones.

The pace in force is the policy's, else the headers', else the learned one
(`PaceSource`); the declared cap, then the concurrency limit, refuse
before any of them; a hold delays every start. With none of them the
pacer does nothing but count a fairness key's ask (`asked`): pace()
grants at once, returns the state it was given when no key is named, and
lets a busy executor take up to MAX_PERMITS permits with one answer (a
lease of LEASE).
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import NamedTuple

from . import aimd, capped, cubic, fair, header_quota, precedence, short_queue, spacing
from .aimd import Limit
from .aimd import limited as _limited
from .capped import NOT_DECLARED, Capped
from .clocker import BUCKET, SMOOTHING
from .cooldown import spread
from .cubic import BETA, MIN_RATE, SCALE, Learned
from .fair import NO_KEYS, Fair, Fairness
from .header_quota import MAX_HOLD, MAX_HOLD_S, HeaderQuota, bounded_seconds
from .limits import MAX_BURST, MAX_PERMITS, MAX_RATE, MAX_TOKEN_RATE
from .pace_types import LEASE, MIN_POLICY_RATE, Pace, PaceSample, PaceSnapshot, RateLimitConfig
from .precedence import NO_LANE, Lane
from .shed import Shed, ShedCause
from .short_queue import CODEL_INTERVAL, CODEL_TARGET, SHORT_SLOTS, Queue
from .spacing import NO_RATES, Rates, Spacing
from .timing import seconds, time_left
from .types import Criticality, PaceSource

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
    "asked",
    "cooling_lane",
    "hold_at_most",
    "observe",
    "pace",
    "pace_source",
    "pacer_is_idle",
    "pacer_snapshot",
]

_ZERO = timedelta(0)
_NOW = Pace(True, _ZERO, None, 1)
# The paces that describe the upstream's whole quota, which the fleet's
# pods divide: declared for it, or read from its headers.
SHARED_SOURCES = (PaceSource.POLICY, PaceSource.HEADERS)


class Pacer(NamedTuple):
    """One upstream's pace, its machines' states; Pacer() is "nothing known".

    NamedTuples, not frozen dataclasses: a paced Admit and every outcome
    build new ones, and a frozen dataclass's __init__ costs several times
    as much (one object.__setattr__ per field)."""

    spacing: Spacing = Spacing()
    queue: Queue = Queue()
    quota: HeaderQuota = HeaderQuota()
    learned: Learned = Learned()
    concurrency: Limit = Limit()
    capped: Capped = NOT_DECLARED
    fair: Fair = NO_KEYS
    lane: Lane = NO_LANE


def _rates(pacer: Pacer, config: RateLimitConfig, now: float) -> Rates:
    """The pace in force at `now`: the policy's, else the headers', else
    the learned one."""
    if config._policy:
        return Rates(
            PaceSource.POLICY,
            config.rate or 0.0,
            float(config.burst),
            config.token_rate or 0.0,
            config._tokens,
        )
    quota = pacer.quota
    learned = cubic.in_force(pacer.learned, now, config._quiet_s)
    if quota.doubted_until <= now < quota.until:
        # Headers are hints: throttles met under their pace cut the
        # learned one, and the lower of the two is in force. Not a
        # release: the headers' pace spaces the calls a cool-down held.
        if not cubic.learning(pacer.learned, now, config._quiet_s):
            learned = 0.0
        if learned and not 0.0 < quota.rate <= learned:
            tokens = quota.token_rate
            return Rates(PaceSource.LEARNED, learned, 1.0, tokens, tokens)
        tokens = quota.token_rate
        return Rates(PaceSource.HEADERS, quota.rate, quota.burst, tokens, tokens)
    if learned:
        return Rates(PaceSource.LEARNED, learned, 1.0, 0.0, 0.0)
    return NO_RATES


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
    max_hold: timedelta = MAX_HOLD,
    criticality: Criticality | None = None,
    fairness: Fairness | None = None,
) -> tuple[Pacer, Pace]:
    """(pacer, pace): when one call (or `permits` calls) may start.

    `share`: the fraction of a declared or announced rate this pod may use
    (the fleet divides an upstream's rate between its pods,
    squawk.policy.fleet.share); a learned rate is the pod's own already.

    `cost`: the call's estimated token units (0 = unknown: the mean of the
    real costs seen stands in). `deadline`: the time left before the
    step's deadline; None = none. `permits` > 1 is granted (up to
    MAX_PERMITS) only when nothing paces. `criticality`: how long a wait
    the call may be given (`_longest`): the lower levels are shed first;
    None: the policy's (`config.criticality`).
    `fairness`: whose call it is; while the pace binds, a key asking more
    than its max-min share starts no faster than that share, and is
    refused past it (squawk.policy.fair).
    `rng` jitters a refusal's
    retry_after (None: the exact time). The caller bounds the inputs
    (squawk.policy.upstream.admit checks them).
    """
    quota = pacer.quota
    cap = config.max_in_flight
    if cap:
        pacer = _declared(pacer, now)
        old, current, _ = capped.in_flight(pacer.capped, now)
        if old + current >= cap:
            slots, again = capped.refused(pacer.capped, now, cap)
            full = Shed(ShedCause.CAP, 0.0, float(cap))
            after = timedelta(seconds=again)
            return pacer._replace(capped=slots), Pace(False, _ZERO, spread(after, rng), 0, full)
    elif pacer.capped is not NOT_DECLARED:
        # Not declared now: a cap declared again later counts afresh.
        pacer = pacer._replace(capped=NOT_DECLARED)
    if (
        not cap
        and not config._policy
        and now >= quota.until
        and now >= quota.hold_until
        and not cubic.in_force(pacer.learned, now, config._quiet_s)
        and not _limited(pacer.concurrency, now, config._quiet_s)
    ):
        granted = min(permits, MAX_PERMITS)
        pacer = asked(pacer, now, fairness, granted)
        if granted == 1:
            return pacer, _NOW
        return pacer, Pace(True, _ZERO, None, granted)
    limit = pacer.concurrency
    limited = _limited(limit, now, config._quiet_s)
    if limited:
        old, current, _ = aimd.in_flight(limit, now)
        if old + current >= int(limit.limit):
            # Full: a slot frees about every latency / limit seconds.
            left = min(max(limit.latency_fast / limit.limit, CODEL_INTERVAL), MAX_HOLD_S)
            full = Shed(ShedCause.IN_FLIGHT, 0.0, float(int(limit.limit)))
            return pacer, Pace(False, _ZERO, spread(time_left(now + left, now), rng), 0, full)
    rates = _rates(pacer, config, now)
    if share < 1.0 and rates.source in SHARED_SOURCES:
        rates = spacing.shared(rates, share)
    bound = _bound(rates.source, max_hold)
    if rates.source is PaceSource.HEADERS:
        # A header pace lapses with its reading (`until`): a start, slot or
        # retry it spaced past then would wait for a pace no longer in
        # force, and with no call out no reading comes to correct one that
        # lied ("one call left for a day"). The first start after it reads
        # the headers anew.
        bound = min(bound, max(quota.until, quota.hold_until) - now)
    rates = spacing.bounded(rates, bound)
    spaced = spacing.current(pacer.spacing, rates, now)
    units = cost if cost > 0.0 else spaced.mean_cost
    start = spacing.start(spaced, rates, now, units, quota.hold_until, bound)
    level = config.criticality if criticality is None else criticality
    lane = precedence.asked(pacer.lane, level, now)
    laned = precedence.opens(lane, level, now)
    if laned:
        # Ahead of the sheddable grants; not through a quota the headers
        # said is spent.
        spent = quota.spent_until if quota.spent_until > now else now
        start = min(start, precedence.start(lane, rates.rate, spent))
    keys, key, own = pacer.fair, "", None
    if fairness is not None or keys.tenants:
        key, weight = fairness or ("", 1.0)
        keys, key = fair.asked(keys, key, weight, now)
        if rates.rate:
            own = fair.share(keys, key, rates.rate, now)
    if own is not None:
        # Over its share: started no faster than it, and never queued past
        # one slot of the pace, so that its surplus holds no place the keys
        # under their share would wait behind.
        early = fair.early(keys, key, own, start)
        queued = start - now - 1.0 / rates.rate
        if early > 0.0 or queued > 0.0:
            over = Shed(ShedCause.SHARE, 0.0, own, rates.rate, 0.0, rates.source)
            retry_after = spread(time_left(now + max(early, queued), now), rng)
            refused = pacer._replace(spacing=spaced, fair=keys, lane=lane)
            return refused, Pace(False, _ZERO, retry_after, 0, over)
    slot = min(spacing.slot(rates, units), bound)
    wait = time_left(start, now)
    wait_s = seconds(wait)
    queue, longest = short_queue.arrive(
        pacer.queue, now, wait_s, start <= now, slot, config._max_wait_s
    )
    if (
        own is None
        and rates.source is PaceSource.LEARNED
        and cubic.releasing(pacer.learned, now, config._quiet_s)
    ):
        # Where keys share the pace, each over its share already queues
        # one slot at most, and one under it asks for no more than its share.
        longest = short_queue.releasing(longest, slot)
    if laned:
        longest = config._max_wait_s  # the lane's queue is the critical calls' alone
    elif level is not Criticality.CRITICAL:
        longest = _longest(level, longest, config._max_wait_s)
    if wait and ((deadline is not None and wait >= deadline) or wait_s > longest):
        queue, left = short_queue.refuse(queue, now, start, slot)
        left_s = None if deadline is None else seconds(deadline)
        cause, most, past = short_queue.refused_by(wait_s, longest, queue.short_on, left_s)
        by = spacing.wait_cause(spaced, rates, units, quota.hold_until)
        why = Shed(cause, wait_s, most, rates.rate, rates.token_rate, rates.source, by, past)
        retry_after = spread(time_left(now + min(left, bound), now), rng)
        refused = pacer._replace(spacing=spaced, queue=queue, fair=keys, lane=lane)
        return refused, Pace(False, _ZERO, retry_after, 0, why)
    learned = cubic.granted(pacer.learned, now, rates.source is PaceSource.LEARNED)
    return Pacer(
        spacing.reserve(spaced, rates, start, units, config._max_wait_s),
        queue,
        quota,
        learned,
        aimd.started(limit, now) if limited else limit,
        capped.started(pacer.capped, now) if cap else pacer.capped,
        keys if own is None else fair.reserved(keys, key, start, own),
        precedence.started(lane, rates.rate, start) if laned else lane,
    ), Pace(True, wait, None, 1)


def observe(
    pacer: Pacer,
    config: RateLimitConfig,
    now: float,
    sample: PaceSample,
    *,
    max_hold: timedelta = MAX_HOLD,
) -> Pacer:
    """The pacer after one finished call.

    `max_hold`: the longest a quota with nothing left holds every start
    (the upstream's max_cool_down; at most MAX_HOLD)."""
    spaced, quota, learned, limit = pacer.spacing, pacer.quota, pacer.learned, pacer.concurrency
    if sample.cost > 0.0:
        rates = _rates(pacer, config, now)
        spaced = spacing.charge(
            spaced, rates, now, sample.cost, sample.estimated, config._max_wait_s
        )
    if sample.hint is not None:
        # As of when the response came: its resets count from then. The
        # pace binds when it refuses calls or they wait past the short
        # queue's limit: only then does a quota left unused say the pace is
        # too low (under it, the demand is).
        read_at = now - sample.age
        queue = pacer.queue
        quota = header_quota.read(
            quota,
            sample.hint,
            read_at,
            config._quiet_s,
            seconds(max_hold),
            binding=queue.shed_until >= now or queue.above_since <= now,
            # Only a call the pod admitted discredits them: an outcome no
            # admission names could be anyone's, and must not switch a
            # header pace off for every caller.
            throttled=sample.throttled and sample.admitted_at is not None,
        )
    admitted_at = sample.admitted_at
    slots = pacer.capped
    if config.max_in_flight and admitted_at is not None:
        took = None if sample.latency is None else seconds(sample.latency)
        slots = capped.finished(slots, now, admitted_at, took)
    if (
        config.concurrency
        and admitted_at is not None
        and (sample.latency is not None or limit.limit)
    ):
        latency = None  # a throttle's or an IGNORED call's says nothing of speed
        if sample.latency is not None and sample.counted and not sample.throttled:
            latency = seconds(sample.latency)
        served = cubic.served(pacer.learned)
        limit = aimd.observe(
            limit, now, config._quiet_s, latency, sample.success, served, admitted_at
        )
    if config.learn and not config._policy:
        held = 0.0
        if sample.throttled:
            held = min(bounded_seconds(sample.retry_after), seconds(max_hold))
        learned = cubic.observe(
            learned, now, config._quiet_s, sample.success or sample.passed, sample.throttled, held
        )
    if (
        spaced is pacer.spacing
        and quota is pacer.quota
        and learned is pacer.learned
        and limit is pacer.concurrency
        and slots is pacer.capped
    ):
        return pacer
    return Pacer(spaced, pacer.queue, quota, learned, limit, slots, pacer.fair, pacer.lane)


# The share of the queue's limit in force a call of each level may wait
# (CRITICAL_PLUS: the whole max_queue_delay, even while the short queue is
# on). A sheddable call is refused at a shorter wait than a critical one, so
# under overload the queue holds critical calls and a critical call arriving
# waits behind at most a sheddable call's share: Google's criticality
# shedding (the SRE book, "Handling Overload"), as a limit per level.
_QUEUE_SHARE = {Criticality.SHEDDABLE_PLUS: 0.5, Criticality.SHEDDABLE: 0.25}


def _longest(criticality: Criticality, longest: float, max_wait: float) -> float:
    if criticality is Criticality.CRITICAL_PLUS:
        return max_wait
    return longest * _QUEUE_SHARE[criticality]


def _declared(pacer: Pacer, now: float) -> Pacer:
    held = capped.declared(pacer.capped, now)
    return pacer if held is pacer.capped else pacer._replace(capped=held)


def asked(pacer: Pacer, now: float, fairness: Fairness | None, calls: int = 1) -> Pacer:
    """The pacer after `calls` asked by `fairness`'s key while nothing
    shares a pace (nothing paces, or a cool-down refuses every call): the
    keys' demands are measured before a pace binds, so that its shares hold
    from its first grant. Measured from then on, they lagged it by seconds
    (DEMAND_S), and the light key of a 3 : 1 pair took half of the calls
    released after the first cool-down of an overload. Unchanged while no
    call names a key."""
    if fairness is None and not pacer.fair.tenants:
        return pacer
    key, weight = fairness or ("", 1.0)
    return pacer._replace(fair=fair.asked(pacer.fair, key, weight, now, calls)[0])


def cooling_lane(
    pacer: Pacer, config: RateLimitConfig, now: float, criticality: Criticality | None
) -> tuple[Pacer, bool]:
    """(pacer, passes): a call of `criticality` asking while a short
    cool-down runs (squawk.policy.upstream) is counted in the lane, and
    passes it when it takes the lane: the sheddable calls the cool-down
    holds back are what overloaded the upstream, and a critical call waits
    for neither them nor their cool-down (SRE book: a level is rejected
    only once every lower level is)."""
    level = config.criticality if criticality is None else criticality
    lane = precedence.asked(pacer.lane, level, now)
    return (pacer if lane is pacer.lane else pacer._replace(lane=lane)), precedence.opens(
        lane, level, now
    )


def hold_at_most(pacer: Pacer, latest: float) -> Pacer:
    """The pacer with no hold past `latest` (a reload that lowers
    max_cool_down shortens a hold as it does a cool-down)."""
    quota = header_quota.hold_at_most(pacer.quota, latest)
    return pacer if quota is pacer.quota else pacer._replace(quota=quota)


def pace_source(pacer: Pacer, config: RateLimitConfig, now: float) -> PaceSource:
    """Where the pace in force at `now` comes from."""
    return _rates(pacer, config, now).source


def _bound(source: PaceSource, max_hold: timedelta) -> float:
    """The longest (seconds) a start is spaced past the last one: the
    upstream's max_cool_down, as for a hold; for a pace read from the
    headers, never past MAX_HOLD either (whatever the upstream sends, as
    header_quota bounds its holds). A declared rate slower than one call
    per max_cool_down paces one call per max_cool_down."""
    bound = seconds(max_hold)
    return bound if source is PaceSource.POLICY else min(bound, MAX_HOLD_S)


def pacer_snapshot(
    pacer: Pacer, config: RateLimitConfig, now: float, *, max_hold: timedelta = MAX_HOLD
) -> PaceSnapshot:
    """What the pacer says at `now`, for display; it changes nothing."""
    rates = _rates(pacer, config, now)
    limit, in_flight = 0, 0
    concurrency = pacer.concurrency
    if _limited(concurrency, now, config._quiet_s):
        old, current, _ = aimd.in_flight(concurrency, now)
        limit, in_flight = int(concurrency.limit), old + current
    if config.max_in_flight:
        old, current, _ = capped.in_flight(pacer.capped, now)
        limit = min(limit or config.max_in_flight, config.max_in_flight)
        in_flight = max(in_flight, old + current)
    hold_until = pacer.quota.hold_until
    if rates is NO_RATES and now >= hold_until:
        return PaceSnapshot(PaceSource.NONE, 0.0, 0.0, _ZERO, limit, in_flight)
    bound = _bound(rates.source, max_hold)
    rates = spacing.bounded(rates, bound)
    spaced = spacing.current(pacer.spacing, rates, now)
    start = spacing.start(spaced, rates, now, spaced.mean_cost, hold_until, bound)
    return PaceSnapshot(
        rates.source if rates is not NO_RATES else PaceSource.HEADERS,
        rates.rate,
        rates.token_rate,
        time_left(start, now),
        limit,
        in_flight,
    )


def pacer_is_idle(pacer: Pacer, config: RateLimitConfig, now: float) -> bool:
    """Whether a fresh Pacer() would pace as `pacer` from `now` on: no
    header or learned pace (nor one armed by a throttle), no concurrency
    limit, and a policy pace's bursts refilled. What it only measures is
    not compared (the success rate, which a fresh pacer measures again
    within a bucket or two, and the mean cost, which only prices a call
    that sends none): holding the key for them would keep every upstream
    ever called."""
    quiet = config._quiet_s
    return (
        now >= pacer.quota.until
        and now >= pacer.quota.hold_until
        and now - pacer.learned.throttled_at >= quiet  # neither learning nor armed
        and not _limited(pacer.concurrency, now, quiet)
        and spacing.is_idle(pacer.spacing, now)
        and sum(capped.in_flight(pacer.capped, now)[:2]) == 0
        and all(
            t.tat <= now and t.demand_at(now) < fair.MIN_DEMAND for t in pacer.fair.tenants.values()
        )
        and precedence.is_idle(pacer.lane, now)
    )
