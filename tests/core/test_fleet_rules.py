"""The fleet's rules in the core (squawk.policy.fleet), on readings worked
by hand: what a pod does with the fleet's sums. The store that carries
them to and from Redis is tested in tests/daemon/upstream/test_fleet.py
and the modules beside it."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from squawk.policy import Admission, BreakerConfig, BreakerState, Outcome, Reason, UpstreamConfig
from squawk.policy.fleet import (
    NO_DELTA,
    Delta,
    FleetView,
    Move,
    Reading,
    Restore,
    admitted,
    asked,
    cautious,
    kept,
    lost,
    merged,
    move,
    outcome,
    refusal,
    retried,
    retry_answer,
    sent,
    take_probe,
    token_change,
    viewed,
    wanted_probes,
)
from squawk.policy.retry_budget import RatioBudgetConfig, TokenBucketConfig

CB = BreakerConfig(
    minimum_calls=4,
    failure_ratio=0.5,
    window=timedelta(seconds=10),
    buckets=10,
    open_for=timedelta(seconds=2),
    half_open_probes=2,
    close_ratio=0.5,
)
RATIO = RatioBudgetConfig(ratio=0.1, min_per_second=1, ttl=timedelta(seconds=10))
CONFIG = UpstreamConfig(circuit_breaker=CB, retry_budget=RATIO, max_cool_down=timedelta(seconds=60))
CLOSED = Reading(BreakerState.CLOSED, 3, 0.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0.0, 0, False)
NOW = 1000.0
INTERVAL = 0.1


def view_of(reading: Reading, config: UpstreamConfig = CONFIG) -> FleetView:
    return viewed(reading, config, NOW, None, 1.0, INTERVAL)


# -- the quorum and the half-open round: the breaker's own rules -----------


@pytest.mark.parametrize(
    ("calls", "failures", "pods", "min_pods", "expected"),
    [
        (4, 2, 2, 2, Move(BreakerState.OPEN, 3)),  # 4 calls, half failed, two pods
        (4, 2, 1, 2, None),  # one pod is no quorum
        (4, 1, 2, 2, None),  # below the ratio
        (3, 3, 3, 2, None),  # below minimum_calls
        (4, 2, 1, 1, Move(BreakerState.OPEN, 3)),  # min_pods 1: one pod may open it
    ],
)
def test_a_closed_fleet_opens_on_the_breakers_rule_and_the_quorum(
    calls: int, failures: int, pods: int, min_pods: int, expected: Move | None
) -> None:
    reading = CLOSED._replace(calls=calls, failures=failures, pods=pods)
    assert move(reading, CONFIG, min_pods) == expected


@pytest.mark.parametrize(
    ("successes", "failures", "expected"),
    [
        (1, 0, None),  # one of two probes in: the round goes on
        (1, 1, BreakerState.CLOSED),  # 1 / 2 >= close_ratio 0.5
        (0, 2, BreakerState.OPEN),
        (2, 0, BreakerState.CLOSED),
    ],
)
def test_a_half_open_round_is_judged_when_its_probes_are_in(
    successes: int, failures: int, expected: BreakerState | None
) -> None:
    reading = CLOSED._replace(
        state=BreakerState.HALF_OPEN, successes=successes, probe_failures=failures
    )
    made = move(reading, CONFIG, 2)
    assert (made and made.to) == expected


def test_a_disabled_breaker_never_moves_the_fleet() -> None:
    config = UpstreamConfig(circuit_breaker=BreakerConfig(enabled=False))
    assert move(CLOSED._replace(calls=100, failures=100, pods=5), config, 1) is None


# -- what a view refuses ------------------------------------------------------


def test_no_view_refuses_nothing() -> None:
    assert refusal(None, CONFIG, NOW, None, None) is None


def test_an_open_fleet_refuses_until_it_half_opens() -> None:
    view = view_of(CLOSED._replace(state=BreakerState.OPEN, left=1.5))
    refused = refusal(view, CONFIG, NOW + 0.5, None, None)
    assert refused is not None
    assert (refused.reason, refused.retry_after) == (Reason.CIRCUIT_OPEN, timedelta(seconds=1))


def test_a_reading_is_held_to_what_the_rules_allow() -> None:
    # A store that says OPEN for a day, cooling for a week, 50 slots leased.
    view = view_of(
        CLOSED._replace(state=BreakerState.OPEN, left=86_400.0, cooling=7 * 86_400.0, granted=50)
    )
    assert view.until == NOW + 2.0  # open_for
    assert view.cool_until == NOW + 60.0  # max_cool_down
    assert view.probes == 2  # half_open_probes


def test_a_shared_cool_down_refuses_first() -> None:
    view = view_of(CLOSED._replace(cooling=3.0))
    refused = refusal(view, CONFIG, NOW + 1.0, None, None)
    assert refused is not None
    assert (refused.reason, refused.retry_after) == (
        Reason.UPSTREAM_COOLING_DOWN,
        timedelta(seconds=2),
    )
    # A reload that lowers max_cool_down holds it at once.
    lowered = UpstreamConfig(circuit_breaker=CB, max_cool_down=timedelta(seconds=1))
    held = refusal(view, lowered, NOW + 1.0, None, None)
    assert held is not None and held.retry_after == timedelta(seconds=1)


def test_a_half_open_fleet_admits_only_with_a_leased_slot_and_each_slot_once() -> None:
    half = CLOSED._replace(state=BreakerState.HALF_OPEN, left=2.0, taken=1, granted=1)
    view = view_of(half)
    assert refusal(view, CONFIG, NOW, None, None) is None
    view, probe = take_probe(view, NOW)
    assert probe and view.probes == 0
    refused = refusal(view, CONFIG, NOW, None, None)
    assert refused is not None and refused.reason is Reason.CIRCUIT_OPEN
    # A slot is left in the round (1 of 2 taken): the wait is for the next
    # sync, at least one interval even for a view no sync renews.
    assert refused.retry_after == timedelta(milliseconds=100)
    late = refusal(view, CONFIG, NOW + 5.0, None, None)
    assert late is not None and late.retry_after == timedelta(milliseconds=100)


def test_an_open_view_past_its_time_reads_as_half_open_without_a_slot() -> None:
    view = view_of(CLOSED._replace(state=BreakerState.OPEN, left=1.0))
    refused = refusal(view, CONFIG, NOW + 1.5, None, None)
    assert refused is not None
    assert (refused.reason, refused.breaker_state) == (
        Reason.CIRCUIT_OPEN,
        BreakerState.HALF_OPEN,
    )


def test_a_pod_whose_breaker_is_off_reads_only_the_cool_down() -> None:
    off = UpstreamConfig(circuit_breaker=BreakerConfig(enabled=False))
    view = view_of(CLOSED._replace(state=BreakerState.OPEN, left=1.0), off)
    assert refusal(view, off, NOW, None, None) is None


@pytest.mark.parametrize(
    ("reading", "asked_", "expected"),
    [
        (CLOSED, 5, 0),  # a closed fleet has no round
        (CLOSED._replace(state=BreakerState.HALF_OPEN, left=2.0), 5, 2),  # at most the probes
        (CLOSED._replace(state=BreakerState.HALF_OPEN, left=2.0), 1, 1),
        (CLOSED._replace(state=BreakerState.HALF_OPEN, left=2.0), 0, 0),  # nobody waits
        (CLOSED._replace(state=BreakerState.HALF_OPEN, left=2.0, cooling=1.0), 5, 0),  # cooling
        (CLOSED._replace(state=BreakerState.OPEN, left=0.05), 3, 2),  # about to half-open
    ],
)
def test_probe_slots_are_asked_for_the_calls_waiting(
    reading: Reading, asked_: int, expected: int
) -> None:
    assert wanted_probes(view_of(reading), CONFIG, NOW + 0.1, asked_) == expected


# -- the fleet's budget ---------------------------------------------------------


def test_the_ratio_budget_counts_every_pods_calls_and_retries_and_this_pods_since() -> None:
    # min_per_second 1 x ttl 10 s = 10 retries with no calls, plus 0.1 per call.
    view = view_of(CLOSED._replace(deposits=20, retries=11))
    # 11 retries + 1 <= 0.1 x 20 + 10 = 12: granted.
    answer = retry_answer(view, CONFIG, NOW, NO_DELTA)
    assert answer is not None and answer.budget_spent is None
    # One more retry this pod granted since its sync: 13 > 12.
    pending = retried(NO_DELTA, CONFIG, NOW)
    spent = retry_answer(view, CONFIG, NOW, pending)
    assert spent is not None and spent.budget_spent is not None
    assert "12 retries across the pods against 20 calls" in spent.budget_spent
    # Ten more calls admitted here make room again: 12 + 1 <= 0.1 x 30 + 10.
    for _ in range(10):
        pending = admitted(pending, CONFIG, NOW)
    again = retry_answer(view, CONFIG, NOW, pending)
    assert again is not None and again.budget_spent is None


def test_the_token_bucket_counts_every_pods_tokens() -> None:
    # 10 tokens; a retry needs more than 5 left.
    bucket = UpstreamConfig(retry_budget=TokenBucketConfig(max_tokens=10, token_ratio=0.5))
    view = view_of(CLOSED._replace(spent=4000), bucket)  # 6 left
    failed = outcome(NO_DELTA, bucket, NOW, Outcome(success=False, http_status=503))
    assert token_change(failed, bucket) == (1000, 0)
    answer = retry_answer(view, bucket, NOW, failed)  # 5 left: not above half
    assert answer is not None and answer.budget_spent is not None
    assert answer.budget_spent.startswith("retry tokens are at 5 of 10")
    answer = retry_answer(view, bucket, NOW, NO_DELTA)
    assert answer is not None and answer.budget_spent is None


def test_an_open_fleet_fails_a_retry_with_the_time_until_it_half_opens() -> None:
    view = view_of(CLOSED._replace(state=BreakerState.OPEN, left=1.25))
    answer = retry_answer(view, CONFIG, NOW, NO_DELTA)
    assert answer is not None and answer.open_left == timedelta(milliseconds=1250)


# -- what a delta carries -------------------------------------------------------


def test_a_delta_counts_what_the_pods_own_state_counts() -> None:
    delta = NO_DELTA
    for status in (503, 503, 200, 404):  # 404 is not retried: not counted
        delta = outcome(delta, CONFIG, NOW, Outcome(success=status < 400, http_status=status))
    throttled = Outcome(success=False, http_status=429, retry_after=timedelta(seconds=3))
    delta = outcome(delta, CONFIG, NOW, throttled)
    assert sent(delta, CONFIG, NOW)[:2] == (3, 2)  # a throttle is not the breaker's
    assert delta.cool_until == NOW + 3.0
    # Outside the window at NOW + 10 s: a sync after a long outage sends none.
    assert sent(delta, CONFIG, NOW + 10.0)[:2] == (0, 0)


def test_only_the_admitted_count_as_demand() -> None:
    delta = NO_DELTA
    answers = [
        Admission(True, None, None, BreakerState.CLOSED, False),
        Admission(False, Reason.UPSTREAM_SATURATED, timedelta(1), BreakerState.CLOSED, False),
        Admission(False, Reason.CIRCUIT_OPEN, timedelta(1), BreakerState.OPEN, False),
        Admission(False, Reason.UPSTREAM_COOLING_DOWN, timedelta(1), BreakerState.CLOSED, False),
        Admission(False, Reason.IN_FLIGHT_CAP, timedelta(1), BreakerState.CLOSED, False),
    ]
    for answer in answers:
        delta = asked(delta, answer)
    # The refused ask for probe slots (they come back); only the admitted
    # call is demand: a pace refusal starts nothing, and a caller spinning
    # on it must not win the rate. The pace's refusal is noted (`shed`). A
    # full cap's refusal (a caller waiting for a slot asks again and again)
    # is none of these.
    assert (delta.asked, delta.wanted, delta.shed) == (3, 1, 1)


def test_a_sync_without_an_answer_sends_again_only_what_errs_cautious() -> None:
    delta = NO_DELTA
    for status in (503, 200, 200):
        delta = outcome(delta, CONFIG, NOW, Outcome(success=status < 400, http_status=status))
    delta = admitted(retried(delta, CONFIG, NOW), CONFIG, NOW)
    delta = delta._replace(asked=5, wanted=5, cool_until=NOW + 2)
    again = cautious(delta)
    # The failure as a failed call, the retry, the cool-down; no success,
    # no deposit, no demand.
    assert sent(again, CONFIG, NOW) == (1, 1, 0, 1)
    assert (again.asked, again.wanted, again.cool_until) == (0, 0, NOW + 2)
    # Joined with what came since, nothing is lost of either.
    later = outcome(NO_DELTA, CONFIG, NOW + 0.1, Outcome(success=False, http_status=503))
    both = merged(again, later)
    assert sent(both, CONFIG, NOW + 0.1) == (2, 2, 0, 1)
    assert both.cool_until == NOW + 2
    assert math.isinf(Delta().cool_until)


# -- caution the store lost (a FLUSHALL, a Redis restarted empty) ----------

BORN = CLOSED._replace(born=7)
OPEN_VIEW = view_of(BORN._replace(state=BreakerState.OPEN, left=1.5, epoch=4))
COOL_VIEW = view_of(BORN._replace(cooling=30.0))
REMADE = CLOSED._replace(born=8, epoch=0)


@pytest.mark.parametrize(
    ("previous", "reading", "at", "expected"),
    [
        (OPEN_VIEW, REMADE, NOW + 0.5, Restore(0, 1.0, 0.0)),  # OPEN, 1 s left: written back
        (COOL_VIEW, REMADE, NOW + 10, Restore(0, 0.0, 20.0)),  # a cool-down, 20 s left
        (OPEN_VIEW, BORN, NOW + 0.5, None),  # the same state: nothing lost
        (OPEN_VIEW, REMADE, NOW + 2.0, None),  # its time is up: nothing to keep
        (COOL_VIEW, REMADE._replace(cooling=25.0), NOW + 10, None),  # the store cools longer
        (OPEN_VIEW, REMADE._replace(state=BreakerState.OPEN), NOW, None),  # written back already
        (view_of(CLOSED), REMADE, NOW, None),  # a view of unknown birth
        (view_of(BORN), REMADE, NOW, None),  # a plain CLOSED view holds nothing
        (None, REMADE, NOW, None),
    ],
)
def test_caution_the_store_lost_is_written_back_for_the_time_left(
    previous: FleetView | None, reading: Reading, at: float, expected: Restore | None
) -> None:
    assert lost(reading, previous, at) == expected


def test_a_view_that_lost_its_caution_keeps_refusing() -> None:
    at = NOW + 0.5
    # The store's state made anew: CLOSED, no cool-down. The pod keeps both.
    both = view_of(BORN._replace(state=BreakerState.OPEN, left=1.5, cooling=30.0))
    restore = lost(REMADE, both, at)
    assert restore == Restore(0, 1.0, 29.5)
    view = kept(viewed(REMADE, CONFIG, at, both, 1.0, INTERVAL), restore, at)
    assert (view.reading.state, view.until, view.cool_until) == (
        BreakerState.OPEN,
        NOW + 1.5,
        NOW + 30,
    )
    refused = refusal(view, CONFIG, at, None, None)
    assert refused is not None and refused.reason is Reason.UPSTREAM_COOLING_DOWN
    # A cool-down alone leaves the breaker as the store says.
    only_cool = kept(viewed(REMADE, CONFIG, at, both, 1.0, INTERVAL), Restore(0, 0.0, 5.0), at)
    assert (only_cool.reading.state, only_cool.cool_until) == (BreakerState.CLOSED, at + 5.0)
