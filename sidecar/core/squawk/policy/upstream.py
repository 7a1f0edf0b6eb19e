"""One upstream's shared state: its breaker, retry budget, cool-down and pacer.

The server keeps one UpstreamState per (profile, upstream) for every
executor in the pod (at most Policy.max_upstreams of them), takes the
config from `profile.for_upstream(upstream)`, and calls:

- `admit(state, config, now)` before each call to the upstream. The first
  rule that applies decides: the cool-down (refuse UPSTREAM_COOLING_DOWN,
  with the time left), then the breaker (OPEN: refuse CIRCUIT_OPEN, with
  the time until it half-opens; HALF_OPEN with every probe slot taken:
  refuse CIRCUIT_OPEN, with the time until the round restarts; else admit,
  as a probe while HALF_OPEN), then the pacer (squawk.policy.pacer: a
  start past `deadline` or past the queue refuses UPSTREAM_SATURATED; else
  the grant's `wait`, and up to `permits` grants with a `lease` when
  nothing limits the upstream). A grant deposits once into a ratio budget,
  however many permits it carries: a permit is not a call until it is used,
  and a caller that asks 100 and uses 3 must not earn 100 calls' worth of
  retries. A lease can so only make the budget more cautious (its used
  permits count as one call). Pass `retry=True` for a resend guard_retry()
  granted, which has already withdrawn. Pass `rng` to jitter a refusal's wait
  (cooldown.spread).
- `record_outcome(state, config, now, outcome)` after each admitted call:
  the breaker's window (or its probe tally), the token bucket, the
  cool-down and the pacer read it (squawk.policy.outcome says what counts:
  what the profile retries, as config.failure_statuses holds it). A
  throttle starts the cool-down only while the pacer does not pace by a
  rate it learned (then its cut answers the throttle), or when its
  Retry-After is past CLOSED_AFTER (the upstream is closed, not full); one
  that carries its quota and no Retry-After is answered by the quota.
- `guard_retry(...)` (squawk.policy.guard) on each decision decide() made.
- `upstream_snapshot(state, config, now)` to show the state; `is_idle(...)` says a
  fresh UpstreamState would behave the same, so the key may be dropped.

Every function is pure and returns a new state, never changing the one
passed in; the server owns the one current value per key and serialises
the calls on it. `now` is seconds from a monotonic clock.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import timedelta
from typing import NamedTuple

from . import breaker as _breaker
from . import pacer as _pacer
from . import retry_budget as _budget
from .breaker import Breaker, BreakerConfig
from .cooldown import (
    COOL_DOWN_SPREAD_FRACTION,
    DEFAULT_MAX_COOL_DOWN,
    NOT_COOLING,
    check_max_cool_down,
    cool_down,
    spread,
    within,
)
from .fair import Fairness
from .limits import MAX_PERMITS
from .outcome import (
    STEP_TRANSIENT,
    Outcome,
    Verdict,
    breaker_verdict,
    check_cost,
    check_outcome,
    is_quota_throttle,
    is_throttled,
    throttle_verdict,
    verdict,
)
from .pacer import Pacer, PaceSample, PaceSnapshot, RateLimitConfig
from .ratelimit import RateLimitHint
from .retry_budget import Budget, RatioBudgetConfig, RetryBudgetConfig
from .shed import Shed, ShedCause
from .timing import time_left
from .types import BreakerState, Criticality, PaceSource, PolicyInputError, Reason

__all__ = [
    "CLOSED_AFTER",
    "Admission",
    "UpstreamConfig",
    "UpstreamSnapshot",
    "UpstreamState",
    "admit",
    "is_idle",
    "record_outcome",
    "upstream_snapshot",
]

# A throttle's Retry-After past this says the upstream is closed (a quota
# spent until its reset), not full: it cools the pod even under a learned
# pace (see record_outcome). Longer than a pacing reaction (a 0.5 s bucket,
# a few slots), shorter than any quota window.
CLOSED_AFTER = timedelta(seconds=2)


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    """One upstream's settings: a profile's, merged with its `upstreams:` entry."""

    circuit_breaker: BreakerConfig = field(default_factory=BreakerConfig)
    retry_budget: RetryBudgetConfig = field(default_factory=RatioBudgetConfig)
    share_retry_after: bool = True
    # The statuses the profile retries (its transient set less its terminal
    # one): the failures the breaker, the budget and the cool-down count.
    # The profile sets it; it is not a field of the policy file's entries.
    failure_statuses: frozenset[int] = STEP_TRANSIENT
    # The longest one shared hint cools the upstream (see cooldown.py).
    max_cool_down: timedelta = DEFAULT_MAX_COOL_DOWN
    # The pace (squawk.policy.pacer).
    rate_limit: RateLimitConfig = field(default_factory=RateLimitConfig)

    def __post_init__(self) -> None:
        check_max_cool_down(self.max_cool_down)

    def verdict(self, outcome: Outcome) -> Verdict:
        """What `outcome` counts as for this upstream (squawk.policy.outcome)."""
        return verdict(outcome, self.failure_statuses)

    def breaker_verdict(self, outcome: Outcome) -> Verdict:
        """What `outcome` counts as for the breaker (squawk.policy.outcome)."""
        return breaker_verdict(
            outcome, self.failure_statuses, self.circuit_breaker.count_throttling
        )

    def throttle_verdict(self, outcome: Outcome) -> Verdict:
        """What `outcome` counts as for the token bucket (squawk.policy.outcome)."""
        return throttle_verdict(outcome, self.failure_statuses)


@dataclass(frozen=True, slots=True)
class UpstreamState:
    breaker: Breaker = field(default_factory=Breaker)
    budget: Budget = field(default_factory=Budget)
    # When the shared cool-down ends; NOT_COOLING (-inf) when none began.
    cool_until: float = NOT_COOLING
    pacer: Pacer = field(default_factory=Pacer)


class Admission(NamedTuple):
    allowed: bool
    # Why a call was refused (UPSTREAM_COOLING_DOWN, CIRCUIT_OPEN or
    # UPSTREAM_SATURATED); None when allowed.
    reason: Reason | None
    # Refused: how long until the refusing rule may admit again, in whole
    # milliseconds, jittered upwards when admit() got an rng. None when allowed.
    retry_after: timedelta | None
    breaker_state: BreakerState
    # Allowed while HALF_OPEN: this call is one of the round's probes.
    probe: bool
    # Allowed: wait this long, then start (the pacer's start); zero when
    # refused or not paced.
    wait: timedelta = timedelta(0)
    # Allowed: how many calls this answer starts; 0 when refused.
    permits: int = 1
    # permits > 1: how long the permits after the first stay valid.
    lease: timedelta | None = None
    # UPSTREAM_SATURATED: which limit refused the call, with its numbers
    # (squawk.policy.shed.explain says it in words). None otherwise.
    shed: Shed | None = None
    # Allowed: the call holds a slot of the declared cap on calls in flight
    # until its outcome names this admission (report it at once).
    holds_slot: bool = False
    # Allowed on a tracked upstream: the admission's id, which its outcomes
    # name (Outcome.admission_id); the daemon gives it. 0 = none.
    admission_id: int = 0


class UpstreamSnapshot(NamedTuple):
    breaker_state: BreakerState
    # CLOSED: the calls and failures in the window. HALF_OPEN: the probe
    # outcomes tallied this round and the failures among them. OPEN: the
    # outcomes that opened it (the window it tripped on, or the failed round).
    calls: int
    failures: int
    # HALF_OPEN: probe slots taken this round; 0 otherwise.
    probes: int
    # OPEN: until it half-opens. HALF_OPEN: until the round restarts. CLOSED: None.
    breaker_retry_after: timedelta | None
    # Zero when not cooling down.
    cooldown_left: timedelta
    # See squawk.policy.retry_budget.retries_left.
    retries_left: int
    # The pacer's view (squawk.policy.pacer).
    pace: PaceSnapshot


def admit(
    state: UpstreamState,
    config: UpstreamConfig,
    now: float,
    *,
    retry: bool = False,
    rng: random.Random | None = None,
    deadline: timedelta | None = None,
    cost: float = 0.0,
    permits: int = 1,
    share: float = 1.0,
    criticality: Criticality | None = None,
    fairness: Fairness | None = None,
) -> tuple[UpstreamState, Admission]:
    """(state, admission): whether (and when) a call may go to the upstream.

    `deadline`: the time left before the step's deadline (None: none); a
    start the pacer cannot give within it is refused at once. `cost`: the
    call's estimated token units (0 = unknown). `permits`: how many calls
    the caller asks to start with this one answer (1..MAX_PERMITS); more
    than one is granted only when nothing limits the upstream. `share`:
    the fraction of the upstream's declared or announced rate this pod may
    use (squawk.policy.fleet.share). `criticality`: how much the call
    matters when the pace cannot serve every call (squawk.policy.pacer);
    `fairness`: whose call it is, for the pace's max-min shares
    (squawk.policy.fair).
    Raises PolicyInputError naming the field for a value out of bounds.
    """
    check_cost("cost", cost)
    if not 1 <= permits <= MAX_PERMITS:
        raise PolicyInputError("permits", f"must be in 1..{MAX_PERMITS}, got {permits}")
    if deadline is not None and deadline < timedelta(0):
        raise PolicyInputError("deadline", "must not be negative")
    cb = config.circuit_breaker
    cooling = time_left(state.cool_until, now)
    pacer = state.pacer
    if cooling:
        passes = False
        pacer = _pacer.asked(pacer, now, fairness)
        if cooling <= CLOSED_AFTER:
            # A short cool-down (an upstream full, not closed) holds the
            # sheddable calls, not the critical ones (squawk.policy.pacer).
            pacer, passes = _pacer.cooling_lane(pacer, config.rate_limit, now, criticality)
        if not passes:
            breaker = _breaker.advance(state.breaker, cb, now)
            wait = within(spread(cooling, rng, COOL_DOWN_SPREAD_FRACTION), cooling, deadline)
            refused = Admission(
                False, Reason.UPSTREAM_COOLING_DOWN, wait, breaker.state, False, permits=0
            )
            return _with(state, breaker=breaker, pacer=pacer), refused
        permits = 1  # the lane's calls one at a time, never a lease
    breaker, allowed, probe = _breaker.admit(state.breaker, cb, now)
    if not allowed:
        open_left = time_left(breaker.until, now)
        left = within(spread(open_left, rng), open_left, deadline)
        refused = Admission(False, Reason.CIRCUIT_OPEN, left, breaker.state, False, permits=0)
        return _with(state, breaker=breaker), refused
    if breaker.state is not BreakerState.CLOSED:
        permits = 1
    pacer, paced = _pacer.pace(
        pacer,
        config.rate_limit,
        now,
        cost=cost,
        deadline=deadline,
        permits=permits,
        rng=rng,
        share=share,
        max_hold=config.max_cool_down,
        criticality=criticality,
        fairness=fairness,
    )
    if not paced.allowed:
        # A probe the pacer refuses takes no probe slot: the round would
        # otherwise wait a whole open period for an outcome that never comes.
        if probe:
            breaker = _breaker.advance(state.breaker, cb, now)
        full = paced.shed is not None and paced.shed.cause is ShedCause.CAP
        refused = Admission(
            False,
            Reason.IN_FLIGHT_CAP if full else Reason.UPSTREAM_SATURATED,
            paced.retry_after,
            breaker.state,
            False,
            permits=0,
            shed=paced.shed,
        )
        return _with(state, breaker=breaker, pacer=pacer), refused
    granted = paced.permits
    # One deposit per answer, not per permit (see the module docstring).
    budget = state.budget if retry else _budget.deposit(state.budget, config.retry_budget, now)
    lease = _pacer.LEASE if granted > 1 else None
    holds_slot = config.rate_limit.max_in_flight is not None
    return (
        _with(state, breaker=breaker, budget=budget, pacer=pacer),
        Admission(
            True,
            None,
            None,
            breaker.state,
            probe,
            paced.wait,
            granted,
            lease,
            holds_slot=holds_slot,
        ),
    )


def record_outcome(
    state: UpstreamState,
    config: UpstreamConfig,
    now: float,
    outcome: Outcome,
    admitted_at: float | None = None,
) -> UpstreamState:
    """The state after one admitted call's outcome.

    `admitted_at`: when the pod admitted the call, when the outcome named a
    live admission of this upstream (the daemon checks the id); None
    otherwise, and then the learned concurrency limit does not read it
    (squawk.policy.aimd): everything else does.

    Raises PolicyInputError naming the field for an outcome it cannot read
    (a status outside 0 and 100..599, a negative retry_after).
    """
    check_outcome(outcome)
    counted = config.verdict(outcome)
    breaker = _breaker.record(
        state.breaker, config.circuit_breaker, now, config.breaker_verdict(outcome)
    )
    budget = _budget.record(state.budget, config.retry_budget, config.throttle_verdict(outcome))
    throttled = is_throttled(outcome)
    quota_throttle = is_quota_throttle(outcome)
    sample = PaceSample(
        quota_throttle,
        counted is Verdict.SUCCESS,
        counted is not Verdict.IGNORED,
        outcome.latency,
        outcome.cost,
        outcome.estimated,
        outcome.hint,
        outcome.retry_after,
        admitted_at,
        outcome.age,
        outcome.success
        or (outcome.http_status >= 100 and not outcome.transport_failure and not quota_throttle),
    )
    # Who answers a throttle (docs/upstreams.md §Pacing): a learned pace's
    # cut, unless its Retry-After is past CLOSED_AFTER (the upstream is
    # closed, not full) or comes with a quota not spent (from headers no
    # throttle has contradicted yet: doubted ones say nothing of why the
    # upstream refuses, see header_quota.read); the quota it carries,
    # when it has no Retry-After; else the cool-down. A Retry-After wins
    # over a quota, as GitHub documents for its secondary limits (a 403 or
    # 429 whose x-ratelimit-remaining is not 0): the quota does not say why
    # the upstream refused, the Retry-After says how long; and the fleet's
    # store, which learns no pace, reads the same outcome the same way
    # (squawk.policy.fleet.outcome).
    pacer = _pacer.observe(
        state.pacer, config.rate_limit, now, sample, max_hold=config.max_cool_down
    )
    spoke = outcome.hint is not None  # the upstream named its quota
    believed = pacer.quota.doubted_until <= now
    learned = (
        throttled
        and not _closed(outcome.retry_after)
        and not (outcome.retry_after is not None and believed and _unspent(outcome.hint))
        and _pacer.pace_source(pacer, config.rate_limit, now) is PaceSource.LEARNED
    )
    if throttled and spoke and outcome.retry_after is None:
        learned = learned or (
            _pacer.pace_source(pacer, config.rate_limit, now) is PaceSource.HEADERS
        )
    until = state.cool_until
    if counted is Verdict.FAILURE and not learned:
        until = cool_down(
            until, now, outcome.retry_after, config.share_retry_after, config.max_cool_down
        )
    return _with(state, breaker=breaker, budget=budget, cool_until=until, pacer=pacer)


def _unspent(hint: RateLimitHint | None) -> bool:
    """Whether the quota a throttle carries says calls are left (GitHub's
    secondary limits: a refusal while x-ratelimit-remaining is not 0), so
    its Retry-After, not the quota or a pace, says why and how long."""
    if hint is None:
        return False
    quota = hint.requests or hint.tokens
    return quota is not None and quota.remaining is not None and quota.remaining >= 1.0


def _closed(retry_after: timedelta | None) -> bool:
    return retry_after is not None and retry_after > CLOSED_AFTER


def upstream_snapshot(state: UpstreamState, config: UpstreamConfig, now: float) -> UpstreamSnapshot:
    """What the state says at `now`, for display; it changes nothing."""
    breaker = _breaker.advance(state.breaker, config.circuit_breaker, now)
    if breaker.state is BreakerState.CLOSED:
        calls, failures, wait = breaker.window.first, breaker.window.second, None
    else:
        calls = breaker.successes + breaker.failures
        failures = breaker.failures
        wait = time_left(breaker.until, now)
    return UpstreamSnapshot(
        breaker.state,
        calls,
        failures,
        breaker.probes,
        wait,
        time_left(state.cool_until, now),
        _budget.retries_left(state.budget, config.retry_budget, now),
        _pacer.pacer_snapshot(state.pacer, config.rate_limit, now, max_hold=config.max_cool_down),
    )


def is_idle(state: UpstreamState, config: UpstreamConfig, now: float) -> bool:
    """Whether a fresh UpstreamState would behave exactly as `state` from `now` on."""
    view = upstream_snapshot(state, config, now)
    return (
        view.breaker_state is BreakerState.CLOSED
        and view.calls == 0
        and not view.cooldown_left
        and _budget.is_fresh(state.budget, config.retry_budget, now)
        and _pacer.pacer_is_idle(state.pacer, config.rate_limit, now)
    )


def _with(
    state: UpstreamState,
    *,
    breaker: Breaker | None = None,
    budget: Budget | None = None,
    cool_until: float | None = None,
    pacer: Pacer | None = None,
) -> UpstreamState:
    # The same value back when nothing changed, so a caller can skip a write.
    breaker = state.breaker if breaker is None else breaker
    budget = state.budget if budget is None else budget
    until = state.cool_until if cool_until is None else cool_until
    pacer = state.pacer if pacer is None else pacer
    if (
        breaker is state.breaker
        and budget is state.budget
        and until == state.cool_until
        and pacer is state.pacer
    ):
        return state
    return UpstreamState(breaker, budget, until, pacer)
