"""The Redis store: every pod's counts, summed; each pod decides from memory.

No call waits on Redis. Every pod decides each Admit and DecideRetry from
its own state and its last copy of the fleet's (squawk.policy.fleet); every
`state.sync` interval (100 ms by default) a background task sends, for each
upstream the pod touched lately (see `due`), what it saw since its last
sync (a Delta: the breaker window's outcomes, the budget's calls and
retries, a token bucket's failures and successes, the cool-down it was
told, its demand and the probe slots it wants), one script call per
upstream in one pipelined round trip, and keeps the fleet's sums that come
back (the FleetView). When the sums call for a transition of the fleet's
breaker (the quorum met, a half-open round judged: the core's rules), a
second round trip asks for it, made only if the fleet is still in the
epoch the pod read, so two pods seeing the same sums move it once.

So Redis does one script per upstream per pod per interval, whatever the
calls, and a pod learns what the others saw within one interval (plus a
round trip): that is the staleness of every fleet-wide answer for an
upstream the pod called within the last _ACTIVE_S. One quiet for longer is
not synced, and forgotten unless its view holds caution (an OPEN fleet
breaker, a cool-down, kept to their end): the first call after that
decides from the pod's own state, and syncs the name at once.

An outage (a connection error, or _LATE_IN_A_ROW syncs in a row later than
`state.deadline`) stops the syncs; it is logged once, and a background task
pings Redis with backoff. Meanwhile the pod keeps its last views (an OPEN
fleet breaker or a cool-down it read runs out on its own time; a pace share
holds for its lease, _LEASE_SYNCS intervals, then `fallback_share`), and
its deltas keep gathering: what is still inside its windows reaches the
fleet with the first sync after Redis answers again (the resync).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import random
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from importlib import resources
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from squawk.policy import (
    Action,
    Admission,
    BreakerState,
    Decision,
    Outcome,
    Profile,
    UpstreamConfig,
    guard_fleet,
)
from squawk.policy.fleet import (
    NO_DELTA,
    Delta,
    FleetSnapshot,
    FleetView,
    Move,
    Reading,
    Restore,
    admitted,
    asked,
    cautious,
    fleet_snapshot,
    kept,
    lost,
    merged,
    move,
    moved,
    pace_share,
    refusal,
    retried,
    retry_answer,
    sent,
    shown_share,
    state_at,
    take_probe,
    token_change,
    viewed,
    wanted_probes,
)
from squawk.policy.fleet import (
    demand as mean_demand,
)
from squawk.policy.fleet import (
    outcome as with_outcome,
)
from squawk.policy.text import shown_text
from squawk.policy.timing import seconds
from squawk.wire import NO_ADMIT_ARGS, AdmitArgs

from ...config import ConfigError
from ...config.state import StateSettings
from ...pem import read_pem, shown_path
from ...settings import STATE_TLS_CA, STATE_TLS_CERT, STATE_TLS_KEY
from ...throttle import LOG_EVERY_S, Throttle
from .pod_store import PodStore, Source
from .registry import Transition, Upstreams

__all__ = ["REDIS_EXTRA_MISSING", "Call", "FleetStore", "reading"]

log = logging.getLogger(__name__)

# What a daemon installed without the redis extra says when asked for the
# store. Only what exists: the checkout's own extra (make setup's dev set-up
# includes it) and the wheel `make dist` builds. The distribution is not on
# any package index, so `pip install 'squawk-daemon[redis]'` would install
# whatever anyone registered under that name.
REDIS_EXTRA_MISSING = (
    "state.store redis needs the redis client, which the daemon's redis extra installs: "
    "in the checkout, .venv/bin/pip install -e '.[redis]'; for the wheel make dist builds, "
    "pip install 'dist/python/squawk_daemon-0.1.0-py3-none-any.whl[redis]'"
)

_SCRIPT = resources.files(__package__).joinpath("fleet.lua").read_text(encoding="utf-8")
# Late syncs in a row that count as an outage.
_LATE_IN_A_ROW = 3
# Upstreams per pipeline (one round trip); a pod touching more syncs them in
# several, giving the event loop back between.
_SYNC_BATCH = 64
# An upstream touched within this long is synced every interval; one
# untouched for longer is not, and is forgotten unless its view holds
# caution. A name a caller used once costs this long of syncs.
_ACTIVE_S = 2.0
# A pace share holds for this many sync intervals without a new reading.
_LEASE_SYNCS = 10
# A view no sync renewed for this many intervals is stale (see _view).
_STALE_SYNCS = 10
# Probe slots a pod leased and has not used for this long are given back.
_PROBE_HOLD_S = 1.0
# The longest stretch a reported demand is averaged over (after an outage).
_MAX_DEMAND_SPAN_S = 60.0
# Early syncs (of names never synced) are at least this far apart.
_EARLY_GAP_S = 0.01
# A ping waits this long (nobody waits on it).
_BACKGROUND_TIMEOUT_S = 1.0
# The reconnect pings' backoff.
_PING_FIRST_S, _PING_MAX_S = 0.1, 2.0
_MAX_CONNECTIONS = 32
_KEY_CACHE = 4096
_STATES = {1: BreakerState.CLOSED, 2: BreakerState.OPEN, 3: BreakerState.HALF_OPEN}
_REPLY_LENGTH = 20
# A hostile or broken store's numbers stay within what timedelta holds.
_MAX_REPLY = 10**12

Key = tuple[str, str]


@dataclass(slots=True)
class _Tracked:
    """One upstream as this pod syncs it."""

    profile: Profile
    upstream: str
    keys: list[str]
    touched: float
    delta: Delta = NO_DELTA
    view: FleetView | None = None
    # The last view a sync read, kept for its pace share's lease when the
    # view itself is dropped (see _view and _share).
    leased: FleetView | None = None
    # When the last sync that landed was sent.
    synced_at: float = -math.inf
    # The pace's demand: the running mean the last sync reported
    # (squawk.policy.fleet.demand), and when that sync was made.
    demand: float = 0.0
    measured_at: float = -math.inf


class Call(NamedTuple):
    """One script call of a sync (or of a move, or of a write-back) and
    what it was made of."""

    tracked: _Tracked
    keys: list[str]
    words: str
    delta: Delta = NO_DELTA
    made: Move | None = None


class FleetStore(PodStore):
    def __init__(
        self,
        upstreams: Upstreams,
        settings: StateSettings,
        on_transition: Callable[[Transition], None] | None = None,
        on_up: Callable[[bool], None] | None = None,
        on_dropped: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_restored: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(upstreams)
        try:
            from redis.exceptions import NoScriptError, ResponseError
        except ImportError:  # pragma: no cover - tested in a subprocess (test_start_errors.py)
            # A configuration error (exit code 2), not a crash: the policy or
            # SQUAWK_STATE_URL asked for a store this installation cannot run.
            raise ConfigError(REDIS_EXTRA_MISSING) from None
        self.settings = settings
        self.interval_s = seconds(settings.sync)
        # A round trip slower than the deadline, or than a sync interval, is
        # late: a pipeline of many upstreams may take longer than a deadline
        # meant for one call (the old meaning of the setting).
        self._late_s = max(seconds(settings.deadline), self.interval_s)
        self._pod = settings.pod_name()
        self._clock = clock
        self._on_transition = on_transition
        self._on_up = on_up
        self._on_dropped = on_dropped
        self._on_restored = on_restored
        self._redis, self._sentinels = _connect(settings)
        self._sha = hashlib.sha1(_SCRIPT.encode()).hexdigest()
        self._up = True
        self._late = 0
        self._down_since = 0.0
        self._local_answers = 0
        self._tracked: dict[Key, _Tracked] = {}
        # The upstreams it syncs at most: as many as the pod tracks, and a
        # pipeline's worth beside, so the fleet still hears of names the
        # pod's own state could not track (its metrics label them "other").
        self._most = max(upstreams.max_upstreams, _SYNC_BATCH)
        self._args: dict[UpstreamConfig, str] = {}
        # Writes the fleet never got, since start (the metric's value).
        self.dropped = 0
        # Caution written back after the store lost it, since start (the metric's).
        self.restored = 0
        self.syncs = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._soon = asyncio.Event()
        # Upstreams whose settings differ from the fleet's, already logged.
        self._differ: set[Key] = set()
        self._closing = False
        self._outage_logged = False
        self._throttle = Throttle(LOG_EVERY_S)
        self._refusal = ResponseError
        self._no_script = NoScriptError

    def describe(self) -> str:
        return f"redis at {self.settings.where} as pod {self._pod!r}"

    async def start(self) -> None:
        try:
            async with asyncio.timeout(_BACKGROUND_TIMEOUT_S):
                await self._redis.ping()
        except Exception as exc:
            self._lost(exc)
        self._spawn(self._syncer())

    async def aclose(self) -> None:
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._redis.aclose()
        for sentinel in self._sentinels:
            await sentinel.aclose()

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the calls: from memory ---------------------------------------------

    async def admit(
        self,
        profile: Profile,
        upstream: str,
        args: AdmitArgs = NO_ADMIT_ARGS,
    ) -> tuple[Admission, Source | None]:
        # The fleet's refusal comes first, from memory: a half-open pod's
        # probe slot is never taken for a call the fleet refuses.
        now = self._clock()
        tracked = self._track(profile, upstream, now)
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
        local = self.upstreams.admit(profile, upstream, args.deadline, args.cost, permits, share)
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
        tracked = self._track(profile, upstream, now)
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
            tracked = self._track(profile, upstream, now)
            if tracked is not None:
                config = profile.for_upstream(upstream)
                tracked.delta = with_outcome(tracked.delta, config, now, outcome)

    def add(self, profile: Profile, upstream: str, delta: Delta) -> None:
        """Counts gathered elsewhere, sent with the next sync: how the fleet
        simulation stands for a pod's calls without making each one."""
        tracked = self._track(profile, upstream, self._clock())
        if tracked is not None:
            tracked.delta = merged(tracked.delta, delta)

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
            for key, t in self._tracked.items()
            if (view := self._view(t, now)) is not None and (not profile or key[0] == profile)
        }

    def _read_quiet(self, profile: str, now: float) -> None:
        """The upstreams the pod's own state lists (of `profile`) that this
        store stopped syncing, quiet for over _ACTIVE_S, tracked again: each
        is synced at once, so a listing a sync later shows the fleet's view
        of it (a fleet breaker that opened after the pod went quiet, a
        cool-down), kept while it holds caution. Only when asked: a pod
        that synced every quiet name it ever called would cost Redis a
        script per name per interval. Never past the bound, and never a
        write counted as dropped."""
        if not self._up:
            return
        policy = self.upstreams.policy
        keys, _ = self.upstreams.page(profile=profile)
        for _, key in keys:
            if len(self._tracked) >= self._most:
                return
            if key not in self._tracked and key[0] in policy.profiles:
                self._track(policy.profile(key[0]), key[1], now)

    def _track(self, profile: Profile, upstream: str, now: float) -> _Tracked | None:
        key = (profile.name, upstream)
        tracked = self._tracked.get(key)
        if tracked is None:
            if len(self._tracked) >= self._most:
                # The idle ones are forgotten once a sync, not here: a scan
                # per new name would cost every call the whole table.
                self._drop(1, f"more than {len(self._tracked)} upstreams are being synced")
                return None
            tracked = _Tracked(profile, upstream, self._keys(key), now, measured_at=now)
            self._tracked[key] = tracked
            # A name this pod has not synced decides without the fleet's
            # view until a sync reads it: that sync comes at once.
            self._soon.set()
        tracked.profile = profile  # a reload's, if one came meanwhile
        tracked.touched = now
        return tracked

    def _forget(self, now: float) -> None:
        """Drop the upstreams nobody touched for _ACTIVE_S whose counts are
        all sent and whose view is a plain CLOSED fleet: one not CLOSED (its
        key expires when nobody calls), cooling or holding probe slots is
        kept and synced, so a pod that calls an upstream rarely still meets
        the fleet's breaker, its half-open round and its cool-down."""
        for key, t in list(self._tracked.items()):
            if now - t.touched > _ACTIVE_S and t.delta is NO_DELTA and not _busy(t.view, now):
                del self._tracked[key]

    def _view(self, tracked: _Tracked, now: float) -> FleetView | None:
        """The view a call may decide by: one no sync renews (Redis away, or
        the upstream quiet) keeps only its caution until that ends on its
        own time; a stale CLOSED or HALF_OPEN view says nothing of the fleet
        now, and the pod's own state decides (its half-open round included)."""
        view = tracked.view
        if view is None:
            return None
        stale = not self._up or now - view.at > _STALE_SYNCS * self.interval_s
        if stale and not _holds(view, now):
            tracked.view = view = None
        return view

    def _share(self, tracked: _Tracked | None, now: float) -> float:
        """The part of a shared rate this pod paces by: its lease's while it
        holds, even once the view it came with is dropped (Redis away);
        past it, without a reading, `fallback_share` (or the whole rate
        when unset). A name not read yet while Redis answers paces by the
        whole rate: its first sync comes at once."""
        leased = None if tracked is None else tracked.leased
        fallback = self.settings.fallback_share
        return pace_share(leased, now, fallback if leased is not None or not self._up else None)

    def _source(self) -> Source:
        return Source.FLEET if self._up else self._local()

    def _local(self) -> Source:
        """Every answer marked LOCAL goes through here, as it goes into the
        metric (squawk_state_answers_total{state="local"}): one taken while
        the store is away is counted for the line that says the outage
        ended, so the line and the metric agree."""
        if not self._up:
            self._local_answers += 1
        return Source.LOCAL

    def _drop(self, count: int, why: str) -> None:
        """Counts the fleet will never get: counted, and logged throttled."""
        self.dropped += count
        if self._on_dropped is not None:
            self._on_dropped(count)
        held = self._throttle.ready("dropped")
        if held is not None:
            log.warning(
                "fleet state store %s: %d outcome(s) not sent to the fleet (%s)%s; "
                "this pod's own state counted them",
                self.settings.where,
                count,
                why,
                f" ({held} more drops since the last report)" if held else "",
            )

    # -- the sync -----------------------------------------------------------

    def _keys(self, key: Key) -> list[str]:
        name = f"{key[0]}\0{key[1]}".encode("utf-8", "surrogatepass")
        # A digest, not the name: bounded keys, and one hash slot per
        # upstream for Redis Cluster (the braces are its hash tag).
        base = f"{self.settings.key_prefix}{{{hashlib.blake2b(name, digest_size=12).hexdigest()}}}"
        return [f"{base}:{part}" for part in "scpohrd"]

    def _tail(self, config: UpstreamConfig) -> str:
        """The settings words every script call ends with, and their fingerprint."""
        tail = self._args.get(config)
        if tail is None:
            if len(self._args) >= _KEY_CACHE:
                self._args.clear()
            cb, budget = config.circuit_breaker, config.retry_budget
            ttl = getattr(budget, "ttl", cb.window)
            words = " ".join(
                str(w)
                for w in (
                    round(seconds(cb.window) * 1000),
                    cb.buckets,
                    round(seconds(ttl) * 1000),
                    round(seconds(cb.open_for) * 1000),
                    cb.half_open_probes,
                    math.ceil(seconds(config.max_cool_down) * 1000),
                    getattr(budget, "_max", 0),
                    round(self.interval_s * 1000),
                )
            )
            # The rules' settings too, which the script never reads: pods
            # that judge the same sums by different thresholds disagree.
            rules = f"{words} {cb.enabled} {cb.failure_ratio!r} {cb.minimum_calls} "
            rules += f"{cb.close_ratio!r} {budget!r} {self.settings.min_pods}"
            fingerprint = hashlib.blake2b(rules.encode(), digest_size=6).hexdigest()
            tail = self._args[config] = f"{words} {fingerprint}"
        return tail

    def _sync_args(self, tracked: _Tracked, delta: Delta, now: float) -> str:
        """One upstream's sync words."""
        config = tracked.profile.for_upstream(tracked.upstream)
        calls, failures, deposits, retries = sent(delta, config, now)
        taken, refilled = token_change(delta, config)
        hint = -1
        if delta.cool_until > now:
            hint = math.ceil((delta.cool_until - now) * 1000)
        view = tracked.view
        want = wanted_probes(view, config, now, delta.asked)
        returned, round_id = 0, 0
        if view is not None and view.probes and now - view.leased_at > _PROBE_HOLD_S:
            # Slots leased over a second ago and still unused (the calls
            # that asked for them went elsewhere, or stopped): given back to
            # their round, so another pod's calls may probe instead. From
            # now, not from the reply: no call spends them meanwhile.
            returned, round_id = view.probes, view.reading.round
            tracked.view = view._replace(probes=0)
        # The demand over the time since the last sync was made (landed or
        # not: an unsent sync's demand is not sent again); after an outage,
        # what was asked meanwhile is spread over all of it.
        elapsed = min(max(now - tracked.measured_at, self.interval_s), _MAX_DEMAND_SPAN_S)
        demand = mean_demand(tracked.demand, delta.wanted, elapsed, self.interval_s)
        tracked.demand, tracked.measured_at = demand, now
        words = (
            f"sync {self._pod} {round_id} {calls} {failures} {deposits} {retries} {taken} "
            f"{refilled} {hint} {want} {returned} {demand:.3f} {self._tail(config)}"
        )
        return words

    async def _syncer(self) -> None:
        """Syncs every interval until the store closes; each pod starts at a
        random point of the interval, so a fleet's syncs do not arrive together."""
        await asyncio.sleep(random.uniform(0, self.interval_s))
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while not self._closing:
            wait = next_at - loop.time()
            if wait > 0:
                # Woken early by a name not synced yet: it alone is synced then.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._soon.wait()
            self._soon.clear()
            early = loop.time() < next_at
            if not early:
                # A sync that overran starts the next at once, never a backlog.
                next_at = max(next_at + self.interval_s, loop.time())
            if self._up:
                with contextlib.suppress(Exception):
                    await self.sync(early)
            if early:
                # At most one early sync per _EARLY_GAP_S: a flood of new
                # names costs one round trip per gap, not one per name.
                await asyncio.sleep(_EARLY_GAP_S)

    async def sync(self, new_only: bool = False) -> int:
        """One sync of every upstream due (`new_only`: of those never synced
        yet): the number synced."""
        now = self._clock()
        due = self.due(now, new_only)
        for start in range(0, len(due), _SYNC_BATCH):
            if not await self._sync_batch(due[start : start + _SYNC_BATCH], now):
                return start
            await asyncio.sleep(0)
        return len(due)

    def due(self, now: float, new_only: bool = False) -> list[_Tracked]:
        """The upstreams a sync at `now` sends: those with counts to send
        (touched since their last sync, or gathered while Redis was away),
        those whose view is not plain (a fleet breaker not CLOSED, a
        cool-down, probe slots held), and those touched within _ACTIVE_S."""
        if new_only:
            return [t for t in self._tracked.values() if t.synced_at == -math.inf]
        self._forget(now)
        return [
            t
            for t in self._tracked.values()
            if t.delta is not NO_DELTA or _busy(t.view, now) or now - t.touched <= _ACTIVE_S
        ]

    # A sync in four steps, so that a simulation of many pods can put many
    # pods' calls in one pipeline: sync_calls (what to send), then
    # sync_replies (what came back) or unsent (nothing did), then
    # move_calls and move_replies for the transitions the sums call for.

    def sync_calls(self, due: Sequence[_Tracked], now: float) -> list[Call]:
        """The script calls of one sync of `due`, each upstream's delta taken
        out (what comes meanwhile starts a new one)."""
        calls = []
        for tracked in due:
            delta, tracked.delta = tracked.delta, NO_DELTA
            words = self._sync_args(tracked, delta, now)
            calls.append(Call(tracked, tracked.keys, words, delta))
        return calls

    def unsent(self, calls: Sequence[Call]) -> None:
        """A sync whose answer never came: whether it landed is unknown, so
        what of its deltas errs on the cautious side if counted twice goes
        out again with the next (squawk.policy.fleet.cautious)."""
        for call in calls:
            call.tracked.delta = merged(cautious(call.delta), call.tracked.delta)

    def sync_replies(
        self, calls: Sequence[Call], replies: Sequence[object], now: float
    ) -> list[Call]:
        """Keep what a sync read; the move calls its sums call for."""
        moves = []
        for call, raw in zip(calls, replies, strict=True):
            got = self._usable(raw)
            # Synced either way: an upstream Redis refuses is not sent again
            # at once (its next regular sync tries it).
            call.tracked.synced_at = now
            if got is None:
                continue
            tracked = call.tracked
            config = tracked.profile.for_upstream(tracked.upstream)
            before = tracked.view
            lease = _LEASE_SYNCS * self.interval_s
            read_at = self._clock()
            tracked.view = tracked.leased = viewed(
                got, config, read_at, before, lease, self.interval_s
            )
            restore = lost(got, before, read_at)
            if restore is not None:
                # The store lost the caution this pod still holds: kept
                # here, and written back with the moves' round trip.
                tracked.view = kept(tracked.view, restore, read_at)
                moves.append(self._keep_call(tracked, restore, config))
            self._differs(tracked, got)
            self._moved(tracked, before, tracked.view)
            made = move(got, config, self.settings.min_pods)
            if made is not None:
                words = f"move {self._pod} {made.epoch} {int(made.to)} {self._tail(config)}"
                moves.append(Call(tracked, tracked.keys, words, made=made))
        self.syncs += 1
        return moves

    def _keep_call(self, tracked: _Tracked, restore: Restore, config: UpstreamConfig) -> Call:
        """The script call that writes `restore` back; counted, and said
        at most once per LOG_EVERY_S."""
        self.restored += 1
        if self._on_restored is not None:
            self._on_restored(1)
        held = self._throttle.ready("restored")
        if held is not None:
            what = " and ".join(
                f"{name} ({left:.1f} s left)"
                for name, left in (
                    ("an OPEN fleet breaker", restore.open_left),
                    ("a cool-down", restore.cooling),
                )
                if left > 0
            )
            log.warning(
                "fleet state store %s lost the state of upstream %s (profile %s) while this "
                "pod held %s (flushed, or restarted empty?); writing it back%s",
                self.settings.where,
                shown_text(tracked.upstream, 200),
                shown_text(tracked.profile.name, 200),
                what,
                f" ({held} more write-backs since the last report)" if held else "",
            )
        open_ms = math.ceil(restore.open_left * 1000)
        cool_ms = math.ceil(restore.cooling * 1000)
        words = f"keep {self._pod} {restore.epoch} {open_ms} {cool_ms} {self._tail(config)}"
        return Call(tracked, tracked.keys, words)

    def move_replies(self, moves: Sequence[Call], replies: Sequence[object]) -> None:
        """The transitions made: the view says so at once, as the next sync would."""
        for call, raw in zip(moves, replies, strict=True):
            tracked, made = call.tracked, call.made
            if raw == [1] and tracked.view is not None and made is not None:
                before = tracked.view
                config = tracked.profile.for_upstream(tracked.upstream)
                tracked.view = moved(before, made, config, self._clock())
                self._moved(tracked, before, tracked.view)

    async def _sync_batch(self, batch: Sequence[_Tracked], now: float) -> bool:
        loop = asyncio.get_running_loop()
        calls = self.sync_calls(batch, now)
        started = loop.time()
        try:
            replies = await self._execute(calls)
        except Exception as exc:
            self.unsent(calls)
            self._lost(exc)
            return False
        self._timed(loop.time() - started)
        moves = self.sync_replies(calls, replies, now)
        if moves:
            try:
                self.move_replies(moves, await self._execute(moves))
            except Exception as exc:
                self._lost(exc)
        return True

    async def _execute(self, calls: Sequence[Call]) -> list[object]:
        """The calls' replies, in one round trip (an item's error is its reply)."""
        # The context closes the pipeline on every path: one left holding a
        # connection is an asyncio "Unclosed Pipeline client" at each outage.
        replies = await self._round_trip(calls)
        missing = [i for i, r in enumerate(replies) if isinstance(r, self._no_script)]
        if missing:
            # A server that restarted (or flushed its scripts) has lost the
            # script: load it once and send those calls again (they did not run).
            async with asyncio.timeout(_BACKGROUND_TIMEOUT_S):
                await self._redis.script_load(_SCRIPT)
            again = await self._round_trip([calls[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies

    async def _round_trip(self, calls: Sequence[Call]) -> list[object]:
        # EVALSHA itself: a registered script would ask SCRIPT EXISTS first,
        # a second round trip per pipeline.
        async with self._redis.pipeline(transaction=False) as pipe:
            for call in calls:
                pipe.evalsha(self._sha, len(call.keys), *call.keys, call.words)
            async with asyncio.timeout(max(_BACKGROUND_TIMEOUT_S, self._late_s)):
                replies: list[object] = await pipe.execute(raise_on_error=False)
        return replies

    def _timed(self, took: float) -> None:
        if took <= self._late_s:
            self._late = 0
            return
        self._late += 1
        if self._late >= _LATE_IN_A_ROW:
            self._lost(TimeoutError(f"{_LATE_IN_A_ROW} syncs in a row came late"))

    def _usable(self, raw: object) -> Reading | None:
        if isinstance(raw, Exception):
            # Redis answered, with an error about this upstream (a script
            # refused): its view stays, the store is up.
            self._odd(raw)
            return None
        got = reading(raw)
        if got is None:
            self._odd(ValueError("a script reply of the wrong shape"))
        return got

    def _differs(self, tracked: _Tracked, got: Reading) -> None:
        """Settings that differ from those the fleet's key was last written
        with, logged once per upstream."""
        key = (tracked.profile.name, tracked.upstream)
        if not got.differ or key in self._differ or len(self._differ) >= _KEY_CACHE:
            return
        self._differ.add(key)
        log.warning(
            "upstream %s (profile %s): this pod's breaker or budget settings differ "
            "from those the fleet's state was written with; the pods share their counts "
            "(each within its own window), but each judges them by its own settings, so "
            "they may disagree on the fleet's breaker and budget (run the same policy on "
            "every pod)",
            shown_text(key[1], 200),
            shown_text(key[0], 200),
        )

    def _moved(self, tracked: _Tracked, before: FleetView | None, after: FleetView) -> None:
        """A fleet breaker's transition, as this pod saw it."""
        if before is None:
            # The first view of an upstream: news to this pod, not a move of
            # the fleet's breaker (a pod that calls rarely would say the same
            # move again at every return).
            return
        key = (tracked.profile.name, tracked.upstream)
        was, now = before.reading.state, after.reading.state
        if was is not now and self._on_transition is not None:
            kept = self.upstreams.tracks(*key)
            self._on_transition(Transition(key[0], key[1], was, now, True, kept))

    # -- outages ------------------------------------------------------------

    def _lost(self, exc: BaseException) -> None:
        if not self._up or self._closing:
            return
        self._up = False
        self._late = 0
        self._down_since = time.monotonic()
        self._local_answers = 0
        # One line when an outage begins and one when it ends; a store that
        # keeps coming and going says so at most once per LOG_EVERY_S.
        held = self._throttle.ready("outage")
        self._outage_logged = held is not None
        if held is not None:
            # The error's text names an address at most; it passes redaction anyway.
            log.warning(
                "fleet state store %s unreachable (%s: %s)%s; deciding from this pod's own "
                "state until it answers",
                self.settings.where,
                type(exc).__name__,
                shown_text(str(exc), 200),
                f" ({held} more outages since the last report)" if held else "",
            )
        if self._on_up is not None:
            self._on_up(False)
        self._spawn(self._reconnect())

    def _log_long_outage(self) -> None:
        """An outage whose first line the throttle held back, still going
        after the throttle's interval, is logged after all: an outage that
        never ends must not go unsaid."""
        if self._outage_logged or time.monotonic() - self._down_since < LOG_EVERY_S:
            return
        self._outage_logged = True
        log.warning(
            "fleet state store %s unreachable for %.0f s; deciding from this pod's own "
            "state until it answers",
            self.settings.where,
            time.monotonic() - self._down_since,
        )

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

    async def _reconnect(self) -> None:
        # Connections from before the outage may be dead or half-read: drop
        # them once (the script is loaded again below: a restarted server
        # has none). A dead connection's close may fail: nothing to do then.
        with contextlib.suppress(Exception):
            await self._redis.connection_pool.disconnect()
        wait = _PING_FIRST_S
        while not self._closing:
            await asyncio.sleep(wait)
            wait = min(2 * wait, _PING_MAX_S)
            self._log_long_outage()
            try:
                if not await self._answers_in_time():
                    continue
                async with asyncio.timeout(_BACKGROUND_TIMEOUT_S):
                    await self._redis.script_load(_SCRIPT)
            except Exception:
                continue
            self._up = True
            if self._outage_logged:
                log.warning(
                    "fleet state store %s answers again after %.1f s; %d decisions meanwhile "
                    "came from this pod's own state",
                    self.settings.where,
                    time.monotonic() - self._down_since,
                    self._local_answers,
                )
            if self._on_up is not None:
                self._on_up(True)
            return

    async def _answers_in_time(self) -> bool:
        """Whether Redis answers pings within the deadline, as many in a row
        as late syncs make an outage: a Redis that is up but slow stays
        out, instead of the fleet flapping on and off with a log line each."""
        loop = asyncio.get_running_loop()
        # Untimed: it may open the connection (and TLS, AUTH, SELECT), which
        # the calls that follow do not pay.
        async with asyncio.timeout(_BACKGROUND_TIMEOUT_S):
            await self._redis.ping()
        for _ in range(_LATE_IN_A_ROW):
            started = loop.time()
            async with asyncio.timeout(_BACKGROUND_TIMEOUT_S):
                await self._redis.ping()
            if loop.time() - started > self._late_s:
                return False
        return True


_SEVERITY = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}


def _busy(view: FleetView | None, now: float) -> bool:
    """Whether a view needs every sync: anything but a plain CLOSED fleet."""
    if view is None:
        return False
    return view.reading.state is not BreakerState.CLOSED or view.probes > 0 or _holds(view, now)


def _holds(view: FleetView | None, now: float) -> bool:
    """Whether a view still holds caution of its own: an OPEN fleet breaker
    (until it half-opens) or a cool-down, each bounded by its rule."""
    if view is None:
        return False
    opened = view.reading.state is BreakerState.OPEN and now < view.until
    return opened or now < view.cool_until


def reading(raw: object) -> Reading | None:
    """A sync reply as a Reading, or None when it is not one: a store's
    answer is input too. Times come in ms and leave as seconds."""
    if not isinstance(raw, list) or len(raw) != _REPLY_LENGTH:
        return None
    if not all(type(v) is int for v in raw) or raw[0] not in _STATES:
        return None
    v = [min(max(x, 0), _MAX_REPLY) for x in raw]
    return Reading(
        _STATES[v[0]],
        v[1],
        v[2] / 1000,
        v[3],
        min(v[4], v[3]),
        v[5],
        v[6],
        v[7],
        v[8],
        v[9],
        v[10],
        v[11],
        v[12],
        v[13],
        v[14] / 1000,
        v[15] / 1000,
        v[16],
        bool(v[17]),
        v[18] / 1000,
        v[19],
    )


# -- the connection -----------------------------------------------------------


def _connect(settings: StateSettings) -> tuple[Any, list[Any]]:
    """The Redis client, by URL or through Redis Sentinel, and the sentinels'
    own clients (closed with it). Settings that cannot work stop the start
    (ConfigError, exit code 2), naming the setting and the file."""
    from redis.asyncio import BlockingConnectionPool, Redis
    from redis.asyncio.retry import Retry
    from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
    from redis.backoff import NoBackoff

    options: dict[str, Any] = {
        "max_connections": _MAX_CONNECTIONS,
        # Our own deadlines bound every wait; these only end a hung socket.
        "socket_connect_timeout": _BACKGROUND_TIMEOUT_S,
        "socket_timeout": _BACKGROUND_TIMEOUT_S,
        "retry": Retry(NoBackoff(), 0),
    }
    tls = _tls_options(settings)
    if not settings.sentinels:
        pool = BlockingConnectionPool.from_url(settings.url, **options, **tls)
        return Redis.from_pool(pool), []  # owns the pool: aclose() closes its connections
    if settings.url:
        raise ConfigError("state.sentinels and state.url are both set: give one of them")

    class BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
        """The master's connections, found through the sentinels, at most
        max_connections of them (a caller waits for one, as with a URL)."""

    # redis-py < 8.2 leaves Sentinel.__init__ untyped; newer releases type it.
    sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(settings.sentinels),
        sentinel_kwargs={
            "socket_connect_timeout": _BACKGROUND_TIMEOUT_S,
            "socket_timeout": _BACKGROUND_TIMEOUT_S,
        },
    )
    client = sentinel.master_for(
        settings.service_name, connection_pool_class=BlockingSentinelPool, **options
    )
    return client, list(sentinel.sentinels)


def _tls_options(settings: StateSettings) -> dict[str, str]:
    """redis-py's own TLS keywords for a rediss:// URL: the CA to trust
    (unset: the system's), and the client's certificate and key. Each file
    is checked as Python's ssl loads it, so a bad one is named at start
    rather than found at the first handshake as an outage."""
    given = [
        (f"{setting.file_key} ({setting.env})", keyword, path)
        for setting, keyword, path in (
            (STATE_TLS_CA, "ssl_ca_certs", settings.tls_ca),
            (STATE_TLS_CERT, "ssl_certfile", settings.tls_cert),
            (STATE_TLS_KEY, "ssl_keyfile", settings.tls_key),
        )
        if path
    ]
    if not given:
        return {}
    if settings.sentinels or urlsplit(settings.url).scheme != "rediss":
        raise ConfigError(f"{given[0][0]}: needs a rediss:// state.url")
    if bool(settings.tls_cert) != bool(settings.tls_key):
        raise ConfigError(
            f"{STATE_TLS_CERT.file_key} and {STATE_TLS_KEY.file_key} go together: "
            "a client certificate needs its key"
        )
    for name, _, path in given:
        try:
            read_pem(name, path)
        except OSError as exc:
            raise ConfigError(f"{name} {shown_path(path)}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    context = ssl.create_default_context()
    for name, keyword, path in given:
        try:
            if keyword == "ssl_ca_certs":
                context.load_verify_locations(cafile=path)
            elif keyword == "ssl_certfile":
                context.load_cert_chain(path, settings.tls_key)
        except ssl.SSLError:
            what = (
                "holds no CA certificate"
                if keyword == "ssl_ca_certs"
                else "not a certificate, or not the one whose key is "
                + shown_path(settings.tls_key)
            )
            raise ConfigError(f"{name} {shown_path(path)}: {what}") from None
    return {keyword: path for _, keyword, path in given}
