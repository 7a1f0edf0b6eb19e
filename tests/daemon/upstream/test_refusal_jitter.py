"""Refusals are jittered: executors refused together come back spread out.

A refusal's wait is the time the refusing rule still refuses plus
U(0, min(left x f, 5 s)) (squawk.policy.cooldown.spread): f = 0.2 for an
open breaker (gRPC's connection backoff's JITTER), 1 for a cool-down, which
holds back a whole pod's demand for its length. The pure rule is checked as a
table with a seeded random.Random and a property; the outcome over a real
daemon's socket: concurrent Admit calls refused by one cool-down answer
waits that no single end time explains.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import Daemon, start_daemon
from squawk.policy import (
    Action,
    BreakerConfig,
    Reason,
    UpstreamConfig,
    UpstreamState,
    admit,
    guard_fleet,
    guard_retry,
    record_outcome,
)
from squawk.policy.cooldown import MAX_SPREAD, spread
from squawk.policy.guard import FleetAnswer
from squawk.policy.limits import MAX_RETRY_AFTER
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc
from test_fleet import POLICY as FLEET_POLICY  # isort: split

from bench.redis_server import RedisServer  # on the path once test_fleet is imported
from test_fleet import eventually, start_pods, stop_pods
from upstream_pod import OUTAGE, RETRY, failure

MS = timedelta(milliseconds=1)
SEED = 7


def _rng() -> random.Random:
    return random.Random(SEED)


@pytest.mark.parametrize(
    ("left_ms", "wait_ms"),
    [
        (0, 0),  # nothing refuses: nothing to spread
        (1, 1),  # a fifth of a millisecond rounds down to none
        (100, 100 + 6),  # up to 20 ms
        (2000, 2000 + 129),  # up to 400 ms
        (60_000, 60_000 + 1619),  # a fifth is 12 s: capped at 5 s
        (MAX_RETRY_AFTER // MS, MAX_RETRY_AFTER // MS),  # never past a day
    ],
)
def test_a_refusals_wait_only_grows_by_a_bounded_jitter(left_ms: int, wait_ms: int) -> None:
    assert spread(left_ms * MS, _rng()) == wait_ms * MS
    assert spread(left_ms * MS, None) == left_ms * MS  # no random source: the exact time


@settings(max_examples=300, deadline=None)
@given(st.integers(0, MAX_RETRY_AFTER // MS), st.integers(0, 2**32))
def test_the_jitter_is_never_below_the_time_left_nor_past_its_cap(left_ms: int, seed: int) -> None:
    left = left_ms * MS
    wait = spread(left, random.Random(seed))
    assert left <= wait <= min(left + min(left * 0.2, MAX_SPREAD), max(left, MAX_RETRY_AFTER))
    assert wait % MS == timedelta(0)


def _cooling(seconds: int) -> UpstreamState:
    return record_outcome(UpstreamState(), UpstreamConfig(), 0.0, failure(429, retry_after=seconds))


def test_admit_jitters_a_cool_down_refusal() -> None:
    _, refused = admit(_cooling(10), UpstreamConfig(), 2.0, rng=_rng())
    assert (refused.allowed, refused.reason) == (False, Reason.UPSTREAM_COOLING_DOWN)
    # 8 s left, up to 5 s more: the draw that is 518 of 1,600 ms below is
    # 1,619 of 5,000 here (the same first draw of the seeded generator).
    assert refused.retry_after == (8000 + 1619) * MS


@pytest.mark.parametrize("seed", range(40))
def test_a_cool_down_refusals_jitter_never_passes_a_deadline_it_fits(seed: int) -> None:
    # 8 s of cool-down left and 9 s of deadline: the wait is 8 s plus a
    # jitter cut to the deadline, so the step waits instead of failing.
    _, refused = admit(
        _cooling(10), UpstreamConfig(), 2.0, rng=random.Random(seed), deadline=9000 * MS
    )
    assert refused.retry_after is not None
    assert 8000 * MS <= refused.retry_after <= 9000 * MS


def test_admit_jitters_an_open_breaker_refusal() -> None:
    config = UpstreamConfig(BreakerConfig(minimum_calls=1, open_for=timedelta(seconds=30)))
    state = record_outcome(UpstreamState(), config, 0.0, OUTAGE)
    _, refused = admit(state, config, 10.0, rng=_rng())
    assert (refused.allowed, refused.reason) == (False, Reason.CIRCUIT_OPEN)
    assert refused.retry_after == (20_000 + 1295) * MS  # 20 s left, up to 4 s more


def test_guard_retry_jitters_the_cool_down_it_waits_and_the_breaker_it_fails_on() -> None:
    _, cooled = guard_retry(_cooling(10), UpstreamConfig(), 2.0, RETRY, None, _rng())
    assert (cooled.action, cooled.delay) == (Action.RETRY, (8000 + 1619) * MS)
    assert cooled.explanation.endswith("cooling down for 8000 ms more, so wait 9619 ms instead.")
    config = UpstreamConfig(BreakerConfig(minimum_calls=1, open_for=timedelta(seconds=30)))
    state = record_outcome(UpstreamState(), config, 0.0, OUTAGE)
    _, failed = guard_retry(state, config, 10.0, RETRY, None, _rng())
    assert (failed.reason, failed.retry_after) == (Reason.CIRCUIT_OPEN, (20_000 + 1295) * MS)


@pytest.mark.parametrize(
    ("deadline_ms", "action", "wait_ms"),
    [
        (10_000, Action.RETRY, 9619),  # room for the whole jitter
        (8200, Action.RETRY, 8200),  # the jitter is cut to the deadline, never the time left
        (8000, Action.RETRY, 8000),
        (7999, Action.FAIL, 9619),  # the time left itself is past it: retry_after is jittered
    ],
)
def test_the_deadline_cuts_the_jitter_but_never_the_time_left(
    deadline_ms: int, action: Action, wait_ms: int
) -> None:
    deadline = deadline_ms * MS
    _, d = guard_retry(_cooling(10), UpstreamConfig(), 2.0, RETRY, deadline, _rng())
    assert d.action is action
    assert (d.delay if action is Action.RETRY else d.retry_after) == wait_ms * MS


def test_guard_fleet_jitters_the_fleets_waits() -> None:
    cooled = guard_fleet(RETRY, FleetAnswer(cooling=8000 * MS), None, _rng())
    assert (cooled.action, cooled.delay) == (Action.RETRY, (8000 + 1619) * MS)
    opened = guard_fleet(RETRY, FleetAnswer(open_left=20_000 * MS), None, _rng())
    assert (opened.reason, opened.retry_after) == (Reason.CIRCUIT_OPEN, (20_000 + 1295) * MS)


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    d = start_daemon()
    yield d
    d.stop()


Answer = tuple[float, float, int]  # when the Admit was sent, answered, and its retry_after


def _refused_together(stub: pb_grpc.PolicyServiceStub, upstream: str) -> list[Answer]:
    def refused(_: int) -> Answer:
        start = time.monotonic()
        reply = stub.Admit(pb.AdmitRequest(upstream=upstream), timeout=5)
        end = time.monotonic()
        assert (reply.allowed, reply.reason) == (False, pb.REASON_UPSTREAM_COOLING_DOWN)
        return start, end, reply.retry_after.ToMilliseconds()

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(refused, range(24)))


def _spread_out(answers: list[Answer], before: float, after: float) -> None:
    """Without jitter every refusal answers `until - now`, so each call's
    (its time + retry_after) brackets the one end time: the brackets all
    overlap. Jittered (up to 5 s of a 10 s cool-down), they cannot."""
    waits = [ms for _, _, ms in answers]
    assert len(set(waits)) >= len(waits) // 2
    # No wait ends before the cool-down does (it ends 10 s after the 429
    # was sent, so no earlier than `before` + 10 s), nor past it plus 5 s.
    assert all(end + ms / 1000 >= before + 10 - 0.001 for _, end, ms in answers)
    assert all(start + ms / 1000 <= after + 15 + 0.001 for start, _, ms in answers)
    # Not one end time: the latest earliest end is well past the earliest latest one.
    latest_start = max(start + ms / 1000 for start, _, ms in answers)
    earliest_end = min(end + ms / 1000 for _, end, ms in answers)
    assert latest_start - earliest_end > 0.5


def test_executors_refused_by_one_cool_down_come_back_spread_out(daemon: Daemon) -> None:
    with grpc.insecure_channel(daemon.target) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)
        before = time.monotonic()
        told = stub.DecideRetry(
            pb.DecideRetryRequest(
                attempt=1, http_status=429, upstream="herd", headers={"retry-after": "10"}
            ),
            timeout=5,
        )
        after = time.monotonic()
        assert told.action == pb.ACTION_RETRY
        _spread_out(_refused_together(stub, "herd"), before, after)


def test_pods_refused_by_the_fleets_cool_down_come_back_spread_out(tmp_path: Path) -> None:
    """The pod that answers never saw the 429: its refusals are the fleet's."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(FLEET_POLICY)
    server = RedisServer().start()
    a, b = start_pods(server.url, policy, count=2)
    try:
        before = time.monotonic()
        a.report("fleet-herd", 429, headers={"Retry-After": "10"})
        eventually(
            lambda: b.admit("fleet-herd").reason == pb.REASON_UPSTREAM_COOLING_DOWN,
            "the fleet cools down",
        )
        after = time.monotonic()
        _spread_out(_refused_together(b.stub, "fleet-herd"), before, after)
    finally:
        stop_pods([a, b])
        server.stop()
