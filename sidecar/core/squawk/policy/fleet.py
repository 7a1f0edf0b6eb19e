"""The fleet: what one pod does with the counts every pod shares.

With the Redis store every pod still decides every call from memory, by
this core's rules over its own state (squawk.policy.upstream). Every sync
interval it sends what it saw of each upstream since the last sync (its
`Delta`) and reads back the fleet's sums (a `Reading`), which it keeps as
its `FleetView` until the next one. Redis only adds and leases (the
daemon's fleet.lua): it holds no rule. This module holds what a pod does
with the sums, each a rule of the core applied to the fleet's counts:

- `refusal`: after the pod's own state would admit a call, the fleet's can
  still refuse it: its shared cool-down, its OPEN breaker, a HALF_OPEN
  round whose probe slots this pod does not hold (`take_probe` spends a
  held one).
- `retry_answer`: the FleetAnswer that guard_fleet applies to a RETRY: the
  fleet's OPEN breaker, its retry budget over every pod's calls and retries
  (retry_budget's own rule), its cool-down.
- `move`: the transition the fleet's counts call for, which the pod asks
  Redis to make only if the fleet is still in the epoch it read: OPEN when
  the window trips (the breaker's own rule) and the failures came from at
  least `min_pods` pods (the quorum: one pod alone, a bad link or a broken
  deploy, opens only its own breaker); CLOSED or OPEN when the half-open
  round is judged (the breaker's own rule again).
- `share`: this pod's lease of the upstream's rate, a fraction in (0, 1]
  of it, in proportion to the demand each pod reported (`demand`: its
  calls asked per second, smoothed); `pace_share`: the fraction in force,
  the lease's or, once it ran out without a new reading, the fallback.

The staleness this allows is one sync interval (plus a round trip): a
pod learns of another's failures, of the fleet's breaker opening, of a
cool-down one pod saw, at its next sync. The fleet breaker opens within
two: the sync that meets the quorum reads it, and moves it at once.
"""

from __future__ import annotations

import math
import random
from datetime import timedelta
from typing import NamedTuple

from . import breaker as _breaker
from . import retry_budget as _budget
from .cooldown import COOL_DOWN_SPREAD_FRACTION, held, shared_wait, spread, within
from .guard import FleetAnswer
from .outcome import Outcome, Verdict
from .retry_budget import BUDGET_BUCKETS, RatioBudgetConfig, TokenBucketConfig
from .timing import EMPTY, Window, added, joined, rolled, seconds, time_left
from .types import BreakerState, Reason
from .upstream import Admission, UpstreamConfig

__all__ = [
    "NO_DELTA",
    "Delta",
    "FleetSnapshot",
    "FleetView",
    "Move",
    "Reading",
    "Restore",
    "admitted",
    "asked",
    "cautious",
    "demand",
    "equal_part",
    "fleet_snapshot",
    "kept",
    "lost",
    "merged",
    "move",
    "moved",
    "outcome",
    "pace_share",
    "refusal",
    "retried",
    "retry_answer",
    "sent",
    "share",
    "shown_share",
    "state_at",
    "take_probe",
    "token_change",
    "viewed",
    "wanted_probes",
]

# Outcomes of one kind a delta carries at most: a pod's real counts over one
# sync interval are far below; the bound is for the store's arithmetic.
MAX_DELTA = 10**9
# The least pace share, as a part of an equal split (1 / (wanting + 1)): a
# pod whose part of the demand is smaller still gets an eighth of an equal
# part. Proportional shares starve a pod that asks little while others ask
# much (max-min fairness would give it all it asks), and a reading torn or
# planted in the store (one demand field of 1e12) must not cut a pod's rate
# a millionfold for the slot it lasts. A pod at the floor asks less than
# its floor's worth, so the fleet's calls stay near the rate; at most, with
# every pod at the floor at once, they pass it by an eighth.
MIN_EQUAL_PART = 1 / 8
# ... and never below this, whatever `wanting` a reading says.
MIN_SHARE = 1e-6
# The demand's running mean spans about this many sync intervals, and a
# smaller demand (calls/s) is none.
DEMAND_SYNCS = 2
MIN_DEMAND = 0.01


class Delta(NamedTuple):
    """What one pod saw of one upstream since its last sync that landed.

    Windows, not plain counts, so that what a pod saw while Redis was away
    reaches the fleet when it answers again with only what is still inside
    the breaker's window and the budget's ttl (the resync).
    """

    # (counted outcomes, failures among them) per breaker-window bucket.
    breaker: Window = EMPTY
    # A ratio budget's (first calls admitted, retries granted) per bucket.
    budget: Window = EMPTY
    # A token bucket: its failures and successes (throttle_verdict's).
    token_failures: int = 0
    token_successes: int = 0
    # The latest end of a cool-down this pod's failures shared; -inf none.
    cool_until: float = -math.inf
    # Admits refused: the calls that come back, for which a half-open
    # round's slots are asked. Not the Admits allowed: a call that got its
    # slot wants no other, and one leased for it would keep the round
    # full for an interval while other pods' calls are refused until the
    # round restarts.
    asked: int = 0
    # Calls admitted (started at once, or waiting their turn in the pace's
    # queue): the pod's demand for its pace share. Not the refusals, the
    # pace's (UPSTREAM_SATURATED) included: a caller that asks again and
    # again, whatever it is told, must not win the rate from pods whose
    # calls really start.
    wanted: int = 0
    # Admits the pace refused: no demand, but that there were any says the
    # pod would start more than its share (see `demand`).
    shed: int = 0


NO_DELTA = Delta()


class Reading(NamedTuple):
    """The fleet's sums for one upstream, as one sync's reply carries them
    (times in seconds from that reply; every count already bounded)."""

    state: BreakerState
    # Moves happen only in the epoch they were read in (see `move`).
    epoch: int
    # OPEN: until it half-opens. HALF_OPEN: until the round restarts.
    left: float
    # CLOSED: the window's calls and failures, and the pods that failed.
    calls: int
    failures: int
    pods: int
    # HALF_OPEN: the round's probe slots taken, and its outcomes.
    taken: int
    successes: int
    probe_failures: int
    # Probe slots this sync leased to this pod, and the round they are of
    # (a round that restarts is another: slots held of the old one are void).
    granted: int
    round: int
    # A ratio budget: first calls and retries over its ttl, every pod's.
    deposits: int
    retries: int
    # A token bucket: tokens spent, in thousandths (0 is a full bucket).
    spent: int
    # The shared cool-down left.
    cooling: float
    # The pace share: the demand every pod reported for the last whole
    # slot (calls/s), and how many pods reported it.
    demand: float
    wanting: int
    # The pod's settings differ from those the fleet's state was written with.
    differ: bool
    # This pod's own part of `demand` (0: it was not among the `wanting`).
    own: float = 0.0
    # When the store made the state it holds of the upstream (its own
    # clock, an id): a state made anew (after a FLUSHALL, a restart that
    # lost it, a failover to a replica without it) has another, and
    # whatever caution the old one held is gone (see `lost`). 0: unknown.
    born: int = 0


class FleetView(NamedTuple):
    """The pod's copy of the fleet's state of one upstream, on the pod's clock."""

    reading: Reading
    # When it was read.
    at: float
    # OPEN: until it half-opens; HALF_OPEN: until the round restarts.
    until: float
    cool_until: float
    # Probe slots leased to this pod and not used yet.
    probes: int
    # This pod's share of the rate, and until when its lease holds.
    share: float
    share_until: float
    # When the next sync is due: what a HALF_OPEN fleet's refusal waits for
    # while the round has slots left (the next sync may lease one).
    next_at: float
    # When the slots held were leased (the oldest still held).
    leased_at: float


class Move(NamedTuple):
    """A transition the pod asks the fleet to make, from `epoch`."""

    to: BreakerState
    epoch: int


class Restore(NamedTuple):
    """Caution a pod's view held that the store lost, to write back from
    `epoch` (the store's, as the reading that showed the loss says)."""

    epoch: int
    # The OPEN breaker's time left; 0: none to write back.
    open_left: float
    # The cool-down's time left; 0: none to write back.
    cooling: float


# -- what a pod adds to its delta -------------------------------------------


def asked(delta: Delta, admission: Admission) -> Delta:
    """One Admit's answer, allowed or not."""
    if admission.allowed:
        return delta._replace(wanted=min(delta.wanted + 1, MAX_DELTA))
    if admission.reason is Reason.IN_FLIGHT_CAP:
        # A caller waiting for a slot asks about twenty times per call it
        # waits for: neither demand nor a breaker's refusal.
        return delta
    shed = delta.shed
    if admission.reason is Reason.UPSTREAM_SATURATED:
        shed = min(shed + 1, MAX_DELTA)
    return delta._replace(asked=min(delta.asked + 1, MAX_DELTA), shed=shed)


def admitted(delta: Delta, config: UpstreamConfig, now: float) -> Delta:
    """A first call admitted: a ratio budget's deposit (as upstream.admit's)."""
    budget = config.retry_budget
    if isinstance(budget, TokenBucketConfig):
        return delta
    return delta._replace(budget=added(delta.budget, now, budget._ttl_s, BUDGET_BUCKETS, 1, 0))


def retried(delta: Delta, config: UpstreamConfig, now: float) -> Delta:
    """A retry granted: a ratio budget's withdrawal."""
    budget = config.retry_budget
    if isinstance(budget, TokenBucketConfig):
        return delta
    return delta._replace(budget=added(delta.budget, now, budget._ttl_s, BUDGET_BUCKETS, 0, 1))


def outcome(delta: Delta, config: UpstreamConfig, now: float, seen: Outcome) -> Delta:
    """One outcome, read as the pod's own state reads it (upstream.record_outcome)."""
    cb = config.circuit_breaker
    counted = config.breaker_verdict(seen)
    if counted is not Verdict.IGNORED:
        failed = int(counted is Verdict.FAILURE)
        window = added(delta.breaker, now, cb._window_s, cb.buckets, 1, failed)
        delta = delta._replace(breaker=window)
    if isinstance(config.retry_budget, TokenBucketConfig):
        token = config.throttle_verdict(seen)
        if token is Verdict.FAILURE:
            delta = delta._replace(token_failures=min(delta.token_failures + 1, MAX_DELTA))
        elif token is Verdict.SUCCESS:
            delta = delta._replace(token_successes=min(delta.token_successes + 1, MAX_DELTA))
    if config.verdict(seen) is Verdict.FAILURE:
        wait = shared_wait(seen.retry_after, config.share_retry_after, config.max_cool_down)
        if wait is not None:
            delta = delta._replace(cool_until=max(delta.cool_until, now + seconds(wait)))
    return delta


def merged(a: Delta, b: Delta) -> Delta:
    """Two deltas as one: a sync that failed, and what came since."""
    if a is NO_DELTA:
        return b
    return Delta(
        joined(a.breaker, b.breaker),
        joined(a.budget, b.budget),
        min(a.token_failures + b.token_failures, MAX_DELTA),
        min(a.token_successes + b.token_successes, MAX_DELTA),
        max(a.cool_until, b.cool_until),
        min(a.asked + b.asked, MAX_DELTA),
        min(a.wanted + b.wanted, MAX_DELTA),
        min(a.shed + b.shed, MAX_DELTA),
    )


def cautious(delta: Delta) -> Delta:
    """What of a delta whose sync got no answer is sent again: only what
    errs on the cautious side if the sync did land and it counts twice (a
    breaker's failures, a budget's retries, a token bucket's failures, the
    cool-down); its successes, deposits, refills and demand are dropped,
    which errs the same way if it did not."""
    failures = Window(
        tuple((n, f, f) for n, _, f in delta.breaker.slots if f),
        delta.breaker.second,
        delta.breaker.second,
    )
    retries = Window(
        tuple((n, 0, r) for n, _, r in delta.budget.slots if r), 0, delta.budget.second
    )
    return Delta(failures, retries, delta.token_failures, 0, delta.cool_until)


def sent(delta: Delta, config: UpstreamConfig, now: float) -> tuple[int, int, int, int]:
    """(calls, failures, deposits, retries) of `delta` still inside their
    windows at `now`: what a sync sends of them."""
    cb, budget = config.circuit_breaker, config.retry_budget
    window = rolled(delta.breaker, now, cb._window_s, cb.buckets)
    spent = EMPTY
    if isinstance(budget, RatioBudgetConfig):
        spent = rolled(delta.budget, now, budget._ttl_s, BUDGET_BUCKETS)
    return window.first, window.second, spent.first, spent.second


def token_change(delta: Delta, config: UpstreamConfig) -> tuple[int, int]:
    """A token bucket's (thousandths taken, thousandths refilled) by `delta`."""
    budget = config.retry_budget
    if not isinstance(budget, TokenBucketConfig):
        return 0, 0
    return delta.token_failures * _budget.MILLI, delta.token_successes * budget._refill


# -- what a pod does with a reading -----------------------------------------


def viewed(
    reading: Reading,
    config: UpstreamConfig,
    now: float,
    previous: FleetView | None,
    lease: float,
    interval: float,
) -> FleetView:
    """The view a reading makes at `now`. `lease`: how long its share
    holds; `interval`: the time to the next sync.
    The store's numbers are held to what the rules allow: no reading keeps
    a breaker OPEN past open_for, cools past max_cool_down, or leases more
    than the round's probes."""
    cb = config.circuit_breaker
    reading = reading._replace(
        left=min(reading.left, seconds(cb.open_for)),
        cooling=min(reading.cooling, seconds(config.max_cool_down)),
        granted=min(reading.granted, cb.half_open_probes),
    )
    # Slots leased before stay this pod's until used or their round ends (a
    # round that restarted is another, whose id differs): a pod whose next
    # call comes a second later still has the slot it asked for then.
    held, since = 0, now
    if (
        previous is not None
        and reading.state is BreakerState.HALF_OPEN
        and previous.reading.round == reading.round
        and previous.probes
    ):
        held, since = previous.probes, previous.leased_at
    return FleetView(
        reading,
        now,
        now + reading.left,
        now + reading.cooling if reading.cooling > 0 else -math.inf,
        min(held + reading.granted, cb.half_open_probes),
        share(reading),
        now + lease,
        now + interval,
        since if held else now,
    )


def lost(reading: Reading, previous: FleetView | None, now: float) -> Restore | None:
    """The caution `previous` still held at `now` that `reading` shows the
    store lost, or None: a reading of a state the store made anew (another
    `born`) while the pod's view held an OPEN breaker or a cool-down with
    time left. The state outlives the caution it holds, so only a loss
    remakes it meanwhile (a pod reading it after another pod's sync
    remade it sees the same). Without
    it, a FLUSHALL (or a Redis restarted empty) ends the fleet's breaker
    and cool-down within a sync, and every pod that never saw the failures
    calls again. Every pod that held it writes it back (the store keeps the
    longest cool-down and the first OPEN), for the time left as this pod
    read it: no longer than the rules gave it."""
    if previous is None or not previous.reading.born or reading.born == previous.reading.born:
        return None
    open_left = 0.0
    if previous.reading.state is BreakerState.OPEN and reading.state is BreakerState.CLOSED:
        open_left = max(previous.until - now, 0.0)
    cooling = previous.cool_until - now
    if cooling <= reading.cooling:
        cooling = 0.0
    if open_left <= 0.0 and cooling <= 0.0:
        return None
    return Restore(reading.epoch, open_left, cooling)


def kept(view: FleetView, restore: Restore, now: float) -> FleetView:
    """The view of a reading that lost `restore`, with it kept: the pod
    goes on refusing as before while it writes the caution back (the next
    sync reads it from the store again)."""
    reading, until, cool_until = view.reading, view.until, view.cool_until
    if restore.open_left > 0.0:
        reading = reading._replace(state=BreakerState.OPEN, left=restore.open_left)
        until = now + restore.open_left
    if restore.cooling > 0.0:
        reading = reading._replace(cooling=max(reading.cooling, restore.cooling))
        cool_until = max(cool_until, now + restore.cooling)
    return view._replace(reading=reading, until=until, cool_until=cool_until)


def share(reading: Reading) -> float:
    """This pod's fraction of the upstream's rate: its part of the demand
    every pod reported for the same slot, so the fractions the pods read
    from one slot add up to 1 (and at most MIN_EQUAL_PART more: the floor).
    A pod that was not among them (a newcomer, or one idle then) takes an
    equal part, 1 / (wanting + 1): the others do not leave it room until
    its own demand is summed, so the fleet runs over by that part for at
    most two slots (see docs/fleet.md).
    Fractions, not rates: every pod reads the rate itself (its policy or the
    upstream's headers), so a pod need not trust another's number.

    In proportion to demand: the fractions always add up to the whole
    rate, so no capacity is left over whichever way the demand splits, and
    two sums per slot are all Redis keeps. The demand is what each pod
    starts, and at least an equal part for a pod its pace refused (see
    `demand`), which makes the shares max-min fair ("water-filling")
    within a few slots: a pod asking less than an equal part keeps all it
    asks, the others share the rest equally. Its floor is MIN_EQUAL_PART
    of an equal part (see there)."""
    if reading.own <= 0.0 or reading.demand <= 0.0:
        return 1.0 / (reading.wanting + 1)
    floor = MIN_EQUAL_PART / max(reading.wanting, 1)  # it is among the `wanting`
    return min(1.0, max(reading.own / reading.demand, floor, MIN_SHARE))


def demand(
    previous: float, wanted: int, elapsed: float, interval: float, equal: float = 0.0
) -> float:
    """The demand a sync reports: calls wanted per second (Delta.wanted), a
    running mean over about DEMAND_SYNCS intervals (`wanted` over `elapsed`
    seconds since the last sync), so a pod asking a few calls a second is
    not absent from every other slot (and an equal-part newcomer at the
    next); below MIN_DEMAND it is none. The first reading of a pod without
    one is taken whole: a newcomer's demand is not halved.

    `equal`: for a pod its pace refused since the last sync (Delta.shed),
    an equal part of the demand the fleet last summed (`equal_part`), which
    it reports at least. Its grants are its share's worth, so by them alone
    the shares of pods that all want more than their share would stay as
    they first fell (two pods asking alike could keep 60 % and 40 %
    forever); claiming an equal part of what the fleet starts, they meet
    at equal parts, while a pod that asks less keeps only what it starts
    and leaves the rest to them (max-min fairness, within a few slots). A
    caller spinning on refusals wins its pod an equal part at most, never
    the rate."""
    rate = wanted / max(elapsed, interval)
    weight = 1.0 if previous <= 0.0 else min(1.0, elapsed / (DEMAND_SYNCS * interval))
    mean = max(previous + weight * (rate - previous), equal)
    return mean if mean >= MIN_DEMAND else 0.0


def equal_part(view: FleetView | None, delta: Delta) -> float:
    """The demand a sync of `delta` claims at least (see `demand`): an equal
    part of the last reading's sum when the pace refused a call since, else
    0."""
    if not delta.shed or view is None or view.reading.wanting <= 0:
        return 0.0
    return view.reading.demand / view.reading.wanting


def pace_share(view: FleetView | None, now: float, fallback: float | None) -> float:
    """The fraction of a shared rate this pod paces by at `now`: the share
    its last reading leased while the lease holds; after that (or with no
    reading) `fallback` (state.fallback_share, when the store says it
    applies), or the whole rate when it is None (the pod's own pacer, as
    without the fleet)."""
    if view is not None and now < view.share_until:
        return view.share
    return 1.0 if fallback is None else fallback


def shown_share(leased: FleetView | None, now: float, paced: float, divided: bool) -> float:
    """The share a listing shows (FleetSnapshot.pace_share), so that the
    columns mean the same on every pod: RATE x SHARE is this pod's own pace,
    and the shares of the pods that asked in one slot add up to 1. 1.0
    when the fleet divides nothing (`divided`: the pace in force is a
    declared or announced rate; a learned one, or none, is the pod's own);
    while the lease holds, this pod's part of the demand summed in the
    last whole slot, 0 when it asked for none then (its next call paces by
    an equal part, 1/(pods + 1), until its demand is summed: `share`);
    past the lease, `paced`, the fraction it paces by (`pace_share`: its
    fallback, or the whole rate)."""
    if not divided:
        return 1.0
    if leased is None or now >= leased.share_until:
        return paced
    reading = leased.reading
    if reading.own <= 0.0 or reading.demand <= 0.0:
        return 0.0
    return share(reading)


def state_at(view: FleetView, now: float) -> BreakerState:
    """The fleet's breaker as the view says it is at `now`: an OPEN whose
    time is up reads as HALF_OPEN until the next sync says more."""
    state = view.reading.state
    if state is BreakerState.OPEN and now >= view.until:
        return BreakerState.HALF_OPEN
    return state


def refusal(
    view: FleetView | None,
    config: UpstreamConfig,
    now: float,
    deadline: timedelta | None,
    rng: random.Random | None,
) -> Admission | None:
    """The fleet's refusal of a call the pod's own state would admit, or
    None when the fleet allows it (a HALF_OPEN fleet: only with a probe
    slot this pod holds; take_probe spends it)."""
    if view is None:
        return None
    state = state_at(view, now)
    # Held to the config's cap at once: a reload that lowers max_cool_down
    # shortens a cool-down the view read before it (the next sync's does too).
    cooling = time_left(held(view.cool_until, now, config.max_cool_down), now)
    if cooling:
        wait = within(spread(cooling, rng, COOL_DOWN_SPREAD_FRACTION), cooling, deadline)
        return Admission(False, Reason.UPSTREAM_COOLING_DOWN, wait, state, False, permits=0)
    if not config.circuit_breaker.enabled or state is BreakerState.CLOSED:
        return None
    if state is BreakerState.HALF_OPEN and view.probes > 0:
        return None
    left = time_left(view.until, now)
    free = view.reading.taken < config.circuit_breaker.half_open_probes
    if state is BreakerState.HALF_OPEN and (free or not left):
        # Half-open with no slot here but some left in the round (or a
        # round just begun): the next sync may lease one. At least one
        # interval, so callers of a view no sync renews do not spin.
        interval = view.next_at - view.at
        left = time_left(max(view.next_at, now + interval), now)
    return Admission(
        False,
        Reason.CIRCUIT_OPEN,
        within(spread(left, rng), left, deadline),
        state,
        False,
        permits=0,
    )


def take_probe(view: FleetView, now: float) -> tuple[FleetView, bool]:
    """(view, probe): the view after admitting one call; a HALF_OPEN fleet's
    call spends one of this pod's leased slots and is a probe."""
    if state_at(view, now) is not BreakerState.HALF_OPEN or view.probes <= 0:
        return view, False
    return view._replace(probes=view.probes - 1), True


def wanted_probes(view: FleetView | None, config: UpstreamConfig, now: float, asked: int) -> int:
    """Probe slots to ask the next sync for: while the fleet is (or is about
    to be) HALF_OPEN, not cooling (a call would be refused anyway), and
    this pod refused calls since its last sync (Delta.asked), one for each,
    at most the round's probes, less those it holds. A slot is held until
    used, its round ends (open_for without a verdict), or a second passed
    unused (the store gives it back then): a pod whose next call comes a
    second later still has the slot its refused call asked for."""
    if view is None or asked <= 0 or view.cool_until > now:
        return 0
    if state_at(view, now) is BreakerState.CLOSED:
        return 0
    return max(0, min(asked, config.circuit_breaker.half_open_probes) - view.probes)


def move(reading: Reading, config: UpstreamConfig, min_pods: int) -> Move | None:
    """The transition the fleet's counts call for (see the module docstring)."""
    cb = config.circuit_breaker
    if not cb.enabled:
        return None
    if reading.state is BreakerState.CLOSED:
        if reading.pods >= min_pods and _breaker.trips(reading.calls, reading.failures, cb):
            return Move(BreakerState.OPEN, reading.epoch)
        return None
    if reading.state is BreakerState.HALF_OPEN:
        judged = _breaker.judged(reading.successes, reading.probe_failures, cb)
        if judged is not None:
            return Move(judged, reading.epoch)
    return None


def moved(view: FleetView, made: Move, config: UpstreamConfig, now: float) -> FleetView:
    """The view once the fleet made `made`: what the next sync would read."""
    reading = view.reading._replace(
        state=made.to,
        epoch=made.epoch + 1,
        calls=0,
        failures=0,
        pods=0 if made.to is BreakerState.CLOSED else view.reading.pods,
        taken=0,
        successes=0,
        probe_failures=0,
    )
    until = now + seconds(config.circuit_breaker.open_for)
    return view._replace(reading=reading, until=until, probes=0)


def retry_answer(
    view: FleetView | None, config: UpstreamConfig, now: float, pending: Delta
) -> FleetAnswer | None:
    """What the fleet says of one RETRY: None without a view. The budget
    counts every pod's calls and retries as last read, plus this pod's since."""
    if view is None:
        return None
    reading = view.reading
    if config.circuit_breaker.enabled and state_at(view, now) is BreakerState.OPEN:
        return FleetAnswer(open_left=time_left(view.until, now))
    budget = config.retry_budget
    if isinstance(budget, TokenBucketConfig):
        taken, refilled = token_change(pending, config)
        spent = min(max(reading.spent - refilled, 0) + taken, budget._max)
        if not _budget.grants_tokens(spent, budget):
            tokens = (budget._max - spent) / _budget.MILLI
            return FleetAnswer(
                budget_spent=f"retry tokens are at {tokens:g} of {budget.max_tokens:g}, at or "
                f"below the {budget.max_tokens / 2:g} that stops retries"
            )
    else:
        _, _, deposits, retries = sent(pending, config, now)
        calls, spent_retries = reading.deposits + deposits, reading.retries + retries
        if not _budget.grants(calls, spent_retries, budget):
            return FleetAnswer(
                budget_spent=f"{spent_retries} retries across the pods against {calls} calls "
                f"in the last {seconds(budget.ttl):g} s"
            )
    return FleetAnswer(cooling=time_left(held(view.cool_until, now, config.max_cool_down), now))


def fleet_snapshot(
    view: FleetView, config: UpstreamConfig, now: float, pace_share: float
) -> FleetSnapshot:
    """What the view says at `now`, for display; `pace_share`: the share
    shown (shown_share)."""
    reading = view.reading
    state = state_at(view, now)
    if reading.state is BreakerState.CLOSED:
        calls, failures = reading.calls, reading.failures
    else:
        calls, failures = reading.successes + reading.probe_failures, reading.probe_failures
    budget = config.retry_budget
    if isinstance(budget, TokenBucketConfig):
        left = _budget.retries_left(_budget.Budget(spent=reading.spent), budget, now)
    else:
        left = _budget.room(reading.deposits, reading.retries, budget)
    return FleetSnapshot(
        state,
        calls,
        failures,
        reading.pods,
        reading.taken,
        None if state is BreakerState.CLOSED else time_left(view.until, now),
        time_left(view.cool_until, now),
        left,
        pace_share,
        reading.wanting,
        timedelta(seconds=max(now - view.at, 0.0)),
    )


_ONE_MS = timedelta(milliseconds=1)


class FleetSnapshot(NamedTuple):
    """The fleet's view of one upstream as this pod last read it, for display."""

    # The fleet-wide breaker's state.
    breaker_state: BreakerState
    # CLOSED: calls and failures in the fleet's window, across every pod.
    # HALF_OPEN: the round's probe outcomes tallied, and the failures among them.
    calls: int
    failures: int
    # The distinct pods with a failure in the window: CLOSED, the quorum's
    # count; OPEN and HALF_OPEN, those that opened it, as they age out.
    failing_pods: int
    # HALF_OPEN: probe slots taken fleet-wide this round.
    probes: int
    # OPEN: until it half-opens. HALF_OPEN: until the round restarts. CLOSED: None.
    breaker_retry_after: timedelta | None
    # The fleet's shared cool-down left; zero when none.
    cooldown_left: timedelta
    # The retries the fleet's budget would grant now (retry_budget.retries_left's
    # meaning, over every pod's calls and retries).
    retries_left: int
    # This pod's share of the upstream's rate (see shown_share), a fraction
    # in [0, 1]: of the pods that asked in the last whole slot, their parts
    # of the demand (adding up to 1); 0 for a pod that asked for none then;
    # 1.0 when the fleet does not divide the pace (no declared or announced
    # rate).
    pace_share: float
    # The pods that asked for the upstream in the last whole slot (two sync
    # intervals): the same on every pod that read that slot.
    pods: int
    # How old this view is: the time since the sync that read it.
    age: timedelta
