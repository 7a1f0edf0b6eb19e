"""The log throttle: the one way the daemon keeps a stream of like events
(refused calls, breaker transitions, a store's unusable answers) to a line
per interval, counting the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["LOG_EVERY_S", "Throttle"]

# Events of one kind are logged at most once per this many seconds.
LOG_EVERY_S = 10.0


class Throttle:
    """Says whether to log now: once per interval per key, counting the rest."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def ready(self, key: str) -> int | None:
        """The number of events held back since the last log, or None to hold this one."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            self._held[key] = self._held.get(key, 0) + 1
            return None
        self._last[key] = now
        return self._held.pop(key, 0)
