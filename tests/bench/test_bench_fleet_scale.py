"""The scale simulation's arithmetic, from hand-worked numbers; the
simulation itself runs only in `make fleet-sim-scale`."""

from __future__ import annotations

import math
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

# bench/ is a folder at the repository's root, not an installed package,
# and pytest puts only tests/ on the import path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.fleet_scale import policy_yaml
from bench.fleet_scale_pods import OUTAGE_S, Fleet
from bench.fleet_scale_table import largest_fleet, per_call_cores
from bench.fleet_scale_tally import (
    Made,
    Sample,
    Truth,
    held,
    pace_limit,
    percentile,
    server_work,
    whole,
)
from squawk.daemon.config import parse_config
from squawk.policy.breaker import BreakerConfig

# 10 s in 10 buckets of 1 s; open at >= 100 calls with >= half failed.
BREAKER = BreakerConfig(minimum_calls=100, window=timedelta(seconds=10), buckets=10)


def test_a_fraction_of_a_call_waits_for_the_next_delta() -> None:
    # 2.5 calls per interval: 2, then 3 (5 in all), never a half call.
    assert whole(2.5, 0) == 2
    assert whole(5.0, 2) == 3
    # A total that float arithmetic left a hair under a whole call counts it.
    assert whole(sum([0.1] * 10), 0) == 1


def test_the_truth_drops_a_bucket_when_the_window_passes_it() -> None:
    truth = Truth(BREAKER)
    truth.add(500, 100, 0)  # bucket 0
    truth.add(9_500, 100, 100)  # bucket 9
    assert truth.sums(9_999) == (200, 100)
    # At 10 s the window is buckets 1..10: bucket 0's successes are gone.
    assert truth.sums(10_000) == (100, 100)


@pytest.mark.parametrize(
    ("at_ms", "failing_pods", "trips"),
    [(9_999, 2, True), (9_999, 1, False), (8_999, 2, False)],
)
def test_the_truth_trips_on_the_breakers_rule_and_the_quorum(
    at_ms: int, failing_pods: int, trips: bool
) -> None:
    truth = Truth(BREAKER)
    truth.add(500, 100, 0)
    truth.add(9_500, 100, 100)
    # 100 of 200 failed at 9.999 s; at 8.999 s the failures are not made yet.
    assert truth.trips(at_ms, failing_pods, min_pods=2) is trips


# 10 calls/s for 2 s, 30 calls/s for 1 s, then 10 calls/s for 1 s.
MADE = Made([(0.0, 0.0), (1.0, 10.0), (2.0, 10.0), (3.0, 30.0), (4.0, 10.0)])


def test_calls_made_spread_over_their_points_span() -> None:
    assert MADE.by(2.5) == pytest.approx(35.0)
    assert MADE.between(0.5, 3.5) == pytest.approx(5 + 10 + 30 + 5)
    assert MADE.by(-1.0) == 0.0
    assert MADE.by(9.0) == 60.0


@pytest.mark.parametrize(
    ("span", "since", "most"),
    [
        (1.0, -math.inf, 30.0),  # [2, 3]
        (0.5, -math.inf, 15.0),  # inside [2, 3]
        (1.5, -math.inf, 35.0),  # [1.5, 3]: 5 + 30, or [2, 3.5]: 30 + 5
        (1.0, 3.0, 10.0),  # only [3, 4] starts at 3 or later
        (1.0, 2.5, 20.0),  # [2.5, 3.5]: 15 + 5
    ],
)
def test_the_most_made_in_any_span(span: float, since: float, most: float) -> None:
    assert MADE.most(span, since)[1] == pytest.approx(most)


def test_the_pace_limit_is_five_percent_over_plus_one_interval() -> None:
    # 1,000 calls/s over 1 s with a 100 ms sync: 1,050 + 100.
    assert pace_limit(1000.0, 1.0, 0.1) == pytest.approx(1150.0)


def test_percentile_is_the_nearest_rank() -> None:
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 99) == 5.0
    assert math.isnan(percentile([], 50))


def test_server_work_is_per_second_and_per_script() -> None:
    a = Sample(wall_s=0.0, server_cpu_s=1.0, own_cpu_s=2.0, scripts=100, script_us=5_000,
               commands=1_000)  # fmt: skip
    b = Sample(wall_s=2.0, server_cpu_s=1.5, own_cpu_s=2.5, scripts=1_100, script_us=55_000,
               commands=31_000)  # fmt: skip
    work = server_work(a, b)
    # 1,000 scripts and 30,000 commands in 2 s, with 0.5 s of the server's CPU.
    assert work.scripts_per_s == 500
    assert work.commands_per_s == 15_000
    assert work.server_cores == 0.25
    assert work.own_cores == 0.25
    assert work.server_us_per_script == pytest.approx(500.0)
    assert work.script_us == pytest.approx(50.0)


def test_the_per_call_extrapolation() -> None:
    # A million calls/s at 30 µs of the server's CPU each: 30 cores; one
    # core's 33,333 scripts/s are 33 pods at 1,000 calls/s.
    assert per_call_cores(1e6, 30.0) == pytest.approx(30.0)
    assert largest_fleet(30.0) == pytest.approx(33.33, abs=0.01)


def fleet(demands: list[float]) -> Fleet:
    # A URL nothing listens on: the stores never connect here.
    config = parse_config(policy_yaml("redis://127.0.0.1:9/0", "t:", 100), "<test policy>")
    return Fleet(config, demands, rate=100.0)


def test_a_pods_delta_holds_its_executors_counts_since_its_last_sync() -> None:
    f = fleet([25.0])
    pod = f.pods[0]
    f.begin(0.0)
    # 25 calls/s for 0.1 s: 2.5, so 2 now and 3 the next time.
    first = f.delta(pod, 0.1)
    second = f.delta(pod, 0.2)
    assert first is not None and second is not None
    assert (first.wanted, first.breaker.first, first.breaker.second) == (2, 2, 0)
    assert (second.wanted, second.breaker.first, second.budget.first) == (3, 3, 3)


def test_only_the_calls_after_the_outage_began_fail() -> None:
    f = fleet([100.0])
    pod = f.pods[0]
    f.begin(0.0)
    f.delta(pod, OUTAGE_S - 0.05)
    # 10 calls in the 0.1 s around the outage's start; the 5 after it failed.
    delta = f.delta(pod, OUTAGE_S + 0.05)
    assert delta is not None
    assert (delta.breaker.first, delta.breaker.second) == (10, 5)


def test_a_pod_that_asks_nothing_sends_no_delta() -> None:
    f = fleet([0.0])
    f.begin(0.0)
    assert f.delta(f.pods[0], 0.1) is None


def test_the_fleets_calls_as_made_fail_from_the_outage_on() -> None:
    f = fleet([100.0, 100.0])
    f.begin(0.0)
    for t in (OUTAGE_S - 0.05, OUTAGE_S + 0.05, OUTAGE_S + 0.15):
        f.advance(t)
    # 200 calls/s: 20 per 0.1 s, of which 10 and then 20 failed. The calls
    # made before count in the bucket their span ended in, in the window.
    before = round(200 * (OUTAGE_S - 0.05))
    assert [round(made) for _, made in f.series] == [0, before, 20, 20]
    assert f.truth.sums((OUTAGE_S + 0.15) * 1000) == (before + 40, 30)


def test_the_most_may_be_a_span_that_ends_at_a_point() -> None:
    # 10 calls/s, then 30: the most in 1.5 s is the span ending at 2 s.
    made = Made([(0.0, 0.0), (1.0, 10.0), (2.0, 30.0)])
    end, most = made.most(1.5)
    assert end == 2.0
    assert most == pytest.approx(35.0)


@pytest.mark.parametrize(
    ("syncs_per_s", "reported", "late_p99_ms", "held_"),
    [
        (9_800.0, 0.97, 99.9, True),
        (9_799.0, 0.97, 0.0, False),
        (10_000.0, 0.969, 0.0, False),
        (10_000.0, 1.0, 100.0, False),
    ],
)
def test_a_run_held_its_schedule_with_its_syncs_its_demand_sums_and_its_ticks(
    syncs_per_s: float, reported: float, late_p99_ms: float, held_: bool
) -> None:
    # 1,000 pods every 100 ms: 10,000 syncs/s due, 98 % of them at least,
    # sums holding 97 % of the pods' demand, ticks less than 100 ms late.
    assert held(syncs_per_s, 1000, 0.1, reported, late_p99_ms) is held_


def reply(state: int, demand: int, wanting: int, own: int) -> list[int]:
    """A sync's reply as fleet.lua writes it (see fleet_wire.reading): the
    state, its epoch and time left, zeros up to the slot's demand and the
    pods that reported it, `differ`, this pod's part of the demand
    (demands in thousandths of calls/s), and when the state was made (the
    same state throughout)."""
    left = 60_000 if state == 2 else 0
    return [state, 0, left, *[0] * 12, demand, wanting, 0, own, 1]


def test_a_pod_starts_what_its_share_of_the_rate_allows() -> None:
    # R = 100 calls/s; the pod asks 150/s.
    f = fleet([150.0])
    pod, now = f.pods[0], time.monotonic()
    f.begin(now)
    # No view yet: the pod's pacer has the whole rate.
    assert pod.started == 150.0
    f.pace(pod, now)
    assert pod.started == 100.0
    delta = f.delta(pod, now + 0.1)
    assert delta is not None
    pod.store.link.add(f.profile, "llm-api", delta)
    calls = pod.store.link.sync_calls(pod.store.link.due(now + 0.1), now + 0.1)
    # The fleet asked four times this pod's part: its share is a quarter.
    pod.store.link.sync_replies(calls, [reply(1, 400_000, 4, 100_000)], now + 0.1)
    f.pace(pod, time.monotonic())
    assert pod.started == pytest.approx(25.0)
    # The fleet's breaker OPEN: nothing starts.
    calls = pod.store.link.sync_calls(pod.store.link.due(now + 0.2), now + 0.2)
    pod.store.link.sync_replies(calls, [reply(2, 400_000, 4, 100_000)], now + 0.2)
    f.pace(pod, time.monotonic())
    assert pod.started == 0.0
    # Its Admits since the first delta (0.2 s at 150/s) are refused now:
    # asked, and no demand for the pace.
    refused = f.delta(pod, now + 0.3)
    assert refused is not None
    assert (refused.asked, refused.wanted) == (30, 0)
