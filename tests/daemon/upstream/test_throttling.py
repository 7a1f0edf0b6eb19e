"""Throttling is not failure: a full upstream feeds the throttle, not the breaker.

A 429, a 529, a 503 with a Retry-After (or grpc-retry-pushback-ms) and a
refusing pushback say the upstream is full, not broken. The token bucket and
the shared cool-down read them as today; the breaker's window does not count
them, unless the profile sets `circuit_breaker.count_throttling: true`.
gRFC A6 keeps pushback apart from failure the same way; resilience4j's
ignoreExceptions releases a half-open permission for an ignored call, which
is what a throttled probe does here.

First tables over the pure core with a fake clock, then a real daemon over
a real socket, then the fleet path against a real Redis.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from itertools import count
from typing import Any

import pytest
import redis

from conftest import serving
from squawk.daemon.config import ConfigError, parse_config
from squawk.policy import (
    BreakerConfig,
    BreakerState,
    Outcome,
    RateLimitConfig,
    RatioBudgetConfig,
    TokenBucketConfig,
    UpstreamConfig,
    builtin_profile,
)
from squawk.policy.outcome import Verdict, is_throttled
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc
from test_fleet import Pod as FleetPod
from test_fleet import eventually, start_pods, stop_pods  # isort: split

from test_fleet_store import stored  # isort: split

from bench.redis_server import RedisServer  # on the path once test_fleet is imported
from upstream_pod import OUTAGE, RETRY, SUCCESS, Pod

HINT = timedelta(seconds=1)
F, N, S = Verdict.FAILURE, Verdict.IGNORED, Verdict.SUCCESS  # N: not counted


def _failed(status: int, **fields: Any) -> Outcome:
    return Outcome(success=False, http_status=status, **fields)


@pytest.mark.parametrize(
    ("outcome", "throttled", "breaker", "counted", "cool_down"),
    [
        # The throttled forms: the breaker ignores them unless told to count
        # them; the cool-down and the token bucket read them as before.
        (_failed(429), True, N, F, F),
        (_failed(429, retry_after=HINT), True, N, F, F),
        (_failed(529), True, N, F, F),
        (_failed(503, retry_after=HINT), True, N, F, F),
        (_failed(503, retry_after=timedelta(0)), True, N, F, F),
        (_failed(500, refused_retry=True), True, N, F, F),
        # Broken, not full: the breaker counts them.
        (_failed(503), False, F, F, F),
        (_failed(500, retry_after=HINT), False, F, F, F),
        (_failed(502), False, F, F, F),
        (_failed(0), False, F, F, F),
        (Outcome(success=False, transport_failure=True, refused_retry=True), False, F, F, F),
        # Not counted at all, as before.
        (_failed(400, refused_retry=True), True, N, N, N),
        (_failed(429, cancelled=True), False, N, N, N),
        (Outcome(success=True, http_status=429), False, S, S, S),
    ],
)
def test_what_a_throttled_outcome_counts_as(
    outcome: Outcome, throttled: bool, breaker: Verdict, counted: Verdict, cool_down: Verdict
) -> None:
    config = UpstreamConfig()
    assert is_throttled(outcome) is throttled
    assert config.breaker_verdict(outcome) is breaker
    counting = replace(config, circuit_breaker=BreakerConfig(count_throttling=True))
    assert counting.breaker_verdict(outcome) is counted
    assert config.verdict(outcome) is cool_down


def test_the_llm_profiles_529_is_throttling() -> None:
    # "llm" retries 529 (the overloaded answer of some model APIs): its
    # breaker ignores it unless the profile counts throttling.
    config = builtin_profile("llm").for_upstream("")
    assert config.breaker_verdict(_failed(529)) is N
    assert config.verdict(_failed(529)) is F
    counting = replace(config, circuit_breaker=BreakerConfig(count_throttling=True))
    assert counting.breaker_verdict(_failed(529)) is F


_BUDGET = RatioBudgetConfig(ratio=1.0, min_per_second=1000)


# These tables are the breaker's and the budget's. The same 429s also teach
# the pacer a rate that spaces the next calls (test_pacer.py has its
# tables), which these timelines at one instant would run into.
_UNPACED = RateLimitConfig(learn=False)


def pod(count_throttling: bool = False) -> Pod:
    breaker = BreakerConfig(count_throttling=count_throttling)
    return Pod(UpstreamConfig(circuit_breaker=breaker, retry_budget=_BUDGET, rate_limit=_UNPACED))


@pytest.mark.parametrize(
    ("count_throttling", "state", "calls"),
    # Open, it shows the ten 429s that opened it.
    [(False, BreakerState.CLOSED, 0), (True, BreakerState.OPEN, 10)],
)
def test_429s_open_the_breaker_only_when_the_profile_counts_throttling(
    count_throttling: bool, state: BreakerState, calls: int
) -> None:
    p = pod(count_throttling)
    p.call(_failed(429), times=10)
    view = p.view()
    assert (view.breaker_state, view.calls) == (state, calls)


def test_a_throttled_reply_still_cools_the_upstream_down() -> None:
    p = pod()
    p.call(_failed(429, retry_after=timedelta(seconds=5)))
    admission = p.admit()
    assert not admission.allowed
    assert admission.breaker_state is BreakerState.CLOSED
    assert admission.retry_after == timedelta(seconds=5)


def test_a_throttled_reply_still_spends_the_token_bucket() -> None:
    bucket = TokenBucketConfig(max_tokens=10, token_ratio=0.1)
    p = Pod(UpstreamConfig(retry_budget=bucket, rate_limit=_UNPACED))
    p.call(_failed(429), times=4)
    assert p.guard(RETRY).action is RETRY.action  # 6 tokens left: above half
    p.call(_failed(529))
    refused = p.guard(RETRY)
    assert refused.action is not RETRY.action  # 5 tokens: at half, no retry
    assert p.view().breaker_state is BreakerState.CLOSED


def half_open(count_throttling: bool = False) -> Pod:
    p = pod(count_throttling).at(0.0)
    p.call(OUTAGE, times=10)
    p.at(30.0)
    assert p.view().breaker_state is BreakerState.HALF_OPEN
    return p


def test_a_throttled_probe_gives_its_slot_back_and_does_not_judge_the_round() -> None:
    p = half_open()
    for _ in range(5):  # each throttled probe hands its slot back
        p.call(_failed(429))
    view = p.view()
    assert (view.breaker_state, view.calls, view.probes) == (BreakerState.HALF_OPEN, 0, 0)
    p.call(SUCCESS, times=5)  # the round is judged by the probes that got an answer
    assert p.view().breaker_state is BreakerState.CLOSED


def test_a_throttled_probe_counts_for_the_round_when_the_profile_says_so() -> None:
    p = half_open(count_throttling=True)
    p.call(_failed(429), times=5)
    assert p.view().breaker_state is BreakerState.OPEN


# -- the policy file ---------------------------------------------------------


def test_count_throttling_is_read_per_profile_and_upstream() -> None:
    policy = parse_config(
        "profiles:\n"
        "  default:\n"
        "    circuit_breaker: {count_throttling: true}\n"
        "    upstreams:\n"
        "      api: {circuit_breaker: {count_throttling: false}}\n"
    ).policy
    profile = policy.profile("default")
    assert profile.for_upstream("other").circuit_breaker.count_throttling is True
    assert profile.for_upstream("api").circuit_breaker.count_throttling is False
    assert parse_config("profiles: {}\n").policy.profile("default").for_upstream(
        ""
    ).circuit_breaker == BreakerConfig(count_throttling=False)


def test_a_bad_count_throttling_names_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config("profiles:\n  default:\n    circuit_breaker:\n      count_throttling: 3\n")
    assert "circuit_breaker.count_throttling (line 4): expected true or false" in str(info.value)


# -- over the wire -----------------------------------------------------------

POLICY = """\
profiles:
  default:
    circuit_breaker: {minimum_calls: 10, open_for: 30s}
  counting:
    circuit_breaker: {minimum_calls: 10, open_for: 30s, count_throttling: true}
"""


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pb_grpc.PolicyServiceStub]:
    with serving(tmp_path_factory, POLICY) as channel:
        yield pb_grpc.PolicyServiceStub(channel)


_names = count()


def _report(
    stub: pb_grpc.PolicyServiceStub,
    status: int,
    headers: dict[str, str],
    times: int = 20,
    profile: str = "",
) -> str:
    upstream = f"throttled-{next(_names)}"
    outcome = pb.Outcome(
        upstream=upstream, success=False, http_status=status, headers=headers, profile=profile
    )
    reply = stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[outcome] * times), timeout=5)
    assert reply.recorded == times
    return upstream


def _breaker(stub: pb_grpc.PolicyServiceStub, upstream: str, profile: str = "") -> int:
    reply = stub.GetUpstreams(pb.GetUpstreamsRequest(upstream=upstream, profile=profile), timeout=5)
    (state,) = reply.upstreams
    return int(state.breaker_state)


@pytest.mark.parametrize(
    ("status", "headers"),
    [
        (429, {"Retry-After": "1"}),
        (529, {"Retry-After": "1"}),
        (503, {"Retry-After": "1"}),
        (429, {"grpc-retry-pushback-ms": "1000"}),
    ],
)
def test_an_upstream_that_only_throttles_never_opens_the_breaker(
    stub: pb_grpc.PolicyServiceStub, status: int, headers: dict[str, str]
) -> None:
    # On main, 20 x 429 opened the breaker, which then refused a healthy but
    # full upstream for its whole open period (30 s here), not for the 1 s
    # the upstream asked for.
    upstream = _report(stub, status, headers)
    assert _breaker(stub, upstream) == pb.BREAKER_STATE_CLOSED
    reasons = set()
    deadline = time.monotonic() + 10  # a generous bound: the defect is a 30 s refusal
    while True:
        admitted = stub.Admit(pb.AdmitRequest(upstream=upstream), timeout=5)
        assert admitted.breaker_state == pb.BREAKER_STATE_CLOSED
        if admitted.allowed:
            break
        reasons.add(admitted.reason)
        # The hint's second left, and a cool-down's jitter (at most as much again).
        assert admitted.retry_after.ToMilliseconds() <= 2000
        assert time.monotonic() < deadline, "still refused after the upstream's Retry-After"
        time.sleep(0.05)
    assert reasons <= {pb.REASON_UPSTREAM_COOLING_DOWN}


@pytest.mark.parametrize(
    ("status", "headers", "profile"),
    [
        (503, {}, ""),  # broken, not full: the breaker opens as before
        (500, {}, ""),
        (429, {}, "counting"),  # the profile counts throttling
    ],
)
def test_a_broken_upstream_still_opens_the_breaker(
    stub: pb_grpc.PolicyServiceStub, status: int, headers: dict[str, str], profile: str
) -> None:
    upstream = _report(stub, status, headers, profile=profile)
    assert _breaker(stub, upstream, profile) == pb.BREAKER_STATE_OPEN
    admitted = stub.Admit(pb.AdmitRequest(upstream=upstream, profile=profile), timeout=5)
    assert (admitted.allowed, admitted.reason) == (False, pb.REASON_CIRCUIT_OPEN)


# -- the fleet ---------------------------------------------------------------

FLEET_POLICY = """
state:
  store: redis
  key_prefix: "store:"
  deadline: 250ms
  min_pods: 2
profiles:
  default:
    circuit_breaker: {minimum_calls: 4, failure_ratio: 0.5, window: 60s, open_for: 30s}
    retry_budget: {kind: token_bucket, max_tokens: 100, token_ratio: 0.1}
"""


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[list[FleetPod], redis.Redis]]:
    path = tmp_path_factory.mktemp("fleet") / "policy.yaml"
    path.write_text(FLEET_POLICY)
    server = RedisServer().start()
    pods = start_pods(server.url, path, count=2)
    client = redis.Redis(port=server.port)
    yield pods, client
    client.close()
    stop_pods(pods)
    server.stop()


def _stored(client: redis.Redis, upstream: str) -> dict[str, Any] | None:
    state = stored(client, "default", upstream)
    return state if state["exists"] else None


def test_throttled_reports_reach_the_fleets_bucket_and_cool_down_not_its_breaker(
    fleet: tuple[list[FleetPod], redis.Redis],
) -> None:
    (a, b), client = fleet
    for p in (a, b):
        p.report("full", *[429] * 6, headers={"Retry-After": "5"})
    eventually(
        lambda: (s := _stored(client, "full")) is not None and s["t"] >= 12_000,
        "both pods' twelve throttled replies reach the fleet's token bucket",
    )
    state = _stored(client, "full")
    assert state is not None
    assert state["s"] == 1  # CLOSED: two pods, twelve 429s, no breaker failure
    assert state["calls"] == 0
    assert state["c"] > 0  # the Retry-After cools the fleet
    for p in (a, b):
        admitted = p.admit("full")
        assert (admitted.reason, admitted.breaker_state) == (
            pb.REASON_UPSTREAM_COOLING_DOWN,
            pb.BREAKER_STATE_CLOSED,
        )
    # The control: the same replies as 503s without a hint open the fleet's breaker.
    for p in (a, b):
        p.report("broken", *[503] * 6)
    eventually(
        lambda: (s := _stored(client, "broken")) is not None and s["s"] == 2,
        "the fleet's breaker opens on two pods' 503s",
    )
