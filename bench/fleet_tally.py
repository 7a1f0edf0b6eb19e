"""What the fleet simulation counts per pod, its summary per mode, and the table.

Pure: no clock, no I/O. bench/fleet_sim.py runs the pods and feeds each
pod's `PodTally` the times (seconds since the run's start) at which things
happened; `summarize` and `render_table` turn the tallies into the numbers
printed and kept in bench/results/fleet_sim.json.
"""

from __future__ import annotations

import enum
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["ModeSummary", "Phase", "PodTally", "Timeline", "render_table", "summarize"]


class Phase(enum.StrEnum):
    BEFORE = "before"
    OUTAGE = "outage"
    AFTER = "after"


@dataclass(frozen=True, slots=True)
class Timeline:
    """Healthy for `before_s`, failing every call for `outage_s`, healthy again
    for `after_s`."""

    before_s: float
    outage_s: float
    after_s: float

    @property
    def outage_end_s(self) -> float:
        return self.before_s + self.outage_s

    @property
    def total_s(self) -> float:
        return self.outage_end_s + self.after_s

    def phase(self, t: float) -> Phase:
        if t < self.before_s:
            return Phase.BEFORE
        return Phase.OUTAGE if t < self.outage_end_s else Phase.AFTER


@dataclass(slots=True)
class PodTally:
    """One pod's counts. A call's phase is the upstream's, at the moment it
    received the call; an Admit's is when it was asked."""

    attempts: Counter[Phase] = field(default_factory=Counter)
    calls: Counter[Phase] = field(default_factory=Counter)
    refused: Counter[Phase] = field(default_factory=Counter)
    # Admit answers the fleet store gave from the pod's own state alone
    # (Source.LOCAL): Redis late, failing, or taken for down.
    local_answers: Counter[Phase] = field(default_factory=Counter)
    # How often this pod's fleet store took Redis for down.
    store_downs: int = 0
    # Breaker openings: the pod's own breaker, and the fleet's on Redis as
    # seen by the pod whose call opened it (each is seen by exactly one pod).
    own_openings: int = 0
    fleet_openings: int = 0
    first_refused_s: float | None = None
    last_refused_s: float | None = None
    last_called_s: float | None = None

    def asked(self, phase: Phase, t: float, allowed: bool, local: bool) -> None:
        self.attempts[phase] += 1
        self.local_answers[phase] += local
        if not allowed:
            self.refused[phase] += 1
            if self.first_refused_s is None:
                self.first_refused_s = t
            self.last_refused_s = t

    def called(self, phase: Phase, t: float) -> None:
        self.calls[phase] += 1
        self.last_called_s = t


@dataclass(frozen=True, slots=True)
class ModeSummary:
    mode: str
    pods: int
    attempts: dict[str, int]
    calls: dict[str, int]
    refused: dict[str, int]
    # Median over the pods ever refused of their first refusal, in seconds
    # after the outage began; None when no pod was refused.
    first_refusal_s: float | None
    # Per pod, how long after the upstream recovered it was still refused
    # (0 when it was being admitted by then): median and max over the pods
    # that were admitted again before the run ended.
    refused_after_recovery_s: tuple[float, float]
    # Pods still refused at the run's end: their last refusal came after
    # their last call.
    not_recovered: int
    # None for a store without a fleet (nothing to fall back from).
    local_answers: dict[str, int] | None
    store_downs: int | None
    own_openings: int
    fleet_openings: int | None


def _by_phase(counters: Sequence[Counter[Phase]]) -> dict[str, int]:
    return {phase.value: sum(c[phase] for c in counters) for phase in Phase}


def summarize(
    mode: str, tallies: Sequence[PodTally], timeline: Timeline, *, fleet: bool
) -> ModeSummary:
    firsts = [t.first_refused_s for t in tallies if t.first_refused_s is not None]
    lags = []
    not_recovered = 0
    for tally in tallies:
        last = tally.last_refused_s
        if last is None or last < timeline.outage_end_s:
            lags.append(0.0)
        elif tally.last_called_s is None or tally.last_called_s < last:
            not_recovered += 1
        else:
            lags.append(last - timeline.outage_end_s)
    return ModeSummary(
        mode=mode,
        pods=len(tallies),
        attempts=_by_phase([t.attempts for t in tallies]),
        calls=_by_phase([t.calls for t in tallies]),
        refused=_by_phase([t.refused for t in tallies]),
        first_refusal_s=statistics.median(firsts) - timeline.before_s if firsts else None,
        refused_after_recovery_s=(statistics.median(lags), max(lags)) if lags else (0.0, 0.0),
        not_recovered=not_recovered,
        local_answers=_by_phase([t.local_answers for t in tallies]) if fleet else None,
        store_downs=sum(t.store_downs for t in tallies) if fleet else None,
        own_openings=sum(t.own_openings for t in tallies),
        fleet_openings=sum(t.fleet_openings for t in tallies) if fleet else None,
    )


_HEAD = (
    "mode",
    "upstream calls during the outage",
    "vs no breaker",
    "Admits refused during the outage",
    "first refusal, s into the outage (median)",
    "refused until, s after recovery (median / max)",
    "Admits answered LOCAL during the outage",
)


def _row(summary: ModeSummary, baseline: int | None) -> list[str]:
    outage = Phase.OUTAGE.value
    calls = summary.calls[outage]
    attempts = summary.attempts[outage]
    median, worst = summary.refused_after_recovery_s
    recovery = f"{median:.1f} / {worst:.1f}"
    if summary.not_recovered:
        recovery += f"; {summary.not_recovered} still refused at the end"
    return [
        summary.mode,
        f"{calls:,} of {attempts:,}",
        f"{calls / baseline:.0%}" if baseline else "-",
        f"{summary.refused[outage]:,}",
        "-" if summary.first_refusal_s is None else f"{summary.first_refusal_s:.1f}",
        recovery,
        "-" if summary.local_answers is None else f"{summary.local_answers[outage]:,}",
    ]


def render_table(summaries: Sequence[ModeSummary], baseline_mode: str) -> str:
    """A Markdown table, one line per mode; "vs no breaker" divides each
    mode's outage calls by `baseline_mode`'s."""
    baseline = next(
        (s.calls[Phase.OUTAGE.value] for s in summaries if s.mode == baseline_mode), None
    )
    lines = [
        "| " + " | ".join(_HEAD) + " |",
        "| --- |" + " ---: |" * (len(_HEAD) - 1),
    ]
    lines += ["| " + " | ".join(_row(s, baseline)) + " |" for s in summaries]
    return "\n".join(lines)
