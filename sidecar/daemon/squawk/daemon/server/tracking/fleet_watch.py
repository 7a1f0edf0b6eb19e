"""The fleet store's outages as the process lives them: the outage
machine (fleet_outage.py) fed, its changes said in the log and to
`on_up`, and the reconnect pings while it lasts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from squawk.policy.text import shown_text

from ...throttle import LOG_EVERY_S, Throttle
from . import fleet_outage as outage
from .fleet_notes import log
from .fleet_outage import Event
from .fleet_redis import RedisLine

__all__ = ["OutageWatch"]

# The reconnect pings' backoff.
_PING_FIRST_S, _PING_MAX_S = 0.1, 2.0


class OutageWatch:
    """Whether the store is up, and what happens when that changes."""

    def __init__(
        self,
        redis: RedisLine,
        where: str,
        throttle: Throttle,
        clock: Callable[[], float],
        on_up: Callable[[bool], None] | None,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self._redis = redis
        self._where = where
        self._throttle = throttle
        self._clock = clock
        self._on_up = on_up
        self._spawn = spawn
        self._state = outage.UP
        self._logged = False
        # Set when the store closes: nothing begins after.
        self.closing = False

    @property
    def up(self) -> bool:
        return self._state.up

    def step(self, event: Event, exc: BaseException | None = None) -> None:
        """The outage machine's next state; an outage that begins is said
        (once per LOG_EVERY_S) and the reconnect starts."""
        if self.closing:
            return
        was = self._state.up
        self._state = outage.step(self._state, event, self._clock())
        if not was or self._state.up:
            return
        if exc is None:
            exc = TimeoutError(f"{outage.LATE_IN_A_ROW} syncs in a row came late")
        # One line when an outage begins and one when it ends; a store that
        # keeps coming and going says so at most once per LOG_EVERY_S.
        held = self._throttle.ready("outage")
        self._logged = held is not None
        if held is not None:
            # The error's text names an address at most; it passes redaction anyway.
            log.warning(
                "fleet state store %s unreachable (%s: %s)%s; deciding from this pod's own "
                "state until it answers",
                self._where,
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
        down_for = self._clock() - self._state.since
        if self._logged or down_for < LOG_EVERY_S:
            return
        self._logged = True
        log.warning(
            "fleet state store %s unreachable for %.0f s; deciding from this pod's own "
            "state until it answers",
            self._where,
            down_for,
        )

    async def _reconnect(self) -> None:
        # Connections from before the outage are dropped once; the script is
        # loaded again below (a restarted server has none).
        await self._redis.drop_connections()
        wait = _PING_FIRST_S
        while not self.closing:
            await asyncio.sleep(wait)
            wait = min(2 * wait, _PING_MAX_S)
            self._log_long_outage()
            try:
                # As many pings in time in a row as late syncs make an outage.
                if not await self._redis.answers_in_time(outage.LATE_IN_A_ROW, self._clock):
                    continue
                await self._redis.load_script()
            except Exception:
                continue
            self._state = outage.step(self._state, Event.ANSWERED, self._clock())
            if self._logged:
                log.warning(
                    "fleet state store %s answers again after %.1f s; %d decisions meanwhile "
                    "came from this pod's own state",
                    self._where,
                    self._clock() - self._state.since,
                    self._state.local,
                )
            if self._on_up is not None:
                self._on_up(True)
            return
