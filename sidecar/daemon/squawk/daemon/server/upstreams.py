"""The pod's one state per (profile, upstream), shared by every executor.

The pure core decides (squawk.policy: `admit`, `record_outcome`,
`guard_retry`); this module owns the one current value per key, with the
monotonic clock, and bounds memory: at most `Policy.max_upstreams` keys,
the least recently used dropped first (a dropped key starts afresh, as a
never-seen upstream would). An empty upstream is never tracked.

All calls come from the event loop's thread, so no lock is needed: each
read-modify-write below runs without an `await` in between.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import NamedTuple

from squawk.policy import (
    Admission,
    BreakerState,
    Decision,
    Outcome,
    Policy,
    Profile,
    UpstreamConfig,
    UpstreamSnapshot,
    UpstreamState,
    admit,
    guard_retry,
    record_outcome,
    upstream_snapshot,
)
from squawk.policy.breaker import advance
from squawk.policy.cooldown import held
from squawk.policy.retry_budget import carried
from squawk.policy.timing import EMPTY

__all__ = ["Transition", "UpstreamView", "Upstreams"]

Key = tuple[str, str]  # (profile name, upstream)
# How many of the oldest keys eviction looks through for a quiet one.
_EVICTION_SCAN = 16


class Transition(NamedTuple):
    """A breaker changed state: the pod's own, or (fleet) the fleet's on Redis."""

    profile: str
    upstream: str
    before: BreakerState
    after: BreakerState
    fleet: bool = False


class UpstreamView(NamedTuple):
    profile: str
    upstream: str
    snapshot: UpstreamSnapshot
    # How long the breaker has been in its state.
    state_age: timedelta


@dataclass(slots=True)
class _Entry:
    state: UpstreamState
    # When the breaker entered its current state (monotonic seconds).
    since: float


class Upstreams:
    def __init__(
        self,
        policy: Policy,
        clock: Callable[[], float] = time.monotonic,
        on_transition: Callable[[Transition], None] | None = None,
    ) -> None:
        self._policy = policy
        self._clock = clock
        self._on_transition = on_transition
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()

    def use_policy(self, policy: Policy) -> None:
        """Keep every upstream's state under a new policy: its breaker state,
        cool-down and budget go on. A profile that is gone takes its keys
        with it; a window whose length or buckets changed starts empty, as
        its buckets' numbers no longer mean the same time; a budget whose
        settings changed keeps what squawk.policy.retry_budget.carried says
        (a token bucket its fill fraction, never a refill); a lower
        max_cool_down shortens a running cool-down to it (the fleet's store
        does the same)."""
        old, self._policy = self._policy, policy
        for key, entry in list(self._entries.items()):
            if key[0] not in policy.profiles:
                del self._entries[key]
                continue
            was = old.profile(key[0]).for_upstream(key[1])
            now = policy.profile(key[0]).for_upstream(key[1])
            state = entry.state
            a, b = was.circuit_breaker, now.circuit_breaker
            if (a.window, a.buckets) != (b.window, b.buckets):
                state = replace(state, breaker=replace(state.breaker, window=EMPTY))
            if was.retry_budget != now.retry_budget:
                budget = carried(state.budget, was.retry_budget, now.retry_budget)
                state = replace(state, budget=budget)
            if now.max_cool_down < was.max_cool_down:
                until = held(state.cool_until, self._clock(), now.max_cool_down)
                state = replace(state, cool_until=until)
            entry.state = state

    @property
    def max_upstreams(self) -> int:
        return self._policy.max_upstreams

    def __len__(self) -> int:
        return len(self._entries)

    def _entry(self, key: Key, now: float) -> _Entry:
        entry = self._entries.get(key)
        if entry is None:
            if len(self._entries) >= self._policy.max_upstreams:
                self._evict(now)
            entry = self._entries[key] = _Entry(UpstreamState(), now)
        else:
            self._entries.move_to_end(key)
        return entry

    def _evict(self, now: float) -> None:
        """Drop one key: among the oldest few, the least recently used whose
        breaker is closed and which is not cooling down, else the least
        recently used. So a caller who churns through names cannot reset an
        open breaker or a cool-down (unless every key is one)."""
        for seen, (key, entry) in enumerate(self._entries.items()):
            if seen == _EVICTION_SCAN:
                break
            state = entry.state
            if state.breaker.state is BreakerState.CLOSED and state.cool_until <= now:
                del self._entries[key]
                return
        self._entries.popitem(last=False)

    def _current(self, key: Key, config: UpstreamConfig, now: float) -> _Entry:
        """The key's entry with time's own step taken (OPEN -> HALF_OPEN, a
        stale half-open round restarting), reported before the event's, so
        every transition reported is one the breaker has."""
        entry = self._entry(key, now)
        moved = advance(entry.state.breaker, config.circuit_breaker, now)
        if moved is not entry.state.breaker:
            self._store(key, entry, replace(entry.state, breaker=moved), now)
        return entry

    def _store(self, key: Key, entry: _Entry, state: UpstreamState, now: float) -> None:
        before, after = entry.state.breaker.state, state.breaker.state
        entry.state = state
        if before is not after:
            entry.since = now
            if self._on_transition is not None:
                self._on_transition(Transition(key[0], key[1], before, after))

    def admit(self, profile: Profile, upstream: str) -> Admission:
        now = self._clock()
        key = (profile.name, upstream)
        config = profile.for_upstream(upstream)
        entry = self._current(key, config, now)
        state, admission = admit(entry.state, config, now)
        self._store(key, entry, state, now)
        return admission

    def would_admit(self, profile: Profile, upstream: str) -> bool:
        """Whether admit() would allow a call now; changes nothing, tracks nothing."""
        entry = self._entries.get((profile.name, upstream))
        state = entry.state if entry is not None else UpstreamState()
        return admit(state, profile.for_upstream(upstream), self._clock())[1].allowed

    def record(self, profile: Profile, upstream: str, outcome: Outcome) -> None:
        now = self._clock()
        key = (profile.name, upstream)
        config = profile.for_upstream(upstream)
        entry = self._current(key, config, now)
        state = record_outcome(entry.state, config, now, outcome)
        self._store(key, entry, state, now)

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
        state = record_outcome(entry.state, config, now, outcome)
        state, decision = guard_retry(state, config, now, decision, deadline)
        self._store(key, entry, state, now)
        return decision

    def views(self, profile: str = "") -> list[UpstreamView]:
        """Every tracked upstream (of `profile`, when given), sorted by key."""
        now = self._clock()
        out = []
        for (name, upstream), entry in sorted(self._entries.items()):
            if profile and name != profile:
                continue
            config = self._policy.profile(name).for_upstream(upstream)
            snapshot = upstream_snapshot(entry.state, config, now)
            stored = entry.state.breaker
            # An OPEN breaker whose time is up reads as HALF_OPEN since `until`.
            since = entry.since if snapshot.breaker_state is stored.state else stored.until
            out.append(UpstreamView(name, upstream, snapshot, timedelta(seconds=now - since)))
        return out
