"""The pod's one state per (profile, upstream), shared by every executor.

The pure core decides (squawk.policy: `admit`, `record_outcome`,
`guard_retry`); this module owns the one current value per key, with the
monotonic clock, and bounds memory without ever making an upstream less
cautious:

- Every name in the policy file's `upstreams:` sections is tracked from the
  start and never dropped: an operator's way to be sure of a name.
- Callers' other names are kept in least recently used order, at most
  `Policy.max_upstreams` of them. A new name takes the place of an *idle*
  one only (`is_idle`: a fresh state would behave exactly the same), so no
  flood of other names can drop an open breaker, a half-open round, a
  running cool-down, a spent budget or the counts in a closed breaker's
  window. The alternative, dropping any closed breaker without a cool-down,
  would let a flood erase the failures that were about to open a breaker,
  and the successes of every upstream in use: recent counts are what keep
  a name in use tracked.
- When no tracked name is idle, a new name is not tracked: its call is
  answered from its profile's one *overflow* state (`on_untracked` says
  so), a breaker and a budget shared by every name the pod could not
  track. A flood therefore costs no memory, and cannot leave a failing new
  upstream unprotected either: the flood's own failures and the new name's
  open the overflow breaker for every untracked name, more cautious than a
  state of its own. The alternative, a fresh state thrown away after each
  call, let one batch of junk names a minute switch the breaker, budget
  and cool-down off for every upstream that started failing afterwards.
  The overflow shares no cool-down: one name's Retry-After says nothing of
  another's (the executor that got it still waits it out). Nor does it
  pace (`_untracked`): one name's "nothing left until the reset", its
  throttles or its latency would otherwise hold, pace or limit every
  untracked name together, for up to five minutes; and the profile's
  declared rate is each upstream's, not one for all the untracked names.
  So the overflow learns nothing, has no concurrency limit, reads no
  rate-limit headers, and a declared rate does not apply to it: each
  executor still paces its own call by the Retry-After it got.

An empty upstream is never tracked. Each tracked key has a sequence number,
given when tracking began, that orders listings (`page`): the policy
file's names come first, and a page token stays valid however many keys
come and go.

All calls come from the event loop's thread, so no lock is needed: each
read-modify-write below runs without an `await` in between.
"""

from __future__ import annotations

import bisect
import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import NamedTuple

from squawk.policy import (
    Admission,
    BreakerState,
    Criticality,
    Decision,
    Fairness,
    Outcome,
    PaceSource,
    Policy,
    Profile,
    RateLimitConfig,
    Reason,
    UpstreamConfig,
    UpstreamSnapshot,
    UpstreamState,
    admit,
    guard_retry,
    is_idle,
    pacer_snapshot,
    record_outcome,
    upstream_snapshot,
)
from squawk.policy.breaker import advance
from squawk.policy.cooldown import held
from squawk.policy.outcome import is_near_limit, is_throttled
from squawk.policy.pacer import SHARED_SOURCES, hold_at_most, pace_source
from squawk.policy.retry_budget import carried
from squawk.policy.timing import EMPTY
from squawk.policy.why import breaker_cause, outcome_text, pace_cause

from .admissions import Admissions

__all__ = [
    "NO_PACE",
    "CoolDown",
    "Key",
    "PaceChange",
    "Transition",
    "UpstreamView",
    "Upstreams",
    "pinned_keys",
]

Key = tuple[str, str]  # (profile name, upstream)
# How many of the least recently used keys a new name looks through for an
# idle one. Those that are not idle go to the back of the line, so the next
# new name looks at others: a key that stays busy is never looked at twice
# in a row, and the cost of a new name stays bounded however full it is.
_EVICTION_SCAN = 16
# After a look finds no idle key, new names go untracked without looking
# for this long: a flood of new names then costs one dict lookup each.
_FULL_RECHECK_S = 0.1
_FRESH = UpstreamState()
# A key's pace is looked at (pacer_snapshot) at most this often, after an
# Admit or an outcome: what the span attributes, the rate gauge and the
# change log read. Every call would cost a snapshot per dispatch; a tenth
# of a second is well inside what a person or a scrape sees.
_PACE_LOOK_S = 0.1
# A learned or announced rate that moves by more than this share since the
# last change reported is a change (a log line, the gauge): CUBIC moves a
# little on every bucket, and a line per bucket would be noise.
PACE_CHANGE_RATIO = 0.2
NO_PACE = (PaceSource.NONE, 0.0)
# The overflow state's pace settings: nothing declared, nothing learned, no
# concurrency limit. With the outcomes' rate-limit hints dropped too, its
# pacer never paces (see the module docstring).
_NO_PACE = RateLimitConfig(learn=False, concurrency=False)


class PaceChange(NamedTuple):
    """A key's pace changed source, or its rate moved by over PACE_CHANGE_RATIO."""

    profile: str
    upstream: str
    before: PaceSource
    after: PaceSource
    rate_before: float
    rate_after: float
    # Why, with what the latest outcome that read a quota or was throttled
    # said (squawk.policy.why.pace_cause).
    cause: str = ""


class Transition(NamedTuple):
    """A breaker changed state: the pod's own, or (fleet) the fleet's on Redis."""

    profile: str
    upstream: str
    before: BreakerState
    after: BreakerState
    fleet: bool = False
    # Whether the pod tracks the key: a fleet's transition may be about a
    # name the pod could not track, which must not take a metric label.
    tracked: bool = True
    # Why: the rule that fired, and the outcome that moved it (squawk.policy.why).
    cause: str = ""
    # OPEN: seconds until it half-opens by itself; None otherwise.
    left: float | None = None


class CoolDown(NamedTuple):
    """A key's shared cool-down began."""

    profile: str
    upstream: str
    # Seconds until it ends, from now.
    left: float
    # The outcome that started it (squawk.policy.why.outcome_text).
    cause: str


class UpstreamView(NamedTuple):
    profile: str
    upstream: str
    snapshot: UpstreamSnapshot
    # How long the breaker has been in its state.
    state_age: timedelta
    # Calls admitted with a wait, and refused UPSTREAM_SATURATED, since
    # tracking began.
    paced: int = 0
    shed: int = 0
    # Outcomes reported throttled (squawk.policy.outcome.is_throttled) since then.
    throttled: int = 0
    # Answers whose headers said the quota is nearly used
    # (squawk.policy.outcome.is_near_limit) since then.
    near_limit: int = 0
    # Calls admitted (each permit of a grant), and outcomes reported
    # successful, since then.
    admitted: int = 0
    succeeded: int = 0


@dataclass(slots=True)
class _Entry:
    state: UpstreamState
    # When the breaker entered its current state (monotonic seconds).
    since: float
    # When tracking began, in order: what listings are ordered and paged by.
    seq: int
    # Calls admitted with a wait, and refused UPSTREAM_SATURATED, and
    # outcomes reported throttled, since then.
    paced: int = 0
    shed: int = 0
    throttled: int = 0
    near_limit: int = 0
    admitted: int = 0
    succeeded: int = 0
    # The latest outcome that read a quota or was throttled: the pace's cause.
    told: Outcome | None = None
    # The pace as last looked at (source, calls/s), when, and as last reported.
    pace: tuple[PaceSource, float] = NO_PACE
    pace_at: float = float("-inf")
    pace_shown: tuple[PaceSource, float] = NO_PACE


def pinned_keys(policy: Policy) -> frozenset[Key]:
    """The keys named in the policy file: each profile's `upstreams:` entries."""
    return frozenset(
        (name, upstream)
        for name, profile in policy.profiles.items()
        for upstream in profile.upstreams
    )


class Upstreams:
    def __init__(
        self,
        policy: Policy,
        clock: Callable[[], float] = time.monotonic,
        on_transition: Callable[[Transition], None] | None = None,
        on_forget: Callable[[str, str], None] | None = None,
        on_untracked: Callable[[str], None] | None = None,
        rng: random.Random | None = None,
        on_pace: Callable[[PaceChange], None] | None = None,
        on_cool_down: Callable[[CoolDown], None] | None = None,
        on_near_limit: Callable[[str, str], None] | None = None,
    ) -> None:
        """`on_forget(profile, upstream)`: a key was dropped (its metric
        series may go); `on_untracked(profile)`: a call about a new name
        was answered from a fresh state, for want of an idle key to drop.
        `rng` jitters every refusal's wait (squawk.policy.cooldown.spread);
        `on_pace(change)`: a tracked key's pace changed (see PaceChange);
        `on_cool_down(c)`: a tracked key's cool-down began (see CoolDown);
        `on_near_limit(profile, upstream)`: a tracked key's answer said its
        quota is nearly used."""
        self._policy = policy
        self._clock = clock
        self.rng = rng if rng is not None else random.Random()
        self._on_transition = on_transition
        self._on_forget = on_forget
        self._on_untracked = on_untracked
        self._on_pace = on_pace
        self._on_cool_down = on_cool_down
        self._on_near_limit = on_near_limit
        # The policy file's names, and (least recently used first) the rest.
        self._pinned: dict[Key, _Entry] = {}
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        # Every tracked key's sequence number, ascending, and its key.
        self._order: list[int] = []
        self._keys: dict[int, Key] = {}
        self._next_seq = 0
        self._full_until = float("-inf")
        # Per profile: the one state of every name it could not track.
        self._overflow: dict[str, UpstreamState] = {}
        # The tracked keys' live admissions, which outcomes name (admissions.py).
        self.admissions = Admissions()
        self._pin(policy, clock())

    def use_policy(self, policy: Policy) -> None:
        """Keep every upstream's state under a new policy: its breaker state,
        cool-down and budget go on, as _carried says, and so do the
        overflow states'. A profile that is gone takes its keys with it."""
        old, self._policy = self._policy, policy
        # Every key is looked at alike; _pin then picks the file's names again.
        self._entries.update(self._pinned)
        self._pinned.clear()
        for key, entry in list(self._entries.items()):
            if key[0] not in policy.profiles:
                self._drop(self._entries, key)
                continue
            was = old.profile(key[0]).for_upstream(key[1])
            now = policy.profile(key[0]).for_upstream(key[1])
            entry.state = _carried(entry.state, was, now, self._clock())
        for name, state in list(self._overflow.items()):
            if name not in policy.profiles:
                del self._overflow[name]
                continue
            was = _untracked(old.profile(name).for_upstream(""))
            now = _untracked(policy.profile(name).for_upstream(""))
            self._overflow[name] = _carried(state, was, now, self._clock())
        self._pin(policy, self._clock())

    def _pin(self, policy: Policy, now: float) -> None:
        """Track every name the policy file lists, first and for good; a name
        it no longer lists joins the callers' names, state and all."""
        for key in sorted(pinned_keys(policy)):
            entry = self._entries.pop(key, None)
            self._pinned[key] = entry if entry is not None else self._new(key, now)
        self._full_until = float("-inf")

    @property
    def max_upstreams(self) -> int:
        return self._policy.max_upstreams

    @property
    def policy(self) -> Policy:
        return self._policy

    def __len__(self) -> int:
        return len(self._pinned) + len(self._entries)

    def _new(self, key: Key, now: float) -> _Entry:
        seq = self._next_seq
        self._next_seq += 1
        self._order.append(seq)  # ascending: every new number is the largest
        self._keys[seq] = key
        return _Entry(_FRESH, now, seq)

    def _drop(self, table: dict[Key, _Entry], key: Key) -> None:
        entry = table.pop(key)
        del self._order[bisect.bisect_left(self._order, entry.seq)]
        del self._keys[entry.seq]
        self.admissions.drop(key)
        if self._on_forget is not None:
            self._on_forget(*key)

    def _entry(self, key: Key, now: float) -> _Entry | None:
        """The key's entry, tracking it if there is room; None when there is not."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            return entry
        entry = self._pinned.get(key)
        if entry is not None:
            return entry
        if len(self._entries) >= self._policy.max_upstreams and not self._evict(now):
            if self._on_untracked is not None:
                self._on_untracked(key[0])
            return None
        entry = self._entries[key] = self._new(key, now)
        return entry

    def _evict(self, now: float) -> bool:
        """Drop one idle key, the least recently used of the few looked at;
        False when none of them is idle (and none is dropped)."""
        if now < self._full_until:
            return False
        entries = self._entries
        for _ in range(min(_EVICTION_SCAN, len(entries))):
            key, entry = next(iter(entries.items()))
            state = entry.state
            # The cheap tests first: an open breaker or a cool-down is never idle.
            if (
                state.breaker.state is BreakerState.CLOSED
                and state.cool_until <= now
                and is_idle(state, self._config(key), now)
            ):
                self._drop(entries, key)
                return True
            entries.move_to_end(key)
        self._full_until = now + _FULL_RECHECK_S
        return False

    def _config(self, key: Key) -> UpstreamConfig:
        return self._policy.profile(key[0]).for_upstream(key[1])

    def _current(self, key: Key, config: UpstreamConfig, now: float) -> _Entry | None:
        """The key's entry with time's own step taken (OPEN -> HALF_OPEN, a
        stale half-open round restarting), reported before the event's, so
        every transition reported is one the breaker has. None: untracked."""
        entry = self._entry(key, now)
        if entry is None:
            return None
        moved = advance(entry.state.breaker, config.circuit_breaker, now)
        if moved is not entry.state.breaker:
            self._store(key, entry, replace(entry.state, breaker=moved), now, config)
        return entry

    def _store(
        self,
        key: Key,
        entry: _Entry,
        state: UpstreamState,
        now: float,
        config: UpstreamConfig,
        outcome: Outcome | None = None,
    ) -> None:
        """Keep `state` as the key's, reporting a breaker transition and a
        cool-down begun, each with its cause (`outcome`: what moved it)."""
        was = entry.state
        before, after = was.breaker.state, state.breaker.state
        entry.state = state
        if before is not after:
            entry.since = now
            if self._on_transition is not None:
                cause = breaker_cause(state.breaker, before, config.circuit_breaker)
                if outcome is not None:
                    cause += f"; last: {outcome_text(outcome)}"
                left = state.breaker.until - now if after is BreakerState.OPEN else None
                self._on_transition(
                    Transition(key[0], key[1], before, after, False, True, cause, left)
                )
        # A cool-down begun, not one a later hint pushes on: every throttled
        # outcome of a storm may do that, and each would be an event.
        begun = was.cool_until <= now < state.cool_until
        if begun and outcome is not None and self._on_cool_down is not None:
            left = state.cool_until - now
            self._on_cool_down(CoolDown(key[0], key[1], left, outcome_text(outcome)))

    def admit(
        self,
        profile: Profile,
        upstream: str,
        deadline: timedelta | None = None,
        cost: float = 0.0,
        permits: int = 1,
        share: float = 1.0,
        criticality: Criticality | None = None,
        fairness: Fairness | None = None,
    ) -> Admission:
        """The core's admit() on the key's state: `deadline` (time left of
        the step; None = none), `cost` (estimated token units), `permits`,
        `share`, `criticality` and `fairness` as squawk.policy.upstream.admit
        reads them."""
        now = self._clock()
        key = (profile.name, upstream)
        config = profile.for_upstream(upstream)
        entry = self._current(key, config, now)
        if entry is None:
            config = _untracked(config)
            state = self._overflow_state(profile.name, config, now)
            state, admission = admit(
                state,
                config,
                now,
                rng=self.rng,
                deadline=deadline,
                cost=cost,
                permits=permits,
                criticality=criticality,
                fairness=fairness,
            )
            self._overflow[profile.name] = state
            return admission
        state, admission = admit(
            entry.state,
            config,
            now,
            rng=self.rng,
            deadline=deadline,
            cost=cost,
            permits=permits,
            share=share,
            criticality=criticality,
            fairness=fairness,
        )
        self._store(key, entry, state, now, config)
        if admission.wait:
            entry.paced += 1
        elif admission.reason is Reason.UPSTREAM_SATURATED:
            entry.shed += 1
        self._look_at_pace(key, entry, config, now)
        if admission.allowed:
            entry.admitted += admission.permits
            admitted = self.admissions.add(key, now, admission.permits)
            # Built, not _replace()d: a third of the cost, on every Admit.
            admission = Admission(*admission[:-1], admitted)
        return admission

    def would_admit(
        self, profile: Profile, upstream: str, deadline: timedelta | None = None, cost: float = 0.0
    ) -> bool:
        """Whether admit() would allow a call now; changes nothing, tracks nothing."""
        entry = self._find((profile.name, upstream))
        config = profile.for_upstream(upstream)
        if entry is not None:
            state = entry.state
        else:
            config = _untracked(config)
            state = self._overflow.get(profile.name, _FRESH)
        return admit(state, config, self._clock(), deadline=deadline, cost=cost)[1].allowed

    def breaker_of(self, profile: str, upstream: str) -> BreakerState:
        """The key's breaker state as last stored (CLOSED when untracked)."""
        entry = self._find((profile, upstream))
        return BreakerState.CLOSED if entry is None else entry.state.breaker.state

    def pace_of(self, profile: str, upstream: str) -> tuple[PaceSource, float]:
        """The key's pace (source, calls/s) as last looked at: at most
        _PACE_LOOK_S old. An untracked key's reads as none."""
        entry = self._find((profile, upstream))
        return NO_PACE if entry is None else entry.pace

    def _look_at_pace(self, key: Key, entry: _Entry, config: UpstreamConfig, now: float) -> None:
        """Note the key's pace, at most every _PACE_LOOK_S; report a change."""
        if now - entry.pace_at < _PACE_LOOK_S:
            return
        entry.pace_at = now
        snap = pacer_snapshot(
            entry.state.pacer, config.rate_limit, now, max_hold=config.max_cool_down
        )
        entry.pace = pace = (snap.source, snap.rate)
        (before, was), (after, rate) = entry.pace_shown, pace
        if before is after and abs(rate - was) <= PACE_CHANGE_RATIO * was:
            return
        entry.pace_shown = pace
        if self._on_pace is not None:
            cause = pace_cause(after, entry.told)
            self._on_pace(PaceChange(key[0], key[1], before, after, was, rate, cause))

    def record(self, profile: Profile, upstream: str, outcome: Outcome) -> None:
        now = self._clock()
        key = (profile.name, upstream)
        config = profile.for_upstream(upstream)
        entry = self._current(key, config, now)
        if entry is None:
            config = _untracked(config)
            state = self._overflow_state(profile.name, config, now)
            self._overflow[profile.name] = record_outcome(state, config, now, _unhinted(outcome))
            return
        at = self._admitted(key, outcome, now)
        state = record_outcome(entry.state, config, now, outcome, at)
        self._store(key, entry, state, now, config, outcome)
        self._count(key, entry, outcome)
        self._look_at_pace(key, entry, config, now)

    def _count(self, key: Key, entry: _Entry, outcome: Outcome) -> None:
        entry.succeeded += outcome.success
        throttled = is_throttled(outcome)
        entry.throttled += throttled
        if throttled or outcome.hint is not None:
            entry.told = outcome
        if outcome.hint is not None and is_near_limit(outcome):
            entry.near_limit += 1
            if self._on_near_limit is not None:
                self._on_near_limit(*key)

    def after_failure(
        self,
        profile: Profile,
        upstream: str,
        outcome: Outcome,
        decision: Decision,
        deadline: timedelta | None,
    ) -> Decision:
        """Record a failed attempt DecideRetry was asked about, then let the
        upstream's state make its decision more cautious (never less)."""
        now = self._clock()
        key = (profile.name, upstream)
        config = profile.for_upstream(upstream)
        entry = self._current(key, config, now)
        if entry is None:
            config = _untracked(config)
            state = self._overflow_state(profile.name, config, now)
            outcome = _unhinted(outcome)
        else:
            state = entry.state
        at = None if entry is None else self._admitted(key, outcome, now)
        state = record_outcome(state, config, now, outcome, at)
        state, decision = guard_retry(state, config, now, decision, deadline, self.rng)
        if entry is None:
            self._overflow[profile.name] = state
        else:
            self._store(key, entry, state, now, config, outcome)
            self._count(key, entry, outcome)
            self._look_at_pace(key, entry, config, now)
        return decision

    def _admitted(self, key: Key, outcome: Outcome, now: float) -> float | None:
        """When the call of `outcome` was admitted, when it names a live
        admission of `key` (admissions.py); None otherwise, and then the
        concurrency limit does not read it (squawk.policy.aimd)."""
        if not outcome.admission_id:
            return None
        return self.admissions.use(key, outcome.admission_id, now)

    def _overflow_state(self, profile: str, config: UpstreamConfig, now: float) -> UpstreamState:
        """The profile's overflow state, with time's own step taken."""
        state = self._overflow.get(profile, _FRESH)
        moved = advance(state.breaker, config.circuit_breaker, now)
        return state if moved is state.breaker else replace(state, breaker=moved)

    def page(
        self, after: int = -1, size: int | None = None, profile: str = "", upstream: str = ""
    ) -> tuple[list[tuple[int, Key]], bool]:
        """(up to `size` tracked keys, of `profile` and named `upstream` when
        given, whose tracking began after sequence number `after`, in that
        order, each with its number; whether more follow).

        Costs a comparison per key passed over, never a snapshot: view()
        each key returned, as many at a time as the caller likes.
        """
        if upstream:
            profiles = [profile] if profile else sorted(self._policy.profiles)
            found = (self._find((p, upstream)) for p in profiles)
            seqs = sorted(e.seq for e in found if e is not None and e.seq > after)
        else:
            seqs = self._order[bisect.bisect_right(self._order, after) :]
        keys = self._keys
        out: list[tuple[int, Key]] = []
        for seq in seqs:
            key = keys[seq]
            if profile and key[0] != profile:
                continue
            if size is not None and len(out) == size:
                return out, True
            out.append((seq, key))
        return out, False

    def divided(self, key: Key) -> bool:
        """Whether the key's pace in force is one the fleet divides between
        its pods (a declared or announced rate; a learned one is the pod's own)."""
        entry = self._find(key)
        if entry is None:
            return False
        source = pace_source(entry.state.pacer, self._config(key).rate_limit, self._clock())
        return source in SHARED_SOURCES

    def tracks(self, profile: str, upstream: str) -> bool:
        """Whether the key has a state of its own (not the overflow's)."""
        return self._find((profile, upstream)) is not None

    def _find(self, key: Key) -> _Entry | None:
        entry = self._entries.get(key)
        return entry if entry is not None else self._pinned.get(key)

    def view(self, key: Key) -> UpstreamView | None:
        """The key's state now, for display; None once it is no longer tracked."""
        entry = self._find(key)
        if entry is None:
            return None
        now = self._clock()
        snapshot = upstream_snapshot(entry.state, self._config(key), now)
        stored = entry.state.breaker
        # An OPEN breaker whose time is up reads as HALF_OPEN since `until`.
        since = entry.since if snapshot.breaker_state is stored.state else stored.until
        age = timedelta(seconds=now - since)
        return UpstreamView(
            key[0],
            key[1],
            snapshot,
            age,
            entry.paced,
            entry.shed,
            entry.throttled,
            entry.near_limit,
            entry.admitted,
            entry.succeeded,
        )

    def notable(self, limit: int) -> tuple[list[Key], int]:
        """Up to `limit` tracked keys, those whose breaker is not CLOSED or
        that are cooling down first, then the rest in tracking order; and
        how many were left out. Reads stored states, no snapshot: a display
        of a full registry costs its rows alone."""
        now = self._clock()
        keys = [key for _, key in self.page()[0]]

        def calm(key: Key) -> bool:
            entry = self._find(key)
            if entry is None:
                return True
            state = entry.state
            return state.breaker.state is BreakerState.CLOSED and state.cool_until <= now

        ordered = sorted(keys, key=calm)  # stable: tracking order within each part
        return ordered[:limit], max(0, len(ordered) - limit)

    def views(self, profile: str = "") -> list[UpstreamView]:
        """Every tracked upstream (of `profile`, when given), in tracking order."""
        keys, _ = self.page(profile=profile)
        return [v for _, key in keys if (v := self.view(key)) is not None]


def _untracked(config: UpstreamConfig) -> UpstreamConfig:
    """The config an overflow state is kept by: its profile's, less the
    shared cool-down and the pace (one untracked name's hint, quota or
    throttles are not another's; see the module docstring)."""
    return replace(config, share_retry_after=False, rate_limit=_NO_PACE)


def _unhinted(outcome: Outcome) -> Outcome:
    """`outcome` as the overflow state reads it: without its rate-limit hint."""
    return outcome if outcome.hint is None else replace(outcome, hint=None)


def _carried(
    state: UpstreamState, was: UpstreamConfig, now: UpstreamConfig, clock: float
) -> UpstreamState:
    """`state` under a reloaded config: a window whose length or buckets
    changed starts empty, as its buckets' numbers no longer mean the same
    time; a budget whose settings changed keeps what
    squawk.policy.retry_budget.carried says (a token bucket its fill
    fraction, never a refill); a lower max_cool_down shortens a running
    cool-down to it (the fleet's store does the same)."""
    a, b = was.circuit_breaker, now.circuit_breaker
    if (a.window, a.buckets) != (b.window, b.buckets):
        state = replace(state, breaker=replace(state.breaker, window=EMPTY))
    if was.retry_budget != now.retry_budget:
        state = replace(state, budget=carried(state.budget, was.retry_budget, now.retry_budget))
    if now.max_cool_down < was.max_cool_down:
        state = replace(
            state,
            cool_until=held(state.cool_until, clock, now.max_cool_down),
            pacer=hold_at_most(
                state.pacer, held(state.pacer.quota.hold_until, clock, now.max_cool_down)
            ),
        )
    return state
