"""The pod's live admissions: what ties an outcome to the Admit that let it go.

The learned concurrency limit (squawk.policy.aimd) counts the calls it
admitted and frees a slot per outcome; an outcome nobody admitted would
free a slot that another caller's call still holds, and made-up fast
successes would lift the limit past what the upstream holds. So each
admission of a tracked (profile, upstream) gets an id, and only an outcome
naming a live one of the same key reaches the limit (see
Outcome.admission_id in protos/squawk/v1/policy.proto).

- An id is 64 bits from the operating system's random source: a caller
  cannot guess another's from its own (the ids are not a sequence, and
  Python's Mersenne Twister would give its state away after 624 words).
- A grant of several permits (a lease) has one id, good for as many
  outcomes as it granted permits.
- An admission lives LIFETIME, the least time the limit keeps a call that
  never reported in its count (aimd.FLIGHT_EPOCH): a lost outcome frees its
  slot when the count forgets it, and a late one can then free nothing the
  count no longer holds.
- A key the registry stops tracking takes its admissions with it (`drop`):
  its state starts afresh, with no count a late outcome could free. So the
  table holds admissions of tracked keys only, at most max_upstreams of
  them.
- The table is bounded: at most MAX_PER_UPSTREAM live admissions of one key
  (twice the highest limit, aimd.MAX_LIMIT, so a full limit's calls always
  fit) and MAX_LIVE in all. Past either, the oldest is forgotten first: its
  outcome then frees no slot, and its call leaves the count when the
  count's epoch ends, as a call that never reported does. Never less
  cautious: a forgotten admission can only keep a slot taken for longer.

The ids are in one table in the order they were given, and in one per
key: every admission lives the same time, so the oldest is the first to
expire, and an expiry, a use or an eviction costs O(1).
"""

from __future__ import annotations

import os
import struct
from collections import OrderedDict

from squawk.policy.aimd import FLIGHT_EPOCH, MAX_LIMIT

__all__ = ["LIFETIME", "MAX_LIVE", "MAX_PER_UPSTREAM", "Admissions"]

Key = tuple[str, str]  # (profile name, upstream)

LIFETIME = FLIGHT_EPOCH
MAX_PER_UPSTREAM = 2 * MAX_LIMIT
# About 450 bytes each (an entry in two ordered tables, measured): some
# 22 MiB at most for the pod. Calls out at once across all upstreams are
# far fewer.
MAX_LIVE = 50_000
# Ids drawn from the random source at a time: one read per 512 admissions
# instead of a system call each (a microsecond, a sixth of an Admit).
_DRAWN = 512
_WORDS = struct.Struct(f"<{_DRAWN}Q")


class _Of:
    """One key's live admissions, oldest first; each of them points here,
    not to a copy of the key (a caller's name comes anew with each call)."""

    __slots__ = ("ids", "key")

    def __init__(self, key: Key) -> None:
        self.key = key
        self.ids: OrderedDict[int, None] = OrderedDict()


class _Live:
    __slots__ = ("at", "left", "of")

    def __init__(self, of: _Of, at: float, left: int) -> None:
        self.of = of
        self.at = at
        self.left = left


class Admissions:
    """Every tracked key's live admissions. All calls come from the event
    loop's thread (as the registry's), so no lock is needed."""

    def __init__(self, max_live: int = MAX_LIVE, max_per_upstream: int = MAX_PER_UPSTREAM) -> None:
        # Every live admission, oldest first; and each key's.
        self._live: OrderedDict[int, _Live] = OrderedDict()
        self._of_key: dict[Key, _Of] = {}
        self._max_live = max_live
        self._max_per_key = max_per_upstream
        self._ids: list[int] = []

    def __len__(self) -> int:
        return len(self._live)

    def add(self, key: Key, now: float, permits: int) -> int:
        """A new admission of `key` at `now` for `permits` calls: its id
        (never 0, which names none)."""
        self._expire(now)
        of = self._of_key.get(key)
        if of is not None and len(of.ids) >= self._max_per_key:
            self._forget(next(iter(of.ids)))
        if len(self._live) >= self._max_live:
            self._forget(next(iter(self._live)))
        while True:
            if not self._ids:
                self._ids = list(_WORDS.unpack(os.urandom(_WORDS.size)))
            admission = self._ids.pop()
            if admission and admission not in self._live:
                break
        of = self._of_key.get(key)  # a forget above may have dropped it
        if of is None:
            of = self._of_key[key] = _Of(key)
        self._live[admission] = _Live(of, now, permits)
        of.ids[admission] = None
        return admission

    def use(self, key: Key, admission: int, now: float) -> float | None:
        """When `key` admitted the call that `admission` names, using one of
        its permits; None when it names no live admission of `key`
        (unknown, expired, used up, forgotten, or another key's)."""
        if not admission:
            return None
        self._expire(now)
        live = self._live.get(admission)
        if live is None or live.of.key != key:
            return None
        live.left -= 1
        if live.left <= 0:
            self._forget(admission)
        return live.at

    def drop(self, key: Key) -> None:
        """Forget every admission of `key` (the registry dropped it)."""
        of = self._of_key.pop(key, None)
        if of is not None:
            for admission in of.ids:
                del self._live[admission]

    def _expire(self, now: float) -> None:
        live = self._live
        while live:
            admission = next(iter(live))
            if now - live[admission].at < LIFETIME:
                return
            self._forget(admission)

    def _forget(self, admission: int) -> None:
        of = self._live.pop(admission).of
        del of.ids[admission]
        if not of.ids:
            del self._of_key[of.key]
