"""The scale simulation's arithmetic: calls as counts, the fleet's true
window, the most calls in any second, and what a figure is per pod or core.

Pure: no clock, no I/O. bench/fleet_scale.py runs the pods and hands these
the times (seconds of its clock) and counts; bench/fleet_scale_table.py
prints what they give.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

from squawk.policy.breaker import BreakerConfig, trips

__all__ = [
    "PACE_SLACK",
    "Made",
    "Sample",
    "ServerWork",
    "Truth",
    "held",
    "pace_limit",
    "percentile",
    "server_work",
    "whole",
]

# The bound on the fleet's pace: R times this, plus one sync interval's worth.
PACE_SLACK = 1.05


def whole(total: float, sent: int) -> int:
    """The whole calls of a running `total` (a rate times the time, so a
    fraction) not yet in a delta, `sent` of them being in earlier ones: a
    pod at 2.5 calls per interval sends 2, 3, 2, 3, never 2.5 or 0."""
    return max(math.floor(total + 1e-9) - sent, 0)


class Truth:
    """The calls every pod made, as they were made, in the fleet store's
    own bucket numbering (fleet.lua: bucket k of a window of `window_ms` in
    `buckets` covers [k, k + 1) times window_ms / buckets of the server's
    clock): what the fleet's window would hold if every pod synced at once,
    so that the moment the breaker's rule is met in the calls themselves is
    known, and the syncs' delay can be measured from it."""

    def __init__(self, config: BreakerConfig) -> None:
        self.config = config
        self.window_ms = config.window.total_seconds() * 1000
        self.buckets = config.buckets
        self._counts: dict[int, tuple[float, float]] = {}

    def _bucket(self, at_ms: float) -> int:
        return math.floor(at_ms * self.buckets / self.window_ms)

    def add(self, at_ms: float, calls: float, failures: float) -> None:
        number = self._bucket(at_ms)
        was = self._counts.get(number, (0.0, 0.0))
        self._counts[number] = (was[0] + calls, was[1] + failures)

    def sums(self, at_ms: float) -> tuple[int, int]:
        """(calls, failures) in the window at `at_ms`, whole calls."""
        current = self._bucket(at_ms)
        oldest = current - self.buckets + 1
        for number in [n for n in self._counts if n < oldest]:
            del self._counts[number]
        live = [c for n, c in self._counts.items() if n <= current]
        return math.floor(sum(c[0] for c in live)), math.floor(sum(c[1] for c in live))

    def trips(self, at_ms: float, failing_pods: int, min_pods: int) -> bool:
        """Whether the calls made by `at_ms` meet the fleet breaker's rule:
        the breaker's own (breaker.trips) over the window, and the quorum."""
        calls, failures = self.sums(at_ms)
        return failing_pods >= min_pods and trips(calls, failures, self.config)


class Made:
    """Calls made over time, at a rate constant between two points: each
    point is (t, calls made in (the previous t, t]), in order of t, the
    first one (start, 0). So the calls made in any span are exact, a
    point's calls spread over its own span."""

    def __init__(self, points: Sequence[tuple[float, float]]) -> None:
        self.times = [t for t, _ in points]
        self.totals = list(itertools.accumulate(m for _, m in points))

    def by(self, t: float) -> float:
        """The calls made by `t`."""
        times, totals = self.times, self.totals
        i = bisect.bisect_left(times, t)
        if i == 0:
            return 0.0
        if i == len(times):
            return totals[-1]
        fraction = (t - times[i - 1]) / (times[i] - times[i - 1])
        return totals[i - 1] + fraction * (totals[i] - totals[i - 1])

    def between(self, a: float, b: float) -> float:
        return self.by(b) - self.by(a)

    def most(self, span: float, since: float = -math.inf) -> tuple[float, float]:
        """(end, calls): the most made in any `span` that starts at `since`
        or later, and when it ended. The most is where a span's start or its
        end meets a point, so those are the spans tried."""
        starts = {since, *self.times, *(t - span for t in self.times)}
        tried = [x for x in starts if x >= since and x + span <= self.times[-1]]
        best_end, best = math.nan, 0.0
        for x in sorted(tried):
            made = self.between(x, x + span)
            if made > best + 1e-9:
                best_end, best = x + span, made
        return best_end, best


def held(
    syncs_per_s: float, pods: int, interval_s: float, reported: float, late_p99_ms: float
) -> bool:
    """Whether a run held its schedule: at least 98 % of the syncs due (each
    pod once per interval), readings whose demand sums held at least 97 % of
    the pods (`reported`: the mean share of the calling pods the last slot's
    sum held), and 99 % of the ticks less than an interval late. A pod
    whose sync comes late may miss a slot's sum, and the others' shares grow
    by its part: a run that fell behind measured the simulator's lag as much
    as the design. (Not 100 %: a pod that syncs a few ms from a slot's edge
    crosses it now and then even on time, as a daemon's would.)"""
    on_time = late_p99_ms < interval_s * 1000
    return syncs_per_s >= 0.98 * pods / interval_s and reported >= 0.97 and on_time


def pace_limit(rate: float, span_s: float, interval_s: float) -> float:
    """The most calls a fleet paced at `rate` may start in `span_s`:
    PACE_SLACK times the rate's, plus one sync interval's worth (the
    staleness the shares allow)."""
    return PACE_SLACK * rate * span_s + rate * interval_s


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank `q` percentile (0 < q <= 100) of `values`; nan when none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(math.ceil(q / 100 * len(ordered)) - 1, 0)]


class Sample(NamedTuple):
    """Running totals read at one moment: the clock, the Redis server
    process's CPU (utime + stime) and this process's, the server's script
    calls and their time (INFO commandstats' cmdstat_evalsha), and every
    command it ran, those scripts ran included (total_commands_processed)."""

    wall_s: float
    server_cpu_s: float
    own_cpu_s: float
    scripts: int
    script_us: int
    commands: int


class ServerWork(NamedTuple):
    """What the server and this process did between two samples."""

    seconds: float
    scripts_per_s: float
    commands_per_s: float
    # CPU seconds per second of wall time: 1.0 is one core, busy.
    server_cores: float
    own_cores: float
    # Per script: the server's CPU, and the time INFO says the script ran.
    server_us_per_script: float
    script_us: float


def server_work(a: Sample, b: Sample) -> ServerWork:
    wall = b.wall_s - a.wall_s
    scripts = b.scripts - a.scripts
    cpu = b.server_cpu_s - a.server_cpu_s
    per = 1e6 / scripts if scripts else math.nan
    return ServerWork(
        wall,
        scripts / wall,
        (b.commands - a.commands) / wall,
        cpu / wall,
        (b.own_cpu_s - a.own_cpu_s) / wall,
        cpu * per,
        (b.script_us - a.script_us) * per / 1e6,
    )
