"""The pacer judged by outcomes: the outcome benchmark's overloads run
through the pod's own state machines on a simulated clock
(bench/outcome/sim.py), over many seeds, against the issue's goals for
`make bench-outcome`. Deterministic: the seeds fix every draw."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.outcome.sim import simulate

SEEDS = range(40)


@pytest.mark.parametrize(
    ("variant", "successes", "attempts"),
    # The goals: 2x successes >= 0.95 x C with attempts <= 1.1 x C; 10x
    # successes >= 0.9 x C with attempts <= 1.2 x C.
    [("2x", 0.95, 1.1), ("10x", 0.9, 1.2)],
)
def test_the_learned_pace_serves_the_capacity_through_an_overload(
    variant: str, successes: float, attempts: float
) -> None:
    runs = [simulate(variant, seed) for seed in SEEDS]
    assert statistics.fmean(r.successes_per_c for r in runs) >= successes
    # Every run: an upstream that is full is never sent much more than it serves.
    assert max(r.attempts_per_c for r in runs) <= attempts


def test_the_learned_pace_follows_a_capacity_that_halves() -> None:
    # From 5 s after the halving, >= 0.9 x the new capacity, in 9 runs of 10.
    served = sorted(simulate("halving", seed).successes_per_c for seed in SEEDS)
    assert served[len(served) // 10] >= 0.9
