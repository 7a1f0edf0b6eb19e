"""Spare permits of a multi-permit Admit, shared by every step of one client.

A busy executor asks Admit for as many permits as it dispatched to the same
(profile, upstream, capability) in the last lease period (1 to 100); the
daemon grants more than one while nothing limits the upstream (breaker
closed, no cool-down, no pace), with a short lease. The first permit starts
the asking dispatch; the spare ones start the client's next dispatches to
that key without asking again, and only until the lease ends: what the
daemon granted, never more, never later. A lease of paced starts
(AdmitResponse.spacing above zero; this daemon grants none yet) has its
permits start `spacing` apart: a spare permit is never used before its start
(the dispatch waits for it, as for a paced Admit's wait), nor for a step
whose deadline comes first (that one asks the daemon). Doorman's capacity
leases and Envoy's rate-limit quota assignments work the same way (a grant
that expires, refreshed by the client), so the daemon's load follows the
number of executors rather than the number of calls.

The client gives up its spare permits early when a dispatch to the key
fails: the breaker may be opening or the upstream throttling, and the next
dispatch should hear the daemon's answer. Every permit of a grant carries
its admission id, which each dispatch's outcome names.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from squawk.policy.limits import MAX_PERMITS
from squawk.policy.pacer import LEASE

__all__ = ["DEFAULT_PERIOD", "MAX_LEASE", "Leases"]

# (profile, upstream, capability), as Admit names the state.
Key = tuple[str, str, str]

# The lease period used to size a request until the daemon grants a lease
# (the core pacer's), in seconds.
DEFAULT_PERIOD = LEASE.total_seconds()
# The longest lease honoured, whatever the answer says (seconds).
MAX_LEASE = 1.0
# Keys tracked at most; past it, idle keys are forgotten.
MAX_KEYS = 1024


@dataclass
class _Slot:
    spare: int = 0
    # The grant's admission id (AdmitResponse.admission_id).
    admission_id: str = ""
    # The monotonic time the spare permits lapse.
    until: float = 0.0
    period: float = DEFAULT_PERIOD
    # The monotonic time the next spare permit may start, and the time
    # between the spare permits' starts (0: each may start at once).
    next_start: float = 0.0
    spacing: float = 0.0
    # Until when an Admit asking several permits is out for the key: the
    # steps arriving meanwhile ask one each, or every concurrent step would
    # reserve a whole lease of the pod's pace (monotonic; 0 = none out).
    asking_until: float = 0.0
    # When this client's recent dispatches to the key started, oldest first.
    starts: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_PERMITS))


class Leases:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._slots: dict[Key, _Slot] = {}
        self._lock = threading.Lock()

    def take(self, key: Key, deadline: float | None = None) -> tuple[str, float, float] | None:
        """Start a dispatch on a spare permit: (its grant's admission id, the
        seconds to wait for its start, the grant's spacing); None when no
        permit is valid, or the next one starts no sooner than `deadline`
        seconds from now."""
        now = self._clock()
        with self._lock:
            slot = self._slots.get(key)
            if slot is None or slot.spare <= 0 or now >= slot.until:
                return None
            wait = max(slot.next_start - now, 0.0)
            if deadline is not None and wait >= deadline:
                return None
            slot.spare -= 1
            slot.next_start += slot.spacing
            slot.starts.append(now)
            return slot.admission_id, wait, slot.spacing

    def wanted(self, key: Key) -> int:
        """The permits to ask for: this dispatch and the others the client
        started to `key` in the last lease period, 1 to 100."""
        now = self._clock()
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                return 1
            while slot.starts and slot.starts[0] <= now - slot.period:
                slot.starts.popleft()
            return min(len(slot.starts) + 1, MAX_PERMITS)

    def ask(self, key: Key) -> int:
        """The permits an Admit for `key` asks now: wanted(key), or 1 while
        an Admit asking several is out for it (marked out until its grant,
        or a lease at most when no answer comes)."""
        wanted = self.wanted(key)
        if wanted == 1:
            return 1
        now = self._clock()
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                return 1
            if now < slot.asking_until:
                return 1
            slot.asking_until = now + MAX_LEASE
            return wanted

    def granted(
        self,
        key: Key,
        permits: int,
        lease: timedelta | None,
        admission_id: str = "",
        wait: timedelta = timedelta(0),
        spacing: timedelta = timedelta(0),
    ) -> None:
        """Record a grant of `permits` (the asking dispatch's included, which
        starts after `wait`; the spare ones `spacing` apart after it)."""
        now = self._clock()
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                if len(self._slots) >= MAX_KEYS:
                    self._forget_idle(now)
                slot = self._slots[key] = _Slot()
            slot.starts.append(now)
            seconds = 0.0 if lease is None else min(lease.total_seconds(), MAX_LEASE)
            if permits > 1 and seconds > 0:
                slot.spare = min(permits, MAX_PERMITS) - 1
                slot.admission_id = admission_id
                slot.until = now + seconds
                slot.period = seconds
                slot.spacing = max(spacing.total_seconds(), 0.0)
                slot.next_start = now + max(wait.total_seconds(), 0.0) + slot.spacing
            else:
                # A single grant: the daemon limits the key now; spares go.
                slot.spare = 0

    def answered(self, key: Key) -> None:
        """The Admit asking several permits for `key` was answered (or failed)."""
        with self._lock:
            slot = self._slots.get(key)
            if slot is not None:
                slot.asking_until = 0.0

    def revoke(self, key: Key) -> None:
        """Give up the key's spare permits (a dispatch to it failed)."""
        with self._lock:
            slot = self._slots.get(key)
            if slot is not None:
                slot.spare = 0

    def _forget_idle(self, now: float) -> None:
        idle = [
            k
            for k, s in self._slots.items()
            if now >= s.until and (not s.starts or s.starts[-1] <= now - s.period)
        ]
        for k in idle:
            del self._slots[k]
        if len(self._slots) >= MAX_KEYS:  # every key busy: start over
            self._slots.clear()
