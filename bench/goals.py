"""The goals: ratios between rows of the same round, judged on their median.

Every goal but one is a ratio between rows of the same round (plan.py), so
a noisy machine moves both sides of each ratio; the goal is judged on the
median over the rounds, reported with its spread. The batch goal is an
absolute rate, reported the same way.

The stateless goals read the distinct rows (corpus.py): every call a request
the daemon has not kept an answer for, as executors' requests are. The rows
that send the same bytes on every call measure the daemon's reuse of a kept
answer, the best case, and appear as informational lines only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .report import Row, trace_label
from .rounds import MAX_SPREAD, Spread, spread
from .workloads import BATCH_DISTINCT, DECIDE_DISTINCT, DISPATCH, DISPATCH_RATE, ECHO_DISTINCT

__all__ = ["Goal", "by_round", "describe", "goals", "render_goals", "usable"]

# The rows the stateless goals read: every request distinct (corpus.py).
DECIDE, BATCH, ECHO = DECIDE_DISTINCT, BATCH_DISTINCT, ECHO_DISTINCT
# The best case beside them: the same request's bytes on every call.
SAME_BYTES, ECHO_SAME_BYTES = "DecideRetry transient", "Echo"


@dataclass(frozen=True)
class Goal:
    name: str
    detail: str
    # One value per round; for a single measurement (core, idle RSS) one value.
    values: tuple[float, ...]
    # None: an informational line, no goal.
    limit: float | None = None
    # "min": the median must be >= limit; "max": <= limit.
    kind: str = "min"
    per_round: bool = True
    # Rows that could not keep up with their offered rate: the ratio is
    # still computed from what they measured, and the goal is not met.
    overloaded: tuple[str, ...] = ()
    # Rounds that gave no value, and why.
    missing: tuple[str, ...] = ()

    @property
    def spread(self) -> Spread | None:
        return spread(self.values)

    @property
    def value(self) -> float | None:
        found = self.spread
        return None if found is None else found.median

    @property
    def met(self) -> bool | None:
        if self.limit is None or self.value is None:
            return None
        if self.overloaded:
            return False
        return self.value >= self.limit if self.kind == "min" else self.value <= self.limit

    @property
    def verdict(self) -> str:
        if self.limit is None:
            return "info"
        if self.met is None:
            return "no data"
        if self.overloaded:
            return f"NOT MET (overloaded: {'; '.join(self.overloaded)})"
        return "met" if self.met else "NOT MET"

    @property
    def too_wide(self) -> bool:
        found = self.spread
        return self.per_round and found is not None and found.too_wide

    def as_json(self) -> dict[str, Any]:
        found = self.spread
        return {
            "name": self.name,
            "detail": self.detail,
            "limit": self.limit,
            "kind": self.kind if self.limit is not None else None,
            # The median over rounds, for a per-round goal.
            "value": None if found is None else round(found.median, 4),
            "rounds": [round(v, 4) for v in self.values] if self.per_round else None,
            "min": None if found is None else round(found.low, 4),
            "max": None if found is None else round(found.high, 4),
            "spread": None if found is None or not self.per_round else round(found.width, 4),
            "spread_too_wide": self.too_wide,
            "overloaded": list(self.overloaded),
            "missing": list(self.missing),
            "met": self.met,
            "status": self.verdict,
        }


def usable(row: Row) -> bool:
    """Whether a row's figures may enter a ratio."""
    # An overloaded row still measured its latency; a failed row measured
    # nothing, a traced row that dropped spans flatters tracing, and a
    # Redis-store row whose answers were mostly local timed no Redis.
    status: str = row["status"]
    return status == "ok" or status.startswith("overloaded")


def _is(name: str, rpc: str) -> bool:
    """Whether row `name` is `rpc`; a batch row whatever its size (`rpc` x100)."""
    base, _, size = name.rpartition(" x")
    return name == rpc or (base == rpc and size.isdigit())


def by_round(
    rows: Sequence[Row], target: str, rpc: str, sampling: float | None, mode: str
) -> dict[int, Row]:
    """One row's rounds, by round number: the row named `rpc` (any batch size)."""
    return {
        row["round"]: row
        for row in rows
        if row.get("round") is not None
        and (row["target"], row.get("sampling"), row["mode"]) == (target, sampling, mode)
        and _is(row["rpc"], rpc)
    }


def describe(row: Row) -> str:
    return f"{row['target']} tracing {trace_label(row.get('sampling'))} {row['rpc']} {row['mode']}"


def _per_round(
    name: str,
    detail: str,
    rows: tuple[dict[int, Row], dict[int, Row] | None],
    key: str,
    limit: float | None,
    kind: str,
) -> Goal:
    """Row `key` per round, divided by the second rows' `key` when given."""
    top, bottom = rows
    values: list[float] = []
    overloaded: list[str] = []
    missing: list[str] = []
    for n in sorted(top.keys() | (bottom or {}).keys()):
        pair = [top.get(n)] if bottom is None else [top.get(n), bottom.get(n)]
        found = [row for row in pair if row is not None]
        if len(found) < len(pair):
            missing.append(f"round {n}: a row did not run")
            continue
        bad = [row for row in found if not usable(row)]
        if bad:
            missing.append(f"round {n}: {describe(bad[0])}: {bad[0]['status'].splitlines()[0]}")
            continue
        numbers = [float(row[key]) for row in found if row.get(key) is not None]
        if len(numbers) < len(found) or 0.0 in numbers[1:]:
            missing.append(f"round {n}: no {key}")
            continue
        values.append(numbers[0] / numbers[1] if len(numbers) == 2 else numbers[0])
        overloaded += [
            f"round {n} {describe(row)}" for row in found if row["status"].startswith("overloaded")
        ]
    return Goal(
        name,
        detail,
        tuple(values),
        limit,
        kind,
        overloaded=tuple(overloaded),
        missing=tuple(missing),
    )


def goals(
    rows: Sequence[Row], core_us: dict[str, float], idle_rss_mb: float | None, rate: str | None
) -> list[Goal]:
    """The goals, then the informational lines; `rate` names the first --rates mode."""
    decide, analyze, sat = DECIDE, "AnalyzeError offline", "saturation"
    at = rate or "no rate"

    def squawk(rpc: str, sampling: float | None, mode: str) -> dict[int, Row]:
        return by_round(rows, "squawk", rpc, sampling, mode)

    echo = by_round(rows, "echo-py", ECHO, None, sat)
    off = squawk(decide, None, sat)

    def tracing(share: float, judged: bool) -> list[Goal]:
        """Calls/s, the two p99s and CPU, traced at `share` (a goal or informational)."""
        on = f"tracing on {share * 100:g} %"

        def ratio(
            name: str,
            detail: str,
            top: dict[int, Row],
            bottom: dict[int, Row],
            key: str,
            limit: float,
            kind: str,
        ) -> Goal:
            return _per_round(name, detail, (top, bottom), key, limit if judged else None, kind)

        return [
            ratio(
                f"DecideRetry distinct calls/s, {on} ÷ tracing off (saturation)",
                "closed loop, same concurrency",
                squawk(decide, share, sat),
                off,
                "calls_per_s",
                0.75,
                "min",
            ),
            ratio(
                f"DecideRetry distinct p99 at {at}, {on} ÷ tracing off",
                "open loop, same offered rate",
                squawk(decide, share, at),
                squawk(decide, None, at),
                "p99_ms",
                2.0,
                "max",
            ),
            ratio(
                f"AnalyzeError offline p99 at {at}, {on} ÷ tracing off",
                "open loop, same offered rate",
                squawk(analyze, share, at),
                squawk(analyze, None, at),
                "p99_ms",
                2.0,
                "max",
            ),
            ratio(
                f"CPU s per 1,000 DecideRetry distinct at saturation, {on} ÷ Python echo floor",
                "server CPU from /proc, closed loop",
                squawk(decide, share, sat),
                echo,
                "cpu_s_per_1k",
                1.6,
                "max",
            ),
        ]

    def floor(what: str, top: dict[int, Row], bottom: dict[int, Row], judged: bool) -> list[Goal]:
        """Calls/s and p99 at saturation, tracing off, against the echo floor."""
        return [
            _per_round(
                f"{what} calls/s, tracing off ÷ Python echo floor (saturation)",
                "closed loop, same concurrency",
                (top, bottom),
                "calls_per_s",
                0.9 if judged else None,
                "min",
            ),
            _per_round(
                f"{what} p99 at saturation (tracing off) ÷ Python echo floor p99",
                "closed loop, same concurrency",
                (top, bottom),
                "p99_ms",
                1.2 if judged else None,
                "max",
            ),
        ]

    batch = _per_round(
        "DecideRetryBatch distinct decisions/s (tracing off)",
        "closed loop, decisions = calls x batch size",
        (squawk(BATCH, None, sat), None),
        "decisions_per_s",
        100_000,
        "min",
    )
    # The same bytes on every call, answered from the kept decisions.
    best = floor(
        "DecideRetry transient, same bytes (best case):",
        squawk(SAME_BYTES, None, sat),
        by_round(rows, "echo-py", ECHO_SAME_BYTES, None, sat),
        judged=False,
    )
    # What one dispatch through the Python runner costs the daemon (dispatch.py).
    at_dispatch = f"{DISPATCH_RATE:g}/s"
    dispatch = squawk(DISPATCH, None, at_dispatch)
    dispatch_cpu = _per_round(
        f"daemon CPU ms per dispatch through the Python runner at {at_dispatch}",
        "server CPU from /proc ÷ dispatches, executors' open loop, healthy upstream",
        (dispatch, None),
        "cpu_s_per_1k",
        0.25,
        "max",
    )
    dispatch_info = [
        _per_round(
            f"RPCs per dispatch through the Python runner at {at_dispatch}",
            "counted in the executors, every method",
            (dispatch, None),
            "rpcs_per_dispatch",
            None,
            "max",
        ),
        _per_round(
            f"daemon CPU per dispatch ÷ Python echo floor CPU per call, at {at_dispatch}",
            "how many echo calls one dispatch costs; server CPU from /proc",
            (dispatch, by_round(rows, "echo-py", ECHO, None, at_dispatch)),
            "cpu_s_per_1k",
            None,
            "max",
        ),
    ]
    hundred = tracing(1.0, judged=True)
    worst = max((v for k, v in core_us.items() if k.startswith("DecideRetry")), default=None)
    return [
        *hundred[:3],
        *floor("DecideRetry distinct", off, echo, judged=True),
        batch,
        hundred[3],
        dispatch_cpu,
        *tracing(0.1, judged=False),
        *dispatch_info,
        *best,
        Goal(
            "core us per decision (worst DecideRetry case)",
            "in-process, bench/core.py",
            () if worst is None else (worst,),
            per_round=False,
        ),
        Goal(
            "idle RSS MB",
            "squawk, tracing off, before any load",
            () if idle_rss_mb is None else (idle_rss_mb,),
            per_round=False,
        ),
    ]


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _line(g: Goal) -> str:
    found = g.spread
    if found is None:
        value = "-"
    elif g.per_round and found.rounds > 1:
        value = (
            f"{_number(found.median)} (median; {_number(found.low)}-{_number(found.high)} "
            f"over {found.rounds} rounds, spread {found.width:.0%})"
        )
    elif g.per_round:
        value = f"{_number(found.median)} (1 round)"
    else:
        value = _number(found.median)
    text = f"  {g.name}: {value}"
    if g.limit is not None:
        sign = ">=" if g.kind == "min" else "<="
        text += f" goal {sign} {_number(g.limit)}: {g.verdict}"
    if g.too_wide:
        text += f"; spread too wide to read (over {MAX_SPREAD:.0%})"
    text += f"  [{g.detail}]"
    for why in g.missing:
        text += f"\n      {why}"
    return text


def render_goals(found: Sequence[Goal]) -> str:
    judged = [_line(g) for g in found if g.limit is not None]
    info = [_line(g) for g in found if g.limit is None]
    return "\n".join([*judged, "informational (no goal):", *info])
