"""Outcomes waiting to be reported, shared by every step of one client.

A runner's step does not wait for ReportOutcome: it queues its outcome here
and goes on. The client sends the queue in batches, at most MAX_DELAY after
the oldest outcome was queued or as soon as MAX_BATCH are waiting, and
everything left when it closes; so a busy executor costs the daemon one
ReportOutcome per batch instead of one per dispatch. Envoy's rate-limit
quota service reports usage the same way, periodically, not per request.

A patient outcome (a success started on a lease of paced starts) may wait
PATIENT_DELAY, the lease's length: a lease is only granted under a declared
or announced rate, where nothing in the pod reads a success sooner (the rate
is not learned from it, its headers are read as of their age), so a busy
executor reports once a lease, not four times. Any other outcome queued
behind it brings the batch back to MAX_DELAY. An urgent outcome (a call
that held a slot of a declared cap on calls in flight, which another caller
may be waiting for) sends the batch at once.

Nothing is lost silently: an outcome the daemon did not take (it was away,
or refused the batch), one pushed out of a full queue, or one queued after
close is counted in `dropped`. The queue is bounded (MAX_QUEUED): a daemon
that is away for long costs the executor a fixed amount of memory.

Each outcome goes with its `age`, the time since it was queued (right
after its response came): the daemon reads its headers' absolute resets
as of then, not as of the batch. One older than Outcome.age's bound
(MAX_AGE, a minute) is dropped and counted rather than sent: the daemon
would refuse the whole batch for it.

The bookkeeping is here once; each client only differs in what waits for
the next batch: a daemon thread (SquawkClient) or a task on the client's
event loop (AsyncSquawkClient).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable

from squawk.policy.limits import MAX_OUTCOME_AGE
from squawk.policy.pace_types import LEASE
from squawk.v1 import policy_pb2 as pb

__all__ = ["MAX_AGE", "MAX_BATCH", "MAX_DELAY", "MAX_QUEUED", "PATIENT_DELAY", "Outbox"]

# How late an outcome may reach the daemon: its breaker and pace read
# outcomes, so a batch must stay young next to their windows (seconds).
MAX_DELAY = 0.05
# How late a patient outcome may reach it (seconds): one lease.
PATIENT_DELAY = LEASE.total_seconds()
# Outcomes per ReportOutcome (the RPC takes up to 1,000).
MAX_BATCH = 100
# Outcomes waiting at most; past it the oldest is dropped (and counted).
MAX_QUEUED = 10 * MAX_BATCH
# The oldest outcome sent (Outcome.age's bound, seconds).
MAX_AGE = MAX_OUTCOME_AGE.total_seconds()


class Outbox:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # (when queued and when due, on the monotonic clock; the outcome),
        # oldest first.
        self._items: deque[tuple[float, float, pb.Outcome]] = deque()
        # When the queue's batch is due (monotonic; inf = empty).
        self._due = math.inf
        self._ready = threading.Condition()
        self._closing = False
        self.dropped = 0

    def put(self, outcome: pb.Outcome, patient: bool = False, urgent: bool = False) -> bool:
        """Queue `outcome` (`patient`: it may wait PATIENT_DELAY; `urgent`:
        it frees a slot another caller waits for, so the batch goes now);
        True when the batch should go now (full, or urgent)."""
        with self._ready:
            if self._closing:
                self.dropped += 1
                return False
            if len(self._items) >= MAX_QUEUED:
                self._items.popleft()
                self.dropped += 1
            now = self._clock()
            due = now if urgent else now + (PATIENT_DELAY if patient else MAX_DELAY)
            self._items.append((now, due, outcome))
            sooner = due < self._due
            self._due = min(self._due, due)
            full = len(self._items) >= MAX_BATCH
            # A waiting thread needs waking only to set its timer or send now.
            if full or sooner:
                self._ready.notify()
            return full or urgent

    def due_in(self) -> float | None:
        """Seconds until the next batch is due (0 = now); None when empty."""
        with self._ready:
            return self._due_in()

    def take(self) -> list[pb.Outcome]:
        """The next batch (oldest first, at most MAX_BATCH), taken off the queue."""
        with self._ready:
            return self._take()

    def next_batch(self) -> list[pb.Outcome] | None:
        """Block until a batch is due and take it (at once when closing);
        None once closed and empty. For the sending thread."""
        with self._ready:
            while True:
                due = self._due_in()
                if due is None:
                    if self._closing:
                        return None
                    self._ready.wait()
                elif due <= 0:
                    return self._take()
                else:
                    self._ready.wait(due)

    def close(self) -> None:
        """Send what is queued without waiting; count what comes after."""
        with self._ready:
            self._closing = True
            self._ready.notify_all()

    def lost(self, count: int) -> None:
        with self._ready:
            self.dropped += count

    def _due_in(self) -> float | None:
        if not self._items:
            return None
        if len(self._items) >= MAX_BATCH or self._closing:
            return 0.0
        return max(0.0, self._due - self._clock())

    def _take(self) -> list[pb.Outcome]:
        now = self._clock()
        items = self._items
        batch: list[pb.Outcome] = []
        while items and len(batch) < MAX_BATCH:
            queued, _, outcome = items.popleft()
            age = now - queued
            if age > MAX_AGE:
                self.dropped += 1
                continue
            outcome.age.FromNanoseconds(round(max(age, 0.0) * 1e9))
            batch.append(outcome)
        self._due = min((due for _, due, _ in items), default=math.inf)
        return batch
