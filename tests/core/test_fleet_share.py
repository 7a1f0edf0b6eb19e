"""The fleet's pace share (squawk.policy.fleet): each pod's part of an
upstream's rate, the demand it reports for it, the lease and the fallback,
and which of the pacer's rates the share divides. Tables over a fake clock;
the three-daemon test (tests/daemon/upstream/test_fleet_pace.py) checks the
same rules over a real Redis."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from squawk.policy import BreakerState, Pacer, PaceSource, RateLimitConfig, UpstreamConfig
from squawk.policy import fleet as f
from squawk.policy.clocker import Clock
from squawk.policy.cubic import Learned
from squawk.policy.header_quota import HeaderQuota
from squawk.policy.pacer import pace
from squawk.policy.timing import seconds

CONFIG = UpstreamConfig()
LEASE, INTERVAL = 1.0, 0.1


def reading(demand: float = 0.0, wanting: int = 0, own: float = 0.0) -> f.Reading:
    """A CLOSED fleet's reading whose pace sums are these."""
    return f.Reading(
        BreakerState.CLOSED,
        0,
        0.0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0.0,
        demand,
        wanting,
        False,
        own,
    )


@pytest.mark.parametrize(
    ("demand", "wanting", "own", "share"),
    [
        (0.0, 0, 0.0, 1.0),  # nobody asked in the last slot: the whole rate
        (40.0, 1, 40.0, 1.0),  # this pod alone
        (40.0, 1, 0.0, 0.5),  # a newcomer beside one pod: an equal part
        (90.0, 3, 0.0, 0.25),  # ... beside three
        (105.0, 3, 60.0, 60 / 105),  # in proportion to demand
        (105.0, 3, 15.0, 15 / 105),
        # A part too small to pace by: an eighth of an equal part of two.
        (1e9, 2, 1e-6, f.MIN_EQUAL_PART / 2),
        # A demand field planted in the store: the same floor, of three.
        (1e12 + 20.0, 3, 10.0, f.MIN_EQUAL_PART / 3),
        (10.0, 2, 10.5, 1.0),  # a store's rounding never gives more than the rate
    ],
    ids=[
        "none",
        "alone",
        "newcomer beside one",
        "newcomer beside three",
        "large part",
        "small part",
        "floor",
        "planted",
        "capped",
    ],
)
def test_a_pods_share_of_the_rate(demand: float, wanting: int, own: float, share: float) -> None:
    assert f.share(reading(demand, wanting, own)) == pytest.approx(share)


@given(st.lists(st.floats(min_value=0.01, max_value=1e6), min_size=1, max_size=50))
def test_the_shares_read_from_one_slot_add_up_to_the_whole_rate(demands: list[float]) -> None:
    # The whole rate, and over it by at most the floor: an eighth of an
    # equal part for every pod below it, an eighth of the rate at most.
    total = math.fsum(demands)
    shares = [f.share(reading(total, len(demands), d)) for d in demands]
    assert 1.0 - 1e-9 <= math.fsum(shares) <= 1.0 + f.MIN_EQUAL_PART + 1e-9


@pytest.mark.parametrize(
    ("previous", "asked", "elapsed", "demand"),
    [
        (0.0, 10, 0.1, 100.0),  # a first reading is taken whole
        (0.0, 10, 0.01, 100.0),  # over at least one interval
        (100.0, 20, 0.1, 150.0),  # a running mean over DEMAND_SYNCS intervals
        (100.0, 0, 0.1, 50.0),  # a pod that stops asking fades, not vanishes
        (100.0, 10, 1.0, 10.0),  # a long gap: the new rate alone
        (0.015, 0, 0.1, 0.0),  # below MIN_DEMAND: none
    ],
    ids=["first", "short", "mean", "fading", "gap", "none"],
)
def test_the_demand_a_sync_reports(
    previous: float, asked: int, elapsed: float, demand: float
) -> None:
    assert f.demand(previous, asked, elapsed, INTERVAL) == pytest.approx(demand)


def test_a_pod_its_pace_refused_claims_an_equal_part_of_what_the_fleet_starts() -> None:
    # The last reading: 60 calls/s summed over 2 pods. A pod that started
    # 20/s and was refused by its pace claims 30/s; one that started 40/s,
    # or was not refused, reports what it started.
    view = f.viewed(reading(60.0, 2, 20.0), CONFIG, 0.0, None, LEASE, INTERVAL)
    refused, calm = f.Delta(wanted=2, shed=500), f.Delta(wanted=2)
    assert f.equal_part(view, refused) == pytest.approx(30.0)
    assert f.equal_part(view, calm) == 0.0
    assert f.equal_part(None, refused) == 0.0
    assert f.demand(20.0, 2, 0.1, INTERVAL, f.equal_part(view, refused)) == pytest.approx(30.0)
    assert f.demand(40.0, 4, 0.1, INTERVAL, f.equal_part(view, refused)) == pytest.approx(40.0)
    assert f.demand(20.0, 2, 0.1, INTERVAL, f.equal_part(view, calm)) == pytest.approx(20.0)


def test_pods_that_all_want_more_than_their_share_meet_at_equal_parts() -> None:
    # Two pods that ask alike, past the rate, each starting its share's
    # worth of 60 calls/s, one slot after another: from 60 % and 40 %, by
    # their starts alone they would stay there; each claiming an equal
    # part when refused, they meet at a half each.
    rate, shares = 60.0, [0.6, 0.4]
    for _ in range(30):
        total = rate  # both saturated: what they start is the whole rate
        demands = [
            f.demand(0.0, round(s * rate * INTERVAL), INTERVAL, INTERVAL, total / 2) for s in shares
        ]
        shares = [f.share(reading(sum(demands), 2, d)) for d in demands]
    assert shares == pytest.approx([0.5, 0.5], abs=0.02)


def test_a_reading_leases_its_share_until_the_lease_ends() -> None:
    view = f.viewed(reading(90.0, 3, 30.0), CONFIG, 5.0, None, LEASE, INTERVAL)
    assert view.share == pytest.approx(1 / 3)
    assert view.share_until == 5.0 + LEASE


@pytest.mark.parametrize(
    ("now", "fallback", "share"),
    [
        (5.9, None, 0.25),  # the lease holds
        (5.9, 0.5, 0.25),
        (6.0, 0.5, 0.5),  # run out without a new reading: the fallback
        (6.0, None, 1.0),  # ... or, none set, the pod's own pacer
    ],
    ids=["leased", "leased, a fallback set", "fallback", "no fallback"],
)
def test_the_share_in_force(now: float, fallback: float | None, share: float) -> None:
    view = f.viewed(reading(40.0, 2, 10.0), CONFIG, 5.0, None, LEASE, INTERVAL)
    assert f.pace_share(view, now, fallback) == share


@pytest.mark.parametrize(("fallback", "share"), [(None, 1.0), (0.2, 0.2)])
def test_without_any_reading_the_fallback_paces(fallback: float | None, share: float) -> None:
    # Once an outage dropped the view (the store asks for the fallback then).
    assert f.pace_share(None, 5.0, fallback) == share


def second_wait(pacer: Pacer, config: RateLimitConfig, share: float) -> float:
    """The wait of the second of two calls asked at once: the pace's slot."""
    pacer, _ = pace(pacer, config, 100.0, share=share)
    _, second = pace(pacer, config, 100.0, share=share)
    assert second.allowed
    return seconds(second.wait)


HEADERS = Pacer(quota=HeaderQuota(rate=20.0, until=200.0))
LEARNED = Pacer(
    learned=Learned(w_max=20.0, cut_at=99.0, throttled_at=99.5, successes=Clock(rate=20.0))
)


@pytest.mark.parametrize(
    ("pacer", "config", "rate"),
    [
        (Pacer(), RateLimitConfig(rate=20.0), 20.0),
        (HEADERS, RateLimitConfig(), 20.0),
    ],
    ids=[PaceSource.POLICY.name, PaceSource.HEADERS.name],
)
def test_a_declared_or_announced_rate_is_divided(
    pacer: Pacer, config: RateLimitConfig, rate: float
) -> None:
    assert second_wait(pacer, config, 1.0) == pytest.approx(1 / rate)
    assert second_wait(pacer, config, 0.25) == pytest.approx(1 / (0.25 * rate))


def test_a_learned_rate_is_the_pods_own() -> None:
    config = RateLimitConfig()
    assert second_wait(LEARNED, config, 0.25) == second_wait(LEARNED, config, 1.0) > 0


@pytest.mark.parametrize(
    ("divided", "own", "at", "shown"),
    [
        (False, 60.0, 0.5, 1.0),  # a pace the fleet does not divide: the whole of it
        (True, 60.0, 0.5, 60 / 105),  # its part of the demand
        (True, 0.0, 0.5, 0.0),  # it asked for none in the slot: no part of it
        (True, 60.0, LEASE, 0.75),  # past the lease: what it paces by (here a fallback)
    ],
)
def test_the_share_shown_is_the_pods_part_of_the_demand(
    divided: bool, own: float, at: float, shown: float
) -> None:
    # So that the shares of the pods that asked add up to 1 in every pod's
    # listing, and RATE x SHARE is each pod's own pace.
    leased = f.viewed(reading(105.0, 3, own), CONFIG, 0.0, None, LEASE, INTERVAL)
    assert f.shown_share(leased, at, 0.75, divided) == pytest.approx(shown)
    assert f.shown_share(None, at, 0.75, divided) == (0.75 if divided else 1.0)
