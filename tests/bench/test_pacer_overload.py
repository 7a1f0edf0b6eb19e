"""The pacer judged by outcomes: the outcome benchmark's overloads run
through the pod's own state machines on a simulated clock
(bench/outcome/sim.py), over many seeds, against the issue's goals for
`make bench-outcome`. Deterministic: the seeds fix every draw."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.outcome.sim import DIALECTS, simulate

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


@pytest.mark.parametrize(
    ("dialect", "rejected", "attempts"),
    # The goals: at most 2 % refused, attempts at most 1.1 x C.
    # "lying" (a quota of 999,999 on most answers, one call left for a day
    # on the others) is paced by the learned pace once a 429 says the quota
    # is unused, release included (7.4 % refused on average while the
    # headers' pace still released the calls a cool-down held, 4.2 % while
    # each of its 429s still cooled the pod for a second); the first
    # throttles of an overload meet no pace at all, and this short run
    # weighs them more than make bench-outcome's: held to 3.5 %.
    # "openai-h" is the benchmark's older half-second bucket, with its own
    # goal, checked by make bench-outcome's "headers" variant.
    [
        (d, 0.035, 1.1) if d == "lying" else (d, 0.02, 1.1)
        for d in sorted(DIALECTS)
        if d != "openai-h"
    ],
)
def test_every_header_dialect_is_paced_at_its_capacity(
    dialect: str, rejected: float, attempts: float
) -> None:
    # Each provider's headers as its documentation states them (OpenAI's
    # Go-duration resets, Anthropic's RFC 3339 resets in whole seconds, the
    # IETF fields' fixed window, a reset that counts whole seconds to the
    # next call), a second's or a minute's bucket, at 10x: successes at
    # least 0.95 x C on average (no header, however wrong, shuts the
    # upstream), refusals on average and attempts in every run bounded
    # (over C plus what the upstream held as the overload began, which a
    # pace that spends it is served: make bench-outcome's bound).
    runs = [simulate(dialect, seed, warm=2.0, hot=12.0, after=1.0) for seed in range(8)]
    assert statistics.fmean(r.successes_per_c for r in runs) >= 0.95
    assert statistics.fmean(r.rejected for r in runs) <= rejected
    assert max(r.attempts_per_c - r.bank_per_c for r in runs) <= attempts


def test_a_529_storm_completes_as_many_steps_as_no_squawk() -> None:
    # Half the calls answered 529 at random at half the capacity: the
    # executors behind the pod complete at least 0.99 x the steps the same
    # executors complete alone, at no more attempts.
    runs = [simulate("storm-529", seed) for seed in range(12)]
    alone = [simulate("storm-529", seed, squawk=False) for seed in range(12)]
    assert statistics.fmean(r.step_success for r in runs) >= 0.99 * statistics.fmean(
        r.step_success for r in alone
    )
    assert statistics.fmean(r.attempts_per_c for r in runs) <= statistics.fmean(
        r.attempts_per_c for r in alone
    )
