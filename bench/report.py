"""The table and the goals: rendering rows, and the ratios the issue asks for.

Every goal is a ratio between rows of the same run (or, for the core, an
in-process time), so a noisy machine moves both sides of each ratio.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Goal", "goals", "render_goals", "render_table"]

Row = dict[str, Any]

_COLUMNS = (
    ("target", "target", 8, "s"),
    ("rpc", "rpc", 24, "s"),
    ("tracing", "trace", 5, "s"),
    ("mode", "mode", 10, "s"),
    ("calls_per_s", "calls/s", 8, ".0f"),
    ("decisions_per_s", "dec/s", 8, ".0f"),
    ("p50_ms", "p50 ms", 7, ".3f"),
    ("p99_ms", "p99 ms", 7, ".3f"),
    ("p999_ms", "p99.9 ms", 8, ".3f"),
    ("cpu_s_per_1k", "CPU s/1k", 8, ".3f"),
    ("rss_mb", "RSS MB", 6, ".1f"),
    ("spans_per_call", "spans", 5, ".2f"),
)


def _cell(value: Any, width: int, fmt: str) -> str:
    if value is None:
        text = "-"
    elif isinstance(value, bool):
        text = "on" if value else "off"
    else:
        text = format(value, fmt)
    return text.rjust(width) if fmt != "s" else text.ljust(width)


def render_table(rows: Sequence[Row]) -> str:
    head = " ".join(_cell(title, width, "s") for _, title, width, _ in _COLUMNS) + "  status"
    lines = [head, "-" * len(head)]
    for row in rows:
        cells = " ".join(_cell(row.get(key), w, fmt) for key, _, w, fmt in _COLUMNS)
        # One line per row; the JSON keeps the whole status (log tails included).
        status = " | ".join(line.strip() for line in row["status"].splitlines() if line.strip())
        lines.append(f"{cells}  {status[:200]}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Goal:
    name: str
    value: float | None
    limit: float
    # "min": value must be >= limit; "max": value must be <= limit.
    kind: str
    detail: str

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        return self.value >= self.limit if self.kind == "min" else self.value <= self.limit


def _find(rows: Sequence[Row], target: str, rpc: str, tracing: bool, mode: str) -> Row | None:
    for row in rows:
        if (row["target"], row["rpc"], row["tracing"], row["mode"]) == (target, rpc, tracing, mode):
            return row if row["status"] == "ok" else None
    return None


def _ratio(a: Row | None, b: Row | None, key: str) -> float | None:
    if a is None or b is None or not b.get(key):
        return None
    return round(float(a[key]) / float(b[key]), 3)


def goals(
    rows: Sequence[Row], core_us: dict[str, float], idle_rss_mb: float | None, rate: str | None
) -> list[Goal]:
    decide = "DecideRetry transient"
    sat, echo = "saturation", "echo-py"
    d_sat = _find(rows, "squawk", decide, False, sat)
    e_sat = _find(rows, echo, "Echo", False, sat)
    traced = _find(rows, "squawk", decide, True, sat)
    batch = next(
        (r for r in rows if r["rpc"].startswith("DecideRetryBatch") and not r["tracing"]), None
    )
    out = [
        Goal(
            "DecideRetry calls/s vs the Python echo floor",
            _ratio(d_sat, e_sat, "calls_per_s"),
            0.85,
            "min",
            "closed loop, same concurrency",
        ),
        Goal(
            "DecideRetry p99 vs the Python echo floor (saturation)",
            _ratio(d_sat, e_sat, "p99_ms"),
            1.3,
            "max",
            "closed loop, same concurrency",
        ),
    ]
    if rate is not None:
        out.append(
            Goal(
                f"DecideRetry p99 vs the Python echo floor ({rate})",
                _ratio(
                    _find(rows, "squawk", decide, False, rate),
                    _find(rows, echo, "Echo", False, rate),
                    "p99_ms",
                ),
                1.3,
                "max",
                "open loop, same offered rate",
            )
        )
    cost = _ratio(traced, d_sat, "calls_per_s")
    out += [
        Goal(
            "calls/s lost to tracing at 100 % sampling",
            None if cost is None else round(1 - cost, 3),
            0.15,
            "max",
            "DecideRetry transient, saturation, on vs off",
        ),
        Goal(
            "DecideRetryBatch decisions/s",
            batch["decisions_per_s"] if batch and batch["status"] == "ok" else None,
            50_000,
            "min",
            batch["rpc"] if batch else "no batch row",
        ),
        Goal(
            "core us per decision (worst DecideRetry case)",
            max((v for k, v in core_us.items() if k.startswith("DecideRetry")), default=None),
            5.0,
            "max",
            "in-process, bench/core.py",
        ),
        Goal("idle RSS MB", idle_rss_mb, 80.0, "max", "squawk, tracing off, before any load"),
    ]
    return out


def render_goals(found: Sequence[Goal]) -> str:
    lines = []
    for g in found:
        verdict = {True: "met", False: "NOT MET", None: "no data"}[g.met]
        value = "-" if g.value is None else f"{g.value:g}"
        sign = ">=" if g.kind == "min" else "<="
        lines.append(f"  {g.name}: {value} (goal {sign} {g.limit:g}) {verdict}  [{g.detail}]")
    return "\n".join(lines)
