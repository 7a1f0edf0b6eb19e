"""Client-side throttling: send an overloaded daemon fewer calls, not more.

The Google SRE book's adaptive throttling ("Handling Overload", K = 2; Envoy's
admission control filter at a 50 % success threshold) over Hystrix's rolling
window (ten one-second buckets, nothing refused below 20 requests in it). A
call is refused locally with probability (requests - 2 x accepts) /
(requests + 1), so the daemon sees about twice what it answers however many
callers ask, and nothing changes while it answers at least half of them.
Random refusals rather than a hold-off for the daemon's
grpc-retry-pushback-ms: callers that all wait out the same pushback come back
together, in waves. The rule is docs/clients/README.md's, pinned by
tests/vectors/throttle.json; this module is a machine with no I/O, the clock
and the draw given.
"""

from __future__ import annotations

import threading

import grpc

__all__ = ["Throttle", "refused"]

WINDOW_S = 10
MIN_REQUESTS = 20  # Hystrix's request volume threshold
K = 2.0  # the SRE book's multiplier: accepts count twice

# The ends that say the daemon had no room for the call.
_REFUSED = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.DEADLINE_EXCEEDED})


def refused(code: grpc.StatusCode) -> bool:
    """Whether a sent call's end says the daemon refused it for load."""
    return code in _REFUSED


class _Window:
    """Requests and accepts of one method, per whole second of the clock."""

    __slots__ = ("accepts", "requests", "seconds")

    def __init__(self) -> None:
        # Parallel rings indexed by second % WINDOW_S; `seconds` says which
        # second each slot holds, so a stale slot reads as empty.
        self.seconds = [-1] * WINDOW_S
        self.requests = [0] * WINDOW_S
        self.accepts = [0] * WINDOW_S

    def _slot(self, second: int) -> int:
        i = second % WINDOW_S
        if self.seconds[i] != second:
            self.seconds[i], self.requests[i], self.accepts[i] = second, 0, 0
        return i

    def totals(self, second: int) -> tuple[int, int]:
        live = [i for i, s in enumerate(self.seconds) if second - WINDOW_S < s <= second]
        return sum(self.requests[i] for i in live), sum(self.accepts[i] for i in live)

    def requested(self, second: int) -> None:
        self.requests[self._slot(second)] += 1

    def accepted(self, second: int) -> None:
        self.accepts[self._slot(second)] += 1


class Throttle:
    """One client's throttle, a window per RPC method; safe across threads."""

    def __init__(self) -> None:
        self._windows: dict[str, _Window] = {}
        self._lock = threading.Lock()

    def allow(self, method: str, now_ms: int, draw: float) -> tuple[bool, int, int]:
        """Whether to send a call to `method` asked at `now_ms`, given a
        uniform `draw` in [0, 1); with the window's requests and accepts
        before it. A call refused here counts as a request at once."""
        second = now_ms // 1000
        with self._lock:
            window = self._windows.setdefault(method, _Window())
            requests, accepts = window.totals(second)
            p = 0.0 if requests < MIN_REQUESTS else (requests - K * accepts) / (requests + 1)
            sent = draw >= p
            if not sent:
                window.requested(second)
        return sent, requests, accepts

    def ended(self, method: str, now_ms: int, code: grpc.StatusCode) -> None:
        """A sent call to `method` ended at `now_ms` with `code`. It counts as
        a request only now: calls still in flight are no evidence either way,
        so a burst of calls at start does not read as a daemon that answers
        none of them."""
        second = now_ms // 1000
        with self._lock:
            window = self._windows.setdefault(method, _Window())
            window.requested(second)
            if not refused(code):
                window.accepted(second)
