"""The fleet store's sync loop: every interval (and at once for a name
never synced) the link's calls for the upstreams due, sent in pipelines of
SYNC_BATCH, their replies handed back to the link, and each round trip's
time and failure to the outage watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Sequence

from . import fleet_outage as outage
from .fleet_link import SYNC_BATCH, SyncLink
from .fleet_outage import Event
from .fleet_redis import RedisLine
from .fleet_view import Tracked
from .fleet_watch import OutageWatch

__all__ = ["SyncLoop"]

# Early syncs (of names never synced) are at least this far apart.
_EARLY_GAP_S = 0.01


class SyncLoop:
    def __init__(
        self,
        link: SyncLink,
        redis: RedisLine,
        watch: OutageWatch,
        clock: Callable[[], float],
        late_s: float,
        soon: asyncio.Event,
    ) -> None:
        self.link = link
        self._redis = redis
        self._watch = watch
        self._clock = clock
        self._late_s = late_s
        # Set by the link when it tracks a name never synced.
        self._soon = soon

    async def run(self) -> None:
        """Syncs every interval until the store closes; each pod starts at a
        random point of the interval, so a fleet's syncs do not arrive together."""
        await asyncio.sleep(random.uniform(0, self.link.interval_s))
        next_at = self._clock()
        while not self._watch.closing:
            wait = next_at - self._clock()
            if wait > 0:
                # Woken early by a name not synced yet: it alone is synced then.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._soon.wait()
            self._soon.clear()
            early = self._clock() < next_at
            if not early:
                # A sync that overran starts the next at once, never a backlog.
                next_at = max(next_at + self.link.interval_s, self._clock())
            if self._watch.up:
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
        due = self.link.due(now, new_only)
        for start in range(0, len(due), SYNC_BATCH):
            if not await self._sync_batch(due[start : start + SYNC_BATCH], now):
                return start
            await asyncio.sleep(0)
        return len(due)

    async def _sync_batch(self, batch: Sequence[Tracked], now: float) -> bool:
        calls = self.link.sync_calls(batch, now)
        started = self._clock()
        try:
            replies = await self._redis.execute(calls)
        except Exception as exc:
            self.link.unsent(calls)
            self._watch.step(Event.FAILED, exc)
            return False
        self._watch.step(outage.timed(self._clock() - started, self._late_s))
        moves = self.link.sync_replies(calls, replies, now)
        if moves:
            try:
                self.link.move_replies(moves, await self._redis.execute(moves))
            except Exception as exc:
                self._watch.step(Event.FAILED, exc)
        return True
