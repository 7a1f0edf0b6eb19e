"""The outcome benchmark's arithmetic: pure functions of what the upstream
and the executors recorded (no I/O, no clock), so tests can check them with
hand-computed numbers.

The upstream counts per 100 ms bucket of wall time (Unix ms // 100) and
executor: attempts, successes, 429s, 5xx. Each executor records its steps as
(start, end, ok, reason, attempts) in wall seconds, and its Squawk calls per
wall second as (calls, calls the daemon did not decide).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = [
    "BUCKET_S",
    "Count",
    "Phase",
    "Step",
    "jain",
    "percentile",
    "phase_figures",
    "recovery_s",
    "sustained_rate",
]

BUCKET_S = 0.1  # the upstream's counting bucket
RECOVERY_WINDOW_S = 1.0
RECOVERY_SHARE = 0.9


class Count(NamedTuple):
    """One upstream row: a 100 ms bucket of one executor."""

    bucket: int  # Unix ms // 100
    executor: str
    attempts: int
    successes: int
    throttled: int  # 429
    errors: int  # 5xx


class Step(NamedTuple):
    executor: str
    start: float  # wall seconds
    end: float
    ok: bool
    reason: str
    attempts: int
    undecided: bool = False  # any of its Squawk calls was not decided by the daemon


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    start: float  # wall seconds
    end: float
    demand: float  # steps/s offered by all executors together
    capacity: float  # the upstream's capacity in force, calls/s

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def holds(self, t: float) -> bool:
        return self.start <= t < self.end


def jain(xs: Sequence[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when every share is
    equal, 1/n when one executor gets everything; None when there is nothing
    to compare (no executor, or every share zero)."""
    squares = sum(x * x for x in xs)
    if not xs or squares == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * squares)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank q-th percentile (0 < q <= 100); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _bucket_of(t: float) -> int:
    # Round first: 12.3 s is bucket 123 even when 12.3 * 10 is 122.99999.
    return math.floor(round(t / BUCKET_S, 6))


def _successes_per_bucket(counts: Iterable[Count]) -> dict[int, int]:
    per: dict[int, int] = {}
    for c in counts:
        per[c.bucket] = per.get(c.bucket, 0) + c.successes
    return per


def recovery_s(counts: Iterable[Count], since: float, until: float, demand: float) -> float | None:
    """Seconds from `since` to the start of the first 1 s window (on the
    100 ms grid, inside [since, until)) whose successes reach 0.9 x `demand`
    (steps/s): how long the upstream took to serve the demand again after an
    overload ended. None when no window does."""
    per = _successes_per_bucket(counts)
    width = round(RECOVERY_WINDOW_S / BUCKET_S)
    need = RECOVERY_SHARE * demand * RECOVERY_WINDOW_S
    first, last = _bucket_of(since), _bucket_of(until)
    for b in range(first, last - width + 1):
        if sum(per.get(b + i, 0) for i in range(width)) >= need:
            return round((b - first) * BUCKET_S, 6)
    return None


def sustained_rate(counts: Iterable[Count], since: float, until: float) -> float:
    """Successes per second over [since, until) (bucket-aligned)."""
    first, last = _bucket_of(since), _bucket_of(until)
    if last <= first:
        return 0.0
    got = sum(c.successes for c in counts if first <= c.bucket < last)
    return got / ((last - first) * BUCKET_S)


def _share(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def phase_figures(
    phase: Phase,
    nominal: float,
    counts: Sequence[Count],
    steps: Sequence[Step],
    calls: Mapping[str, Mapping[int, Sequence[int]]],
    cpu_s: float | None,
) -> dict[str, Any]:
    """The figures of one phase.

    Upstream figures count the buckets inside the phase; step figures the
    steps that started in it (whenever they ended); Squawk calls the wall
    seconds that start inside it. `nominal` is C, the capacity the ratios
    are of (the halving variant's C, not the halved one). `cpu_s` is the
    daemon's CPU seconds spent during the phase (None without a daemon):
    per dispatch means per attempt the upstream got.
    """
    first, last = _bucket_of(phase.start), _bucket_of(phase.end)
    inside = [c for c in counts if first <= c.bucket < last]
    seconds = (last - first) * BUCKET_S
    attempts = sum(c.attempts for c in inside)
    successes = sum(c.successes for c in inside)
    throttled = sum(c.throttled for c in inside)
    errors = sum(c.errors for c in inside)
    started = [s for s in steps if phase.holds(s.start)]
    ok = sum(s.ok for s in started)
    latencies = [(s.end - s.start) * 1000 for s in started]
    # Fairness: each executor's successes at the upstream over its demand.
    executors = sorted({s.executor for s in started})
    got = {e: 0 for e in executors}
    for c in inside:
        if c.executor in got:
            got[c.executor] += c.successes
    offered = {e: 0 for e in executors}
    for s in started:
        offered[s.executor] += 1
    squawk_calls = undecided = 0
    for per_second in calls.values():
        for second, (n, failed) in per_second.items():
            if phase.holds(second):
                squawk_calls += n
                undecided += failed
    return {
        "phase": phase.name,
        "seconds": seconds,
        "demand_per_c": phase.demand / nominal,
        "capacity_per_c": phase.capacity / nominal,
        "attempts": attempts,
        "successes": successes,
        "throttled": throttled,
        "errors": errors,
        "attempts_per_c": attempts / (seconds * nominal) if seconds else None,
        "successes_per_c": successes / (seconds * nominal) if seconds else None,
        "share_429": _share(throttled, attempts),
        "steps": len(started),
        "step_attempts": sum(s.attempts for s in started),
        "step_success": _share(ok, len(started)),
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "p99_ms_by_executor": {
            e: percentile([(s.end - s.start) * 1000 for s in started if s.executor == e], 99)
            for e in executors
        },
        "jain": jain([got[e] / offered[e] for e in executors]),
        "successes_by_executor": got,
        "steps_by_executor": offered,
        "squawk_calls": squawk_calls,
        "undecided": undecided,
        "undecided_share": _share(undecided, squawk_calls),
        "cpu_ms_per_dispatch": (
            cpu_s * 1000 / attempts if cpu_s is not None and attempts else None
        ),
    }
