"""The sync link, sans I/O: which upstreams a sync sends, what it sends for
each, and what each reply means (squawk.policy.fleet's rules, the view
kept, the fleet breaker's moves to ask for, caution to write back).

The store (fleet_store.py) owns the round trips and their timing; this
link owns the upstreams it syncs. Every `now` is the store's one clock,
passed in. A sync is four steps, so that a simulation of many pods can put
many pods' calls in one pipeline: `sync_calls` (what to send), then
`sync_replies` (what came back) or `unsent` (nothing did), then the moves'
calls it returned and `move_replies`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from squawk.policy import BreakerState, Profile, UpstreamConfig
from squawk.policy.fleet import (
    NO_DELTA,
    Delta,
    FleetView,
    Move,
    Reading,
    Restore,
    cautious,
    kept,
    lost,
    merged,
    move,
    moved,
    viewed,
)
from squawk.policy.why import fleet_breaker_cause, restored_cause

from ...config.state import StateSettings
from ...throttle import Throttle
from . import fleet_notes as notes
from . import fleet_wire as wire
from .fleet_view import LEASE_SYNCS, Tracked, busy
from .fleet_words import Words
from .registry import Transition, Upstreams

__all__ = ["ACTIVE_S", "Call", "Key", "SyncLink"]

Key = tuple[str, str]

# An upstream touched within this long is synced every interval; one
# untouched for longer is not, and is forgotten unless its view holds
# caution. A name a caller used once costs this long of syncs.
ACTIVE_S = 2.0
# Upstreams per pipeline (one round trip); the store's bound on the
# upstreams it syncs leaves a pipeline's worth beside the pod's own.
SYNC_BATCH = 64
_KEY_CACHE = 4096


class Call(NamedTuple):
    """One script call of a sync (or of a move, or of a write-back) and
    what it was made of."""

    tracked: Tracked
    keys: list[str]
    words: str
    delta: Delta = NO_DELTA
    made: Move | None = None


class SyncLink:
    """The upstreams one pod syncs, and the meaning of each sync."""

    def __init__(
        self,
        upstreams: Upstreams,
        settings: StateSettings,
        interval_s: float,
        throttle: Throttle,
        clock: Callable[[], float],
        on_transition: Callable[[Transition], None] | None = None,
        on_restored: Callable[[str, str, str], None] | None = None,
        on_dropped: Callable[[int], None] | None = None,
        on_new: Callable[[], None] | None = None,
        on_odd: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.upstreams = upstreams
        self.settings = settings
        self.interval_s = interval_s
        self._throttle = throttle
        self._clock = clock
        self._on_transition = on_transition
        self._on_restored = on_restored
        self._on_dropped = on_dropped
        self._on_new = on_new
        self._on_odd = on_odd
        self.tracked: dict[Key, Tracked] = {}
        # The upstreams it syncs at most: as many as the pod tracks, and a
        # pipeline's worth beside, so the fleet still hears of names the
        # pod's own state could not track (its metrics label them "other").
        self.most = max(upstreams.max_upstreams, SYNC_BATCH)
        # This pod's member name in the store, read once.
        self.pod = settings.pod_name()
        self._words = Words(self.pod, settings, interval_s)
        # Upstreams whose settings differ from the fleet's, already logged.
        self._differ: set[Key] = set()
        # Writes the fleet never got, caution written back, syncs read.
        self.dropped = 0
        self.restored = 0
        self.syncs = 0

    # -- which upstreams ----------------------------------------------------

    def track(self, profile: Profile, upstream: str, now: float) -> Tracked | None:
        """The upstream's record, made when new (None: past the bound,
        counted as dropped); touched at `now`."""
        key = (profile.name, upstream)
        tracked = self.tracked.get(key)
        if tracked is None:
            if len(self.tracked) >= self.most:
                # The idle ones are forgotten once a sync, not here: a scan
                # per new name would cost every call the whole table.
                self._drop(1, f"more than {len(self.tracked)} upstreams are being synced")
                return None
            tracked = Tracked(profile, upstream, self._words.keys(key), now, measured_at=now)
            self.tracked[key] = tracked
            # A name this pod has not synced decides without the fleet's
            # view until a sync reads it: that sync comes at once.
            if self._on_new is not None:
                self._on_new()
        tracked.profile = profile  # a reload's, if one came meanwhile
        tracked.touched = now
        return tracked

    def add(self, profile: Profile, upstream: str, delta: Delta) -> None:
        """A test hook: counts gathered elsewhere, sent with the next sync
        (how the fleet simulations stand for a pod's calls without making
        each one)."""
        tracked = self.track(profile, upstream, self._clock())
        if tracked is not None:
            tracked.delta = merged(tracked.delta, delta)

    def due(self, now: float, new_only: bool = False) -> list[Tracked]:
        """The upstreams a sync at `now` sends (`new_only`: those never
        synced): those with counts to send (touched since their last sync,
        or gathered while Redis was away), those whose view is not plain
        (a fleet breaker not CLOSED, a cool-down, probe slots held), and
        those touched within ACTIVE_S."""
        if new_only:
            return [t for t in self.tracked.values() if t.synced_at == -math.inf]
        self._forget(now)
        return [
            t
            for t in self.tracked.values()
            if t.delta is not NO_DELTA or busy(t.view, now) or now - t.touched <= ACTIVE_S
        ]

    def _forget(self, now: float) -> None:
        """Drop the upstreams nobody touched for ACTIVE_S whose counts are
        all sent and whose view is a plain CLOSED fleet: one not CLOSED (its
        key expires when nobody calls), cooling or holding probe slots is
        kept and synced, so a pod that calls an upstream rarely still meets
        the fleet's breaker, its half-open round and its cool-down."""
        for key, t in list(self.tracked.items()):
            if now - t.touched > ACTIVE_S and t.delta is NO_DELTA and not busy(t.view, now):
                del self.tracked[key]

    # -- what to send -------------------------------------------------------

    def sync_calls(self, due: Sequence[Tracked], now: float) -> list[Call]:
        """The script calls of one sync of `due`, each upstream's delta taken
        out (what comes meanwhile starts a new one)."""
        calls = []
        for tracked in due:
            delta, tracked.delta = tracked.delta, NO_DELTA
            calls.append(Call(tracked, tracked.keys, self._words.sync(tracked, delta, now), delta))
        return calls

    # -- what came back -----------------------------------------------------

    def unsent(self, calls: Sequence[Call]) -> None:
        """A sync whose answer never came: whether it landed is unknown, so
        what of its deltas errs on the cautious side if counted twice goes
        out again with the next (squawk.policy.fleet.cautious)."""
        for call in calls:
            call.tracked.delta = merged(cautious(call.delta), call.tracked.delta)

    def sync_replies(
        self, calls: Sequence[Call], replies: Sequence[object], now: float
    ) -> list[Call]:
        """Keep what a sync sent at `now` read; the move calls its sums call for."""
        moves = []
        for call, raw in zip(calls, replies, strict=True):
            got = _usable(raw, self._on_odd)
            # Synced either way: an upstream Redis refuses is not sent again
            # at once (its next regular sync tries it).
            call.tracked.synced_at = now
            if got is None:
                continue
            tracked = call.tracked
            config = tracked.profile.for_upstream(tracked.upstream)
            before = tracked.view
            lease = LEASE_SYNCS * self.interval_s
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
                words = self._words.move(made, config)
                moves.append(Call(tracked, tracked.keys, words, made=made))
        self.syncs += 1
        return moves

    def move_replies(self, moves: Sequence[Call], replies: Sequence[object]) -> None:
        """The transitions made: the view says so at once, as the next sync would."""
        for call, raw in zip(moves, replies, strict=True):
            tracked, made = call.tracked, call.made
            if raw == [1] and tracked.view is not None and made is not None:
                before = tracked.view
                config = tracked.profile.for_upstream(tracked.upstream)
                tracked.view = moved(before, made, config, self._clock())
                self._moved(tracked, before, tracked.view)

    def _keep_call(self, tracked: Tracked, restore: Restore, config: UpstreamConfig) -> Call:
        """The script call that writes `restore` back; counted, and said
        at most once per the throttle's interval."""
        self.restored += 1
        if self._on_restored is not None:
            self._on_restored(tracked.profile.name, tracked.upstream, restored_cause(restore))
        notes.restored(self._throttle, self.settings.where, tracked, restore)
        return Call(tracked, tracked.keys, self._words.keep(restore, config))

    def _differs(self, tracked: Tracked, got: Reading) -> None:
        """Settings that differ from those the fleet's key was last written
        with, logged once per upstream."""
        key = (tracked.profile.name, tracked.upstream)
        if not got.differ or key in self._differ or len(self._differ) >= _KEY_CACHE:
            return
        self._differ.add(key)
        notes.differs(key)

    def _moved(self, tracked: Tracked, before: FleetView | None, after: FleetView) -> None:
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
            r = before.reading
            half = was is BreakerState.HALF_OPEN
            calls = r.successes + r.probe_failures if half else r.calls
            failures = r.probe_failures if half else r.failures
            config = tracked.profile.for_upstream(tracked.upstream).circuit_breaker
            cause = fleet_breaker_cause(now, was, calls, failures, r.pods, config)
            left = after.until - self._clock() if now is BreakerState.OPEN else None
            self._on_transition(Transition(key[0], key[1], was, now, True, kept, cause, left))

    def _drop(self, count: int, why: str) -> None:
        """Counts the fleet will never get: counted, and logged throttled."""
        self.dropped += count
        if self._on_dropped is not None:
            self._on_dropped(count)
        notes.dropped(self._throttle, self.settings.where, count, why)


def _usable(raw: object, on_odd: Callable[[BaseException], None] | None) -> Reading | None:
    if isinstance(raw, Exception):
        # Redis answered, with an error about this upstream (a script
        # refused): its view stays, the store is up.
        odd: BaseException | None = raw
        got = None
    else:
        got = wire.reading(raw)
        odd = ValueError("a script reply of the wrong shape") if got is None else None
    if odd is not None and on_odd is not None:
        on_odd(odd)
    return got
