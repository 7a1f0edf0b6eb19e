"""What the Redis store adds to a decision: in each round, a "+store" row on
the Redis-store daemon against the same row on the memory-store daemon.

The "+store" rows (workloads.py) run at one rate (--store-rate) on both
daemons, in every round, a round's two rows seconds apart (targets.py). Per
round, the Redis row's p50 and p99 minus the memory row's are what the wait
on Redis adds to the answer (the round trip, the script, and the Redis
client's work in the daemon, with the queueing that work causes), and the
Redis row divided by the memory row says how much that is next to the
decision itself. The daemon's CPU per call is compared the same way: it is
what the Redis client costs the daemon's one core. Each figure is the
median over the rounds with its range, as for the goals (goals.py); the
rounds' spread is judged on the ratio, since a difference near zero has no
meaningful relative spread.

Beside them stands the share of the Redis row's answers that the pod gave
alone (`local`: Redis was late or away). A late answer waits the whole
deadline (5 ms), so once more than 1 % of a row's answers are local its p99
is the deadline's, not Redis's; store.py fails a row where most are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .goals import by_round, describe, usable
from .report import Row
from .rounds import MAX_SPREAD, spread
from .targets import REDIS_TARGET
from .workloads import STORE_ADMIT, STORE_DECIDE

__all__ = ["StoreCost", "render_store_costs", "store_costs"]

# Each figure and the row's field it reads, in ms (CPU s per 1,000 calls is ms per call).
FIGURES = (("p50", "p50_ms"), ("p99", "p99_ms"), ("CPU per call", "cpu_s_per_1k"))


@dataclass(frozen=True)
class StoreCost:
    rpc: str
    figure: str
    mode: str
    # One value per round that gave both rows, in ms: the memory store's
    # figure and the Redis store's.
    memory_ms: tuple[float, ...]
    redis_ms: tuple[float, ...]
    # Per such round, the share of the Redis row's answers the pod gave alone.
    local_share: tuple[float, ...]
    # Rows that could not keep up with the rate: the figure is queueing too.
    overloaded: tuple[str, ...] = ()
    # Rounds that gave no value, and why.
    missing: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.rpc} {self.figure} at {self.mode}"

    @property
    def added_ms(self) -> tuple[float, ...]:
        return tuple(r - m for r, m in zip(self.redis_ms, self.memory_ms, strict=True))

    @property
    def ratio(self) -> tuple[float, ...]:
        return tuple(r / m for r, m in zip(self.redis_ms, self.memory_ms, strict=True))

    @property
    def too_wide(self) -> bool:
        found = spread(self.ratio)
        return found is not None and found.too_wide

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rpc": self.rpc,
            "figure": self.figure,
            "mode": self.mode,
            "memory_ms": _summary(self.memory_ms),
            "redis_ms": _summary(self.redis_ms),
            "added_ms": _summary(self.added_ms),
            "ratio": _summary(self.ratio),
            "spread_too_wide": self.too_wide,
            "local_share": _summary(self.local_share),
            "overloaded": list(self.overloaded),
            "missing": list(self.missing),
        }


def _summary(values: tuple[float, ...]) -> dict[str, Any] | None:
    found = spread(values)
    if found is None:
        return None
    return {
        "value": round(found.median, 4),
        "rounds": [round(v, 4) for v in values],
        "min": round(found.low, 4),
        "max": round(found.high, 4),
        "spread": round(found.width, 4),
    }


def store_costs(rows: Sequence[Row], rate: str) -> list[StoreCost]:
    """The figures of each "+store" row at `rate` (its mode's name, "200/s");
    nothing for a row that ran on neither daemon."""
    found = []
    for rpc in (STORE_DECIDE, STORE_ADMIT):
        memory = by_round(rows, "squawk", rpc, None, rate)
        redis = by_round(rows, REDIS_TARGET, rpc, None, rate)
        if memory or redis:
            found += [_cost(rpc, figure, rate, memory, redis, key) for figure, key in FIGURES]
    return found


def _cost(
    rpc: str, figure: str, mode: str, memory: dict[int, Row], redis: dict[int, Row], key: str
) -> StoreCost:
    memory_ms: list[float] = []
    redis_ms: list[float] = []
    local: list[float] = []
    overloaded: list[str] = []
    missing: list[str] = []
    for n in sorted(memory.keys() | redis.keys()):
        mem, red = memory.get(n), redis.get(n)
        if mem is None or red is None:
            missing.append(f"round {n}: a row did not run")
            continue
        bad = [row for row in (mem, red) if not usable(row)]
        if bad:
            missing.append(f"round {n}: {describe(bad[0])}: {bad[0]['status'].splitlines()[0]}")
            continue
        figures = (mem.get(key), red.get(key), red.get("local_share"))
        if None in figures or figures[0] == 0:
            missing.append(f"round {n}: no {key} or no local share")
            continue
        memory_ms.append(float(mem[key]))
        redis_ms.append(float(red[key]))
        local.append(float(red["local_share"]))
        overloaded += [
            f"round {n} {describe(row)}"
            for row in (mem, red)
            if row["status"].startswith("overloaded")
        ]
    return StoreCost(
        rpc,
        figure,
        mode,
        tuple(memory_ms),
        tuple(redis_ms),
        tuple(local),
        tuple(overloaded),
        tuple(missing),
    )


def _range(values: tuple[float, ...], fmt: str, unit: str = "") -> str:
    """The median, and the range over the rounds when there are several."""
    found = spread(values)
    assert found is not None
    text = format(found.median, fmt) + unit
    if found.rounds > 1:
        text += f" ({format(found.low, fmt)} to {format(found.high, fmt)})"
    return text


def _line(cost: StoreCost) -> str:
    rounds = len(cost.redis_ms)
    text = f"  {cost.name}"
    if not rounds:
        text += ": -"
    else:
        memory, redis = spread(cost.memory_ms), spread(cost.redis_ms)
        assert memory is not None and redis is not None
        text += (
            f" ({rounds} {'round' if rounds == 1 else 'rounds'}): "
            f"memory {memory.median:.3f} ms, Redis {redis.median:.3f} ms; "
            f"Redis adds {_range(cost.added_ms, '+.3f', ' ms')}, "
            f"x{_range(cost.ratio, '.2f')}; "
            f"local answers {_range(cost.local_share, '.1%')}"
        )
        if cost.too_wide:
            text += f"; spread too wide to read (over {MAX_SPREAD:.0%})"
    if cost.overloaded:
        text += f"; overloaded: {'; '.join(cost.overloaded)}"
    for why in cost.missing:
        text += f"\n      {why}"
    return text


def render_store_costs(costs: Sequence[StoreCost]) -> str:
    return "\n".join(_line(c) for c in costs)
