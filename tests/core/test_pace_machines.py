"""The pacer's machines alone, as tables over a fake clock.

tests/core/test_pacer.py checks the rules through pace() and observe();
these check each machine's own transitions (squawk.policy.clocker,
short_queue, aimd, header_quota), so a machine can change without
reading the composer. Every number follows from the rule beside it.
"""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from squawk.policy import aimd, clocker, header_quota, short_queue
from squawk.policy.aimd import Limit
from squawk.policy.clocker import Clock
from squawk.policy.header_quota import HeaderQuota
from squawk.policy.ratelimit import Quota, RateLimitHint
from squawk.policy.short_queue import Queue


@pytest.mark.parametrize(
    ("clock", "bucket", "add", "after"),
    [
        # The first event starts its bucket.
        (Clock(), 1.0, 1, Clock(1.0, 1, 0.0)),
        # The same bucket counts on; an event adding 0 changes nothing.
        (Clock(1.0, 1, 0.0), 1.0, 1, Clock(1.0, 2, 0.0)),
        (Clock(1.0, 1, 0.0), 1.0, 0, Clock(1.0, 1, 0.0)),
        # A new bucket folds the old one's count (this event in it) as a
        # rate over one bucket: 3 / 0.5 = 6/s, smoothed 0.8 x 6 + 0.2 x 10.
        (Clock(1.0, 2, 10.0), 1.5, 1, Clock(1.5, 0, 6.8)),
        # Buckets with no event between are no reading: the same 6.8.
        (Clock(1.0, 2, 10.0), 9.0, 1, Clock(9.0, 0, 6.8)),
    ],
)
def test_a_clock_folds_a_bucket_when_the_next_one_starts(
    clock: Clock, bucket: float, add: int, after: Clock
) -> None:
    got = clocker.tick(clock, bucket, add)
    assert (got.at, got.events) == (after.at, after.events)
    assert got.rate == pytest.approx(after.rate)


def test_a_bucket_is_half_a_second_from_the_clocks_zero() -> None:
    assert [clocker.bucket_of(t) for t in (0.0, 0.49, 0.5, 1.74)] == [0.0, 0.0, 0.5, 1.5]


def test_the_short_queue_comes_on_after_an_interval_above_and_off_when_empty() -> None:
    # Slots of 10 ms: the short limit is max(5 ms, 4 slots) = 40 ms.
    queue, longest = short_queue.arrive(Queue(), 0.0, 0.05, False, 0.01, 1.0)
    assert (queue.above_since, queue.short_on, longest) == (0.0, False, 1.0)
    # One call that waits less starts the interval again.
    again, _ = short_queue.arrive(queue, 0.05, 0.03, False, 0.01, 1.0)
    assert again.above_since == math.inf
    # Above for CODEL_INTERVAL (100 ms): the short limit is the queue's.
    queue, longest = short_queue.arrive(queue, 0.1, 0.05, False, 0.01, 1.0)
    assert queue.short_on
    assert longest == pytest.approx(0.04)
    # Below the short limit it stays on; only an empty queue turns it off.
    queue, longest = short_queue.arrive(queue, 0.2, 0.001, False, 0.01, 1.0)
    assert queue.short_on
    assert longest == pytest.approx(0.04)
    assert short_queue.arrive(queue, 0.3, 0.0, True, 0.01, 1.0) == (Queue(), 1.0)


def test_a_refused_caller_comes_back_after_every_one_refused_before_it() -> None:
    queue, left = short_queue.refuse(Queue(), 0.0, 2.0, 0.5)
    assert (queue.shed_until, left) == (2.5, 2.5)
    queue, left = short_queue.refuse(queue, 0.0, 2.0, 0.5)
    assert (queue.shed_until, left) == (3.0, 3.0)
    # Never sooner than CODEL_INTERVAL, so refused callers do not spin.
    assert short_queue.refuse(Queue(), 0.0, 0.0, 0.01)[1] == 0.1


@pytest.mark.parametrize(
    ("epoch_at", "now", "in_flight"),
    [
        (0.0, 119.0, (1, 2, 0.0)),  # within the epoch: as counted
        (0.0, 130.0, (2, 0, 120.0)),  # the next epoch: the current count is old
        (0.0, 250.0, (0, 0, 250.0)),  # two epochs on: a call never reported is gone
    ],
)
def test_calls_in_flight_roll_out_after_two_epochs(
    epoch_at: float, now: float, in_flight: tuple[int, int, float]
) -> None:
    limit = Limit(limit=10.0, flight=2, flight_old=1, epoch_at=epoch_at)
    assert aimd.in_flight(limit, now) == in_flight


def test_the_limit_grows_when_half_full_and_backs_off_on_a_slow_call() -> None:
    on = Limit(4.0, flight=2, epoch_at=0.0, slow_at=0.0, latency_fast=0.1, latency_base=0.1)
    # A success while half the limit is in flight, itself counted: one left
    # after it reported, 2 x (1 + 1) >= 4, +1.
    assert aimd.observe(on, 1.0, 30.0, 0.1, True, 10.0, 0.5).limit == 5.0
    # A slow call (past twice the baseline and 10 ms): x 0.9, floored at 2.
    assert aimd.observe(on, 1.0, 30.0, 0.5, True, 10.0, 0.5).limit == pytest.approx(3.6)
    # Off and healthy: nothing in flight is counted, no limit.
    off = Limit(latency_fast=0.1, latency_base=0.1)
    assert aimd.observe(off, 1.0, 30.0, 0.1, True, 10.0, 0.5).limit == 0.0


def test_a_header_hold_never_passes_the_cap_it_is_given() -> None:
    spent = Quota(limit=100, remaining=0, reset=timedelta(hours=1), window=None)
    quota = header_quota.read(HeaderQuota(), RateLimitHint(spent, None), 0.0, 30.0, 60.0)
    assert quota.hold_until == 60.0
    assert header_quota.hold_at_most(quota, 10.0).hold_until == 10.0
    assert header_quota.hold_at_most(quota, 70.0) is quota


def test_only_a_call_admitted_after_the_limit_came_on_frees_a_slot() -> None:
    """The count begins when the limit comes on (aimd's module docstring):
    a call admitted before was never counted, so its outcome frees no slot
    that a counted call holds (and its latency is still read)."""
    on = Limit(
        4.0, flight=4, epoch_at=5.0, slow_at=5.0, latency_fast=0.1, latency_base=0.1, on_at=5.0
    )
    before = aimd.observe(on, 6.0, 30.0, 0.1, True, 10.0, 4.0)
    assert aimd.in_flight(before, 6.0)[:2] == (0, 4)
    assert before.limit == 5.0  # a fast success while half full: +1 all the same
    after = aimd.observe(on, 6.0, 30.0, 0.1, True, 10.0, 5.5)
    assert aimd.in_flight(after, 6.0)[:2] == (0, 3)


def test_a_learned_limit_coming_back_on_counts_afresh() -> None:
    """Off after `quiet` (30 s) without a slow call, a limit learned before
    comes back on with the next slow one; the calls admitted meanwhile were
    not counted, so the count starts at 0 then."""
    was = Limit(
        4.0, flight=3, epoch_at=0.0, slow_at=0.0, latency_fast=0.1, latency_base=0.1, on_at=0.0
    )
    assert not aimd.limited(was, 40.0, 30.0)
    back = aimd.observe(was, 40.0, 30.0, 0.5, True, 10.0, 39.0)
    assert aimd.limited(back, 40.0, 30.0)
    assert (aimd.in_flight(back, 40.0)[:2], back.on_at) == ((0, 0), 40.0)
