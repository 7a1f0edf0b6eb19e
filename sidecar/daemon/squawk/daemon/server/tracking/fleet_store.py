"""The Redis store: every pod's counts, summed; each pod decides from memory.

No call waits on Redis: the calls here answer from the pod's own state and
its last view of the fleet's (fleet_view.py), and a background loop
(fleet_sync.py) syncs, through the sync link (fleet_link.py), the
upstreams the pod touched lately. Outages are the outage machine's
(fleet_outage.py, fed by fleet_watch.py). Why it works this way, what it
costs and how it fails: docs/fleet.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from squawk.policy import (
    Action,
    Admission,
    BreakerState,
    Decision,
    Outcome,
    Profile,
    guard_fleet,
)
from squawk.policy.fleet import (
    FleetSnapshot,
    FleetView,
    admitted,
    asked,
    fleet_snapshot,
    refusal,
    retried,
    retry_answer,
    shown_share,
    state_at,
    take_probe,
)
from squawk.policy.fleet import outcome as with_outcome
from squawk.policy.text import shown_text
from squawk.policy.timing import seconds
from squawk.wire import NO_ADMIT_ARGS, AdmitArgs

from ...config.state import StateSettings
from ...throttle import LOG_EVERY_S, Throttle
from . import fleet_view as view_of
from .fleet_link import Key, SyncLink
from .fleet_outage import Event
from .fleet_redis import REDIS_EXTRA_MISSING, RedisLine
from .fleet_sync import SyncLoop
from .fleet_view import Tracked
from .fleet_watch import OutageWatch
from .pod_store import PodStore, Source
from .registry import Transition, Upstreams

__all__ = ["REDIS_EXTRA_MISSING", "FleetStore"]

log = logging.getLogger(__name__)

_SEVERITY = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}


class FleetStore(PodStore):
    """The calls, answered from memory; the sync loop and the outages.
    `clock` is the one clock every part reads."""

    def __init__(
        self,
        upstreams: Upstreams,
        settings: StateSettings,
        on_transition: Callable[[Transition], None] | None = None,
        on_up: Callable[[bool], None] | None = None,
        on_dropped: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_restored: Callable[[str, str, str], None] | None = None,
    ) -> None:
        super().__init__(upstreams)
        self.settings = settings
        self.interval_s = seconds(settings.sync)
        # A round trip slower than the deadline, or than a sync interval, is
        # late: a pipeline of many upstreams may take longer than a deadline
        # meant for one call (the old meaning of the setting).
        self._late_s = max(seconds(settings.deadline), self.interval_s)
        self._redis = RedisLine(settings, self._late_s)
        self._clock = clock
        throttle = Throttle(LOG_EVERY_S, clock)
        self._soon = asyncio.Event()
        # The sync link, sans I/O; the benchmark drives it directly.
        self.link = SyncLink(
            upstreams,
            settings,
            self.interval_s,
            throttle,
            clock,
            on_transition,
            on_restored,
            on_dropped,
            on_new=self._soon.set,
            on_odd=self._odd,
        )
        self._watch = OutageWatch(self._redis, settings.where, throttle, clock, on_up, self._spawn)
        self._loop = SyncLoop(self.link, self._redis, self._watch, clock, self._late_s, self._soon)
        self._tasks: set[asyncio.Task[None]] = set()
        self._throttle = throttle

    @property
    def dropped(self) -> int:
        """Writes the fleet never got, since start (the metric's value)."""
        return self.link.dropped

    def describe(self) -> str:
        return f"redis at {self.settings.where} as pod {self.link.pod!r}"

    async def start(self) -> None:
        try:
            await self._redis.ping()
        except Exception as exc:
            self._watch.step(Event.FAILED, exc)
        self._spawn(self._loop.run())

    async def aclose(self) -> None:
        self._watch.closing = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._redis.aclose()

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the calls: from memory ---------------------------------------------

    async def admit(
        self, profile: Profile, upstream: str, args: AdmitArgs = NO_ADMIT_ARGS
    ) -> tuple[Admission, Source | None]:
        # The fleet's refusal comes first, from memory: a half-open pod's
        # probe slot is never taken for a call the fleet refuses.
        now = self._clock()
        tracked = self.link.track(profile, upstream, now)
        config = profile.for_upstream(upstream)
        view = None if tracked is None else self._view(tracked, now)
        refused = refusal(view, config, now, args.deadline, self.upstreams.rng)
        if refused is not None:
            if tracked is not None:
                tracked.delta = asked(tracked.delta, refused)
            return refused, self._source()
        permits = args.permits
        if view is not None and state_at(view, now) is not BreakerState.CLOSED:
            permits = 1
        share = self._share(tracked, now)
        local = self.upstreams.admit(
            profile,
            upstream,
            args.deadline,
            args.cost,
            permits,
            share,
            args.criticality,
            args.fairness,
        )
        if tracked is not None:
            tracked.delta = asked(tracked.delta, local)
        if not local.allowed or tracked is None:
            return local, self._source()
        tracked.delta = admitted(tracked.delta, config, now)
        if view is None:
            return local, self._source()
        tracked.view, probe = take_probe(view, now)
        state = state_at(view, now)
        worst = max(local.breaker_state, state, key=_SEVERITY.__getitem__)
        return local._replace(breaker_state=worst, probe=local.probe or probe), self._source()

    async def after_failure(
        self,
        profile: Profile,
        upstream: str,
        outcome: Outcome,
        decision: Decision,
        deadline: timedelta | None,
    ) -> tuple[Decision, Source | None]:
        local = self.upstreams.after_failure(profile, upstream, outcome, decision, deadline)
        now = self._clock()
        tracked = self.link.track(profile, upstream, now)
        if tracked is None:
            return local, self._source()
        config = profile.for_upstream(upstream)
        tracked.delta = with_outcome(tracked.delta, config, now, outcome)
        if local.action is not Action.RETRY:
            return local, self._source()
        answer = retry_answer(self._view(tracked, now), config, now, tracked.delta)
        if answer is not None:
            local = guard_fleet(local, answer, deadline, self.upstreams.rng)
        if local.action is Action.RETRY:
            tracked.delta = retried(tracked.delta, config, now)
        return local, self._source()

    def record(self, outcomes: Sequence[tuple[Profile, str, Outcome]]) -> None:
        super().record(outcomes)
        now = self._clock()
        for profile, upstream, outcome in outcomes:
            tracked = self.link.track(profile, upstream, now)
            if tracked is not None:
                config = profile.for_upstream(upstream)
                tracked.delta = with_outcome(tracked.delta, config, now, outcome)

    def fleet_views(self, profile: str = "") -> dict[Key, FleetSnapshot]:
        now = self._clock()
        self._read_quiet(profile, now)
        return {
            key: fleet_snapshot(
                view,
                t.profile.for_upstream(key[1]),
                now,
                shown_share(t.leased, now, self._share(t, now), self.upstreams.divided(key)),
            )
            for key, t in self.link.tracked.items()
            if (view := self._view(t, now)) is not None and (not profile or key[0] == profile)
        }

    def _read_quiet(self, profile: str, now: float) -> None:
        """The upstreams the pod's own state lists (of `profile`) that this
        store stopped syncing, quiet for over ACTIVE_S, tracked again: each
        is synced at once, so a listing a sync later shows the fleet's view
        of it (a fleet breaker that opened after the pod went quiet, a
        cool-down), kept while it holds caution. Only when asked: a pod
        that synced every quiet name it ever called would cost Redis a
        script per name per interval. Never past the bound, and never a
        write counted as dropped."""
        if not self._watch.up:
            return
        policy = self.upstreams.policy
        keys, _ = self.upstreams.page(profile=profile)
        for _, key in keys:
            if len(self.link.tracked) >= self.link.most:
                return
            if key not in self.link.tracked and key[0] in policy.profiles:
                self.link.track(policy.profile(key[0]), key[1], now)

    def _view(self, tracked: Tracked, now: float) -> FleetView | None:
        return view_of.current(tracked, now, self._watch.up, self.interval_s)

    def _share(self, tracked: Tracked | None, now: float) -> float:
        return view_of.share(tracked, now, self._watch.up, self.settings.fallback_share)

    def _source(self) -> Source:
        if self._watch.up:
            return Source.FLEET
        # Every answer marked LOCAL while the store is away is counted for
        # the line that says the outage ended, as the metric
        # (squawk_state_answers_total{state="local"}) counts it.
        self._watch.step(Event.LOCAL_ANSWER)
        return Source.LOCAL

    async def sync(self, new_only: bool = False) -> int:
        """One sync of every upstream due (`new_only`: of those never synced
        yet): the number synced."""
        return await self._loop.sync(new_only)

    def _odd(self, exc: BaseException) -> None:
        held = self._throttle.ready("odd")
        if held is not None:
            log.warning(
                "fleet state store %s: an answer this daemon cannot use (%s: %s)%s; "
                "that upstream decided from this pod's own state",
                self.settings.where,
                type(exc).__name__,
                shown_text(str(exc), 200),
                f" ({held} more since the last report)" if held else "",
            )
