"""What a pod sends fleet.lua for one upstream: its keys, and each
request's words (fleet_wire.py names them) from the pod's record of it.
"""

from __future__ import annotations

import hashlib
import math

from squawk.policy import UpstreamConfig
from squawk.policy.fleet import (
    Delta,
    Move,
    Restore,
    equal_part,
    sent,
    token_change,
    wanted_probes,
)
from squawk.policy.fleet import demand as mean_demand

from ...config.state import StateSettings
from . import fleet_wire as wire
from .fleet_view import Tracked

__all__ = ["Words"]

# Probe slots a pod leased and has not used for this long are given back.
_PROBE_HOLD_S = 1.0
# The longest stretch a reported demand is averaged over (after an outage).
_MAX_DEMAND_SPAN_S = 60.0
_KEY_CACHE = 4096


class Words:
    """One pod's requests, with each upstream config's settings words cached."""

    def __init__(self, pod: str, settings: StateSettings, interval_s: float) -> None:
        self._pod = pod
        self._prefix = settings.key_prefix
        self._min_pods = settings.min_pods
        self.interval_s = interval_s
        self._settings: dict[UpstreamConfig, str] = {}

    def keys(self, key: tuple[str, str]) -> list[str]:
        name = f"{key[0]}\0{key[1]}".encode("utf-8", "surrogatepass")
        # A digest, not the name: bounded keys, and one hash slot per
        # upstream for Redis Cluster (the braces are its hash tag).
        base = f"{self._prefix}{{{hashlib.blake2b(name, digest_size=12).hexdigest()}}}"
        return [f"{base}:{part}" for part in "scpohrd"]

    def sync(self, tracked: Tracked, delta: Delta, now: float) -> str:
        """One upstream's sync: what it saw (`delta`), the probe slots it
        wants and gives back, and its demand (kept on `tracked`)."""
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
        equal = equal_part(view, delta)
        demand = mean_demand(tracked.demand, delta.wanted, elapsed, self.interval_s, equal)
        tracked.demand, tracked.measured_at = demand, now
        request = wire.SyncRequest(
            self._pod, round_id, calls, failures, deposits, retries, taken, refilled,
            hint, want, returned, demand,
        )  # fmt: skip
        return wire.encode(request, self._settings_words(config))

    def move(self, made: Move, config: UpstreamConfig) -> str:
        request = wire.MoveRequest(self._pod, made.epoch, int(made.to))
        return wire.encode(request, self._settings_words(config))

    def keep(self, restore: Restore, config: UpstreamConfig) -> str:
        request = wire.KeepRequest(
            self._pod,
            restore.epoch,
            math.ceil(restore.open_left * 1000),
            math.ceil(restore.cooling * 1000),
        )
        return wire.encode(request, self._settings_words(config))

    def _settings_words(self, config: UpstreamConfig) -> str:
        words = self._settings.get(config)
        if words is None:
            if len(self._settings) >= _KEY_CACHE:
                self._settings.clear()
            words = wire.settings_words(config, self.interval_s, self._min_pods)
            self._settings[config] = words
        return words
