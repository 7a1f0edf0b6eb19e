"""The fleet simulation's arithmetic and policies, from hand-worked tallies;
the simulation itself runs only in `make fleet-sim`."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest

# bench/ is a folder at the repository's root, not an installed package,
# and pytest puts only tests/ on the import path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.fleet_sim import Mode, policy_yaml
from bench.fleet_tally import Phase, PodTally, Timeline, render_table, summarize
from squawk.daemon.config import parse_config
from squawk.daemon.config.state import Store

TIMELINE = Timeline(before_s=3.0, outage_s=12.0, after_s=10.0)


@pytest.mark.parametrize(
    ("t", "phase"),
    [(0.0, Phase.BEFORE), (2.99, Phase.BEFORE), (3.0, Phase.OUTAGE), (14.99, Phase.OUTAGE),
     (15.0, Phase.AFTER), (25.0, Phase.AFTER)],
)  # fmt: skip
def test_the_outage_starts_and_ends_on_its_edges(t: float, phase: Phase) -> None:
    assert TIMELINE.phase(t) is phase


def tally(asks: list[tuple[float, bool]], local_at: float | None = None) -> PodTally:
    """A pod that asked at these times, was admitted or refused, and called
    the upstream whenever admitted."""
    out = PodTally()
    for t, allowed in asks:
        out.asked(TIMELINE.phase(t), t, allowed, local=t == local_at)
        if allowed:
            out.called(TIMELINE.phase(t), t)
    return out


# Pod a: refused from 6 s, again until 15.6 s, then calls again.
# Pod b: refused once, admitted again before the outage ended.
# Pod c: refused from 24 s to the end: not recovered.
A = tally([(2, True), (4, True), (6, False), (15.6, False), (16, True)], local_at=4)
B = tally([(2, True), (5, False), (14, True), (16, True)])
C = tally([(2, True), (4, True), (16, True), (24, False), (24.9, False)])


def test_summary_counts_each_phase_and_each_pods_recovery() -> None:
    s = summarize("fleet", [A, B, C], TIMELINE, fleet=True)
    assert s.attempts == {"before": 3, "outage": 5, "after": 6}
    assert s.calls == {"before": 3, "outage": 3, "after": 3}
    assert s.refused == {"before": 0, "outage": 2, "after": 3}
    # First refusals at 6, 5 and 24 s: the median is 6 s, 3 s into the outage.
    assert s.first_refusal_s == pytest.approx(3.0)
    # a: last refused 0.6 s after recovery; b: admitted by then (0); c: not recovered.
    assert s.refused_after_recovery_s == pytest.approx((0.3, 0.6))
    assert s.not_recovered == 1
    assert s.local_answers == {"before": 0, "outage": 1, "after": 0}


def test_a_store_without_a_fleet_has_no_local_answers_and_no_refusals_no_median() -> None:
    s = summarize("no breaker", [tally([(2, True), (4, True)])], TIMELINE, fleet=False)
    assert (s.local_answers, s.store_downs, s.fleet_openings) == (None, None, None)
    assert s.first_refusal_s is None
    assert s.refused_after_recovery_s == (0.0, 0.0)


def test_the_table_compares_each_modes_outage_calls_with_no_breakers() -> None:
    rows = [
        summarize("fleet", [A, B, C], TIMELINE, fleet=True),
        summarize("none", [tally([(t, True) for t in range(4, 10)])], TIMELINE, fleet=False),
    ]
    lines = render_table(rows, "none").splitlines()
    assert len(lines) == 4
    assert lines[2] == (
        "| fleet | 3 of 5 | 50% | 2 | 3.0 | 0.3 / 0.6; 1 still refused at the end | 1 |"
    )
    assert lines[3] == "| none | 6 of 6 | 100% | 0 | - | 0.0 / 0.0 | - |"


def test_each_mode_runs_the_policy_the_simulation_states() -> None:
    configs = {mode: parse_config(policy_yaml(mode, "redis://127.0.0.1:6379/0")) for mode in Mode}
    fleet = configs[Mode.FLEET]
    assert (fleet.state.store, fleet.state.min_pods) == (Store.REDIS, 2)
    assert (fleet.state.sync, fleet.state.deadline) == (timedelta(milliseconds=100),) * 2
    assert configs[Mode.POD_LOCAL].state.store is Store.MEMORY
    assert configs[Mode.NO_BREAKER].state.store is Store.MEMORY
    cb = fleet.policy.profile("default").circuit_breaker
    assert configs[Mode.POD_LOCAL].policy.profile("default").circuit_breaker == cb
    assert (cb.enabled, cb.failure_ratio, cb.minimum_calls, cb.window, cb.buckets) == (
        True, 0.5, 10, timedelta(seconds=10), 10
    )  # fmt: skip
    assert (cb.open_for, cb.half_open_probes, cb.close_ratio) == (timedelta(seconds=3), 5, 0.6)
    assert not configs[Mode.NO_BREAKER].policy.profile("default").circuit_breaker.enabled
