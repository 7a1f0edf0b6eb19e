"""Fair shares of a binding pace between the keys that ask for it.

A fairness key names whose call it is (a tenant, an executor, a workflow);
Admit carries it with a weight. The rule is max-min fairness by weight
("water-filling", the rate each key gets under weighted fair queuing): a
key asking less than its weighted part of the pace keeps all it asks, and
the keys asking more share the rest by weight. A key over its share is
held to that share by a GCRA of its own (squawk.policy.spacing's rule, for
one key), and its calls wait at most one slot of the pace: a call it asks
sooner, or that would queue, is refused, so its surplus never holds a
place in the pace's queue that the other keys would wait behind (they find
it short); a key under its share is spaced by the pace alone. So one tenant that floods
a pod takes what the others leave, not the queue.

A key's demand is its asks per second, granted or refused, as a running
mean over about DEMAND_S: a key that spins on refusals claims more, which
max-min caps at its weighted part, never the rate. The pacer asks nothing
of this machine while no Admit has named a key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

__all__ = [
    "DEMAND_S",
    "MAX_KEYS",
    "MAX_WEIGHT",
    "MIN_DEMAND",
    "NO_KEYS",
    "OVERFLOW",
    "SLACK",
    "Fair",
    "Fairness",
    "Tenant",
    "asked",
    "early",
    "reserved",
    "share",
    "water_level",
]

# A key's demand is a running mean over about this many seconds: long
# enough that a key asking a few calls a second is seen between its calls
# (at 4 calls/s its mean varies by about 1 / sqrt(4 x 4) = 25 %), short
# enough that a flood that stops frees its share within seconds.
DEMAND_S = 4.0
# A key is spaced at its share only once its demand passes this many times
# it: a key asking about its share is not refused for a mean that runs high
# by chance (at 2 s and no slack, a light tenant at 0.8 of its share lost a
# tenth of its calls in the outcome benchmark); a flood is far past it.
SLACK = 1.5
# Below this many asks a second a key is gone (and forgotten).
MIN_DEMAND = 0.05
# Keys an upstream tracks; the calls of any further key share one key, so
# a caller inventing names cannot grow the state or split a share.
MAX_KEYS = 64
# The key those calls share: no caller can send it (names are printable).
OVERFLOW = "\x00overflow"
MAX_WEIGHT = 100.0


class Fairness(NamedTuple):
    """Whose call an Admit is: its fairness key and the key's weight."""

    key: str
    weight: float = 1.0


class Tenant(NamedTuple):
    """One key: its demand (asks/s as of `at`), its weight, and its own
    GCRA arrival time, advanced while it is over its share."""

    demand: float
    at: float
    weight: float
    tat: float = -math.inf

    def demand_at(self, now: float) -> float:
        return self.demand * math.exp(-max(0.0, now - self.at) / DEMAND_S)


_EMPTY: Mapping[str, Tenant] = MappingProxyType({})


class Fair(NamedTuple):
    """The keys of one upstream's pace (read-only; each change is a copy)."""

    tenants: Mapping[str, Tenant] = _EMPTY


NO_KEYS = Fair()


def asked(fair: Fair, key: str, weight: float, now: float, calls: int = 1) -> tuple[Fair, str]:
    """(fair, key): `calls` more asked by `key` at `now` with `weight` (one
    Admit, or a lease of several); the key it counts under (OVERFLOW when
    MAX_KEYS others are asking)."""
    tenants = dict(fair.tenants)
    if key not in tenants and len(tenants) >= MAX_KEYS - 1:
        for name in [n for n, t in tenants.items() if t.demand_at(now) < MIN_DEMAND]:
            del tenants[name]
        if len(tenants) >= MAX_KEYS - 1:  # one place kept for OVERFLOW
            key = OVERFLOW
    tenant = tenants.get(key)
    demand = (tenant.demand_at(now) if tenant else 0.0) + calls / DEMAND_S
    tat = tenant.tat if tenant else -math.inf
    tenants[key] = Tenant(demand, now, weight, tat)
    return Fair(MappingProxyType(tenants)), key


def water_level(demands: list[tuple[float, float]], total: float) -> float | None:
    """The rate per unit of weight at which `total` is spent when each
    (demand, weight) gets min(demand, level x weight): max-min fairness by
    weight. None when the demands fit in `total` (nobody is limited)."""
    left, weights = total, sum(w for _, w in demands)
    for demand, weight in sorted(demands, key=lambda dw: dw[0] / dw[1]):
        level = left / weights
        if demand > level * weight:
            return level
        left -= demand
        weights -= weight
    return None


def share(fair: Fair, key: str, rate: float, now: float) -> float | None:
    """The calls/s `key` may start when it asks more than its max-min share
    of `rate`; None when it asks no more (or is the only key asking)."""
    demands = [
        (d, t.weight) for t in fair.tenants.values() if (d := t.demand_at(now)) >= MIN_DEMAND
    ]
    if len(demands) < 2:
        return None
    level = water_level(demands, rate)
    tenant = fair.tenants[key]
    if level is None or tenant.demand_at(now) <= SLACK * level * tenant.weight:
        return None
    return level * tenant.weight


def early(fair: Fair, key: str, rate: float, at: float) -> float:
    """How much sooner than its own spacing at `rate` a call of `key`
    would start `at`: 0 when it may (GCRA with a burst of two, so a key
    whose retries come back a little late still gets its share)."""
    return max(0.0, fair.tenants[key].tat - 1.0 / rate - at)


def reserved(fair: Fair, key: str, at: float, rate: float) -> Fair:
    """`fair` after a call of `key` was granted a start `at`, while spaced
    at `rate` calls/s: its next slot one interval later."""
    tenants = dict(fair.tenants)
    tenant = tenants[key]
    tenants[key] = tenant._replace(tat=max(tenant.tat, at) + 1.0 / rate)
    return Fair(MappingProxyType(tenants))
