"""The benchmark's arithmetic: rounds' medians and spreads, the loop-lag
histogram read from Prometheus text, the spans check, and the goals."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

# bench/ is a folder at the repository's root, not an installed package,
# and pytest puts only tests/ on the import path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.goals import Goal, goals, render_goals
from bench.loop_lag import lag_fields, max_bound, parse_buckets, quantile_bound
from bench.measure import spans_dropped
from bench.rounds import spread

Row = dict[str, Any]


def test_spread_is_the_median_and_range_over_rounds() -> None:
    found = spread([0.9, 1.1, 0.8])
    assert found is not None
    assert (found.median, found.low, found.high, found.rounds) == (0.9, 0.8, 1.1, 3)
    assert found.width == pytest.approx(0.3 / 0.9)
    assert found.too_wide  # 0.33 > 0.25


@pytest.mark.parametrize(
    ("values", "median", "width", "too_wide"),
    [
        ([1.0, 1.1, 1.2], 1.1, 0.2 / 1.1, False),
        ([1.0, 2.0, 3.0, 4.0], 2.5, 3.0 / 2.5, True),  # an even count: the middle two's mean
        ([0.8, 1.0], 0.9, 0.2 / 0.9, False),
        ([0.75, 1.0], 0.875, 0.25 / 0.875, True),
        ([2.0], 2.0, 0.0, False),  # one round cannot disagree with itself
        ([0.0, 0.0], 0.0, 0.0, False),
    ],
)
def test_spread_flags_rounds_that_disagree_by_over_a_quarter(
    values: list[float], median: float, width: float, too_wide: bool
) -> None:
    found = spread(values)
    assert found is not None
    assert found.median == pytest.approx(median)
    assert found.width == pytest.approx(width)
    assert found.too_wide is too_wide


def test_no_rounds_no_spread() -> None:
    assert spread([]) is None


def _lag_text(counts: list[int]) -> str:
    """The daemon's exposition of the lag histogram with these cumulative
    counts, beside another histogram that must not be read."""
    bounds = ["0.0005", "0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "0.1", "0.25"]
    bounds += ["0.5", "1.0", "2.5", "+Inf"]
    assert len(counts) == len(bounds)
    name = "squawk_event_loop_lag_seconds"
    lines = [
        f"# HELP {name} How much later than asked the event loop ran a periodic timer.",
        f"# TYPE {name} histogram",
    ]
    lines += [f'{name}_bucket{{le="{b}"}} {c}.0' for b, c in zip(bounds, counts, strict=True)]
    lines += [
        f"{name}_count {counts[-1]}.0",
        f"{name}_sum 0.123",
        f"{name}_created 1.7e+09",
        'squawk_decision_duration_seconds_bucket{le="0.0005",rpc="DecideRetry"} 999.0',
        'squawk_decision_duration_seconds_bucket{le="+Inf",rpc="DecideRetry"} 999.0',
    ]
    return "\n".join(lines) + "\n"


# 10 observations at or below 0.5 ms and 10 more at or below 1 ms before the window.
BEFORE = _lag_text([10, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20])
# In the window, 200 more: 150 <= 0.5 ms, 40 in (0.5, 1], 7 in (1, 2],
# 2 in (5, 10] and 1 in (20, 50] ms.
AFTER = _lag_text([160, 210, 217, 217, 219, 219, 220, 220, 220, 220, 220, 220, 220])


def test_lag_reads_the_window_between_two_scrapes() -> None:
    # The 99th percentile of 200 is the 198th smallest: 197 are at or below
    # 2 ms, 199 at or below 10 ms, so it lies in (5, 10]. The highest lies in (20, 50].
    assert lag_fields(BEFORE, AFTER) == {"lag_p99_ms": 10.0, "lag_max_ms": 50.0}


def test_lag_buckets_are_parsed_by_upper_bound() -> None:
    buckets = parse_buckets(BEFORE)
    assert buckets is not None
    assert buckets[0.0005] == 10.0
    assert buckets[1.0] == 20.0
    assert buckets[float("inf")] == 20.0
    assert len(buckets) == 13  # the other histogram's buckets are not read


def test_a_quantile_on_a_bucket_edge_stays_in_that_bucket() -> None:
    # 100 observations, 99 at or below 1 ms: the 99th smallest is in (0.5, 1].
    buckets = {0.0005: 0.0, 0.001: 99.0, 0.005: 100.0, float("inf"): 100.0}
    assert quantile_bound(buckets, 0.99) == 0.001
    assert max_bound(buckets) == 0.005


def test_lag_past_the_last_bucket_is_reported_as_more_than_it() -> None:
    after = _lag_text([10, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 25])
    assert lag_fields(BEFORE, after) == {"lag_p99_ms": ">2500", "lag_max_ms": ">2500"}


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (BEFORE, BEFORE),  # no observation in the window
        ("# a daemon without the metric\n", "# a daemon without the metric\n"),
        (None, AFTER),  # the first scrape failed
    ],
)
def test_lag_is_empty_without_observations_or_metric(before: str | None, after: str) -> None:
    assert lag_fields(before, after) == {"lag_p99_ms": None, "lag_max_ms": None}


@pytest.mark.parametrize(
    ("spans", "calls", "sampling", "dropped"),
    [
        (1000, 1000, 1.0, False),
        (900, 1000, 1.0, False),  # 90 % of the calls' spans arrived
        (899, 1000, 1.0, True),
        # 10 % of 3000: mean 300, sd sqrt(3000 x 0.1 x 0.9) = 16.43;
        # the line is 0.9 x 300 - 3 x 16.43 = 220.7 spans (0.074 per call).
        (300, 3000, 0.1, False),
        (240, 3000, 0.1, False),  # 0.08 per call: binomial noise, not a loss
        (221, 3000, 0.1, False),
        (220, 3000, 0.1, True),
        (0, 3000, 0.1, True),
    ],
)
def test_spans_are_dropped_only_clearly_below_the_sampling_ratio(
    spans: int, calls: int, sampling: float, dropped: bool
) -> None:
    assert spans_dropped(spans, calls, sampling) is dropped


def _row(
    target: str,
    rpc: str,
    sampling: float | None,
    mode: str,
    n: int,
    status: str = "ok",
    **values: float,
) -> Row:
    return {
        "target": target,
        "rpc": rpc,
        "sampling": sampling,
        "tracing": sampling is not None,
        "mode": mode,
        "round": n,
        "status": status,
        **values,
    }


DECIDE, ANALYZE, ECHO = "DecideRetry distinct", "AnalyzeError offline", "Echo distinct"
SAME, SAME_ECHO = "DecideRetry transient", "Echo"
DISPATCH = "Dispatch run_step +upstream"
ROWS = [
    # Round 1: DecideRetry does 950 calls/s where the floor does 1000 (0.95),
    # round 2 does 720 where the floor does 800 (0.90).
    _row("echo-py", ECHO, None, "saturation", 1, calls_per_s=1000, p99_ms=10, cpu_s_per_1k=0.2),
    _row("echo-py", ECHO, None, "saturation", 2, calls_per_s=800, p99_ms=12, cpu_s_per_1k=0.25),
    _row("squawk", DECIDE, None, "saturation", 1, calls_per_s=950, p99_ms=11, cpu_s_per_1k=0.25),
    _row("squawk", DECIDE, None, "saturation", 2, calls_per_s=720, p99_ms=18, cpu_s_per_1k=0.3),
    _row("squawk", DECIDE, 1.0, "saturation", 1, calls_per_s=760, p99_ms=20, cpu_s_per_1k=0.3),
    _row("squawk", DECIDE, 1.0, "saturation", 2, "failed: loadgen exited 1"),
    _row("squawk", ANALYZE, None, "1000/s", 1, p99_ms=4.0),
    _row("squawk", ANALYZE, None, "1000/s", 2, p99_ms=5.0),
    _row("squawk", ANALYZE, 1.0, "1000/s", 1, "overloaded: answered 80% of offered", p99_ms=6),
    _row("squawk", ANALYZE, 1.0, "1000/s", 2, p99_ms=7.5),
    _row(
        "squawk", "DecideRetryBatch distinct x100", None, "saturation", 1, decisions_per_s=110_000
    ),
    _row("squawk", "DecideRetryBatch distinct x100", None, "saturation", 2, decisions_per_s=90_000),
    # The same bytes on every call: the kept answers, far faster, and no goal.
    _row("echo-py", SAME_ECHO, None, "saturation", 1, calls_per_s=1100, p99_ms=9),
    _row("echo-py", SAME_ECHO, None, "saturation", 2, calls_per_s=1000, p99_ms=10),
    _row("squawk", SAME, None, "saturation", 1, calls_per_s=1045, p99_ms=9),
    _row("squawk", SAME, None, "saturation", 2, calls_per_s=1000, p99_ms=10),
    _row("squawk", SAME, 1.0, "saturation", 1, calls_per_s=1000, cpu_s_per_1k=0.01),
    _row("squawk", "DecideRetryBatch x100", None, "saturation", 1, decisions_per_s=900_000),
    # The dispatch row: 0.5 then 0.2 ms of daemon CPU per dispatch (CPU s per
    # 1,000 dispatches), against the floor's 0.4 and 0.5 ms per call at 1000/s.
    _row("echo-py", ECHO, None, "1000/s", 1, cpu_s_per_1k=0.4),
    _row("echo-py", ECHO, None, "1000/s", 2, cpu_s_per_1k=0.5),
    _row("squawk", DISPATCH, None, "1000/s", 1, cpu_s_per_1k=0.5, rpcs_per_dispatch=2.0),
    _row("squawk", DISPATCH, None, "1000/s", 2, cpu_s_per_1k=0.2, rpcs_per_dispatch=0.5),
    # A row measured once, after the rounds, is no round's.
    {**_row("squawk", DECIDE, None, "saturation", 0, calls_per_s=1), "round": None},
]


def _goal(found: list[Goal], name: str) -> Goal:
    return next(g for g in found if g.name == name)


def test_each_round_divides_rows_of_that_round() -> None:
    found = goals(ROWS, {}, None, "1000/s")
    floor = _goal(
        found, "DecideRetry distinct calls/s, tracing off ÷ Python echo floor (saturation)"
    )
    assert floor.values == pytest.approx((0.95, 0.9))
    assert floor.value == pytest.approx(0.925)
    assert floor.met is True  # >= 0.9
    assert floor.as_json()["spread"] == pytest.approx(0.0541, abs=1e-4)  # 0.05 / 0.925
    p99 = _goal(
        found, "DecideRetry distinct p99 at saturation (tracing off) ÷ Python echo floor p99"
    )
    assert p99.values == pytest.approx((1.1, 1.5))
    assert p99.value == pytest.approx(1.3)
    assert p99.met is False  # <= 1.2
    assert p99.too_wide  # 0.4 / 1.3 = 0.31


def test_a_failed_row_leaves_its_round_out() -> None:
    found = goals(ROWS, {}, None, "1000/s")
    calls = _goal(
        found, "DecideRetry distinct calls/s, tracing on 100 % ÷ tracing off (saturation)"
    )
    assert calls.values == pytest.approx((0.8,))  # round 1: 760 / 950
    assert calls.met is True
    assert len(calls.missing) == 1 and calls.missing[0].startswith("round 2: squawk tracing 100%")


def test_an_overloaded_row_gives_its_ratio_but_fails_the_goal() -> None:
    found = goals(ROWS, {}, None, "1000/s")
    analyze = _goal(found, "AnalyzeError offline p99 at 1000/s, tracing on 100 % ÷ tracing off")
    assert analyze.values == pytest.approx((1.5, 1.5))  # 6 / 4 and 7.5 / 5: under 2
    assert analyze.met is False
    assert analyze.verdict.startswith("NOT MET (overloaded: round 1 squawk tracing 100%")
    assert "NOT MET (overloaded" in render_goals(found)


def test_the_batch_goal_is_the_median_rate() -> None:
    found = goals(ROWS, {}, None, "1000/s")
    batch = _goal(found, "DecideRetryBatch distinct decisions/s (tracing off)")
    assert batch.value == 100_000
    assert batch.met is True  # >= 100,000
    assert batch.as_json()["min"] == 90_000 and batch.as_json()["max"] == 110_000


def test_the_ten_percent_lines_and_the_core_are_informational() -> None:
    found = goals(ROWS, {"DecideRetry transient": 3.0, "Classify": 9.0}, 50.0, "1000/s")
    info = [g for g in found if g.limit is None]
    assert [g.name for g in info] == [
        "DecideRetry distinct calls/s, tracing on 10 % ÷ tracing off (saturation)",
        "DecideRetry distinct p99 at 1000/s, tracing on 10 % ÷ tracing off",
        "AnalyzeError offline p99 at 1000/s, tracing on 10 % ÷ tracing off",
        "CPU s per 1,000 DecideRetry distinct at saturation, tracing on 10 % ÷ Python echo floor",
        "RPCs per dispatch through the Python runner at 1000/s",
        "daemon CPU per dispatch ÷ Python echo floor CPU per call, at 1000/s",
        "DecideRetry transient, same bytes (best case): calls/s, tracing off ÷ Python echo "
        "floor (saturation)",
        "DecideRetry transient, same bytes (best case): p99 at saturation (tracing off) ÷ "
        "Python echo floor p99",
        "core us per decision (worst DecideRetry case)",
        "idle RSS MB",
    ]
    assert all(g.met is None for g in info)
    assert info[-2].value == 3.0 and info[-1].value == 50.0
    assert len(found) - len(info) == 8
    best = info[-4]
    assert best.values == pytest.approx((0.95, 1.0))  # 1045 / 1100 and 1000 / 1000


def test_every_judged_goal_reads_the_distinct_rows_and_never_the_same_bytes() -> None:
    """The same-bytes rows measure the daemon's kept answers (an LRU keyed by
    the request's bytes), so no goal may read them; without the distinct rows
    a goal has no data rather than falling back to the best case."""
    found = goals(ROWS, {}, None, "1000/s")
    judged = [g for g in found if g.limit is not None]
    decide = [g for g in judged if "DecideRetry" in g.name]
    assert len(judged) == 8 and len(decide) == 6
    assert all(
        "DecideRetry distinct" in g.name or "DecideRetryBatch distinct" in g.name for g in decide
    )
    cpu = _goal(
        found,
        "CPU s per 1,000 DecideRetry distinct at saturation, tracing on 100 % ÷ Python echo floor",
    )
    assert cpu.values == pytest.approx((1.5,))  # 0.3 / 0.2, not the same bytes' 0.01 / 0.2
    batch = _goal(found, "DecideRetryBatch distinct decisions/s (tracing off)")
    assert 900_000 not in batch.values
    same_bytes_only = [r for r in ROWS if "distinct" not in r["rpc"]]
    without = goals(same_bytes_only, {}, None, "1000/s")
    assert all(_goal(without, g.name).value is None for g in decide)


def test_the_dispatch_goal_is_the_median_daemon_cpu_per_dispatch() -> None:
    found = goals(ROWS, {}, None, "1000/s")
    cpu = _goal(found, "daemon CPU ms per dispatch through the Python runner at 1000/s")
    assert cpu.values == pytest.approx((0.5, 0.2))
    assert cpu.value == pytest.approx(0.35)
    assert cpu.met is False  # <= 0.25
    rpcs = _goal(found, "RPCs per dispatch through the Python runner at 1000/s")
    assert rpcs.values == pytest.approx((2.0, 0.5)) and rpcs.met is None
    floor = _goal(found, "daemon CPU per dispatch ÷ Python echo floor CPU per call, at 1000/s")
    assert floor.values == pytest.approx((1.25, 0.4))  # 0.5 / 0.4 and 0.2 / 0.5
    # Met once every round is under the limit.
    faster = [r | {"cpu_s_per_1k": 0.2} if r["rpc"] == DISPATCH else r for r in ROWS]
    cpu = _goal(goals(faster, {}, None, "1000/s"), cpu.name)
    assert cpu.value == pytest.approx(0.2) and cpu.met is True
