"""Reusing stateless decisions: an equal request gets the answer a fresh
decision would give, and nothing that reads the clock or a random source
is reused."""

from __future__ import annotations

import dataclasses
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from squawk.daemon.server.rpc.decisions import MAX_ENTRIES, MAX_KEY_BYTES, StatelessDecisions
from squawk.policy import BackoffConfig, Jitter, builtin_policy, decide
from squawk.v1 import policy_pb2 as pb
from squawk.wire import attempt_state, decision_message

POLICY = builtin_policy()
DEFAULT = POLICY.profile("default")
NOW = 1_700_000_000.0


def fresh(request: pb.DecideRetryRequest, now: float = NOW) -> pb.DecideRetryResponse:
    decision = decide(attempt_state(request), DEFAULT, lambda: now, None, POLICY.max_body_bytes)
    return decision_message(decision)


requests = st.builds(
    pb.DecideRetryRequest,
    attempt=st.integers(1, 12),
    http_status=st.sampled_from([0, 400, 401, 408, 429, 500, 502, 503]),
    transport_failure=st.booleans(),
    headers=st.dictionaries(
        st.sampled_from(["Retry-After", "retry-after", "X-Other"]),
        st.sampled_from(["0", "3", "120", "Wed, 21 Oct 2026 07:28:00 GMT", "soon"]),
        max_size=2,
    ),
    correction_available=st.booleans(),
)


@settings(max_examples=300)
@given(st.lists(requests, min_size=1, max_size=8))
def test_every_answer_is_the_one_a_fresh_decision_gives(batch: list[pb.DecideRetryRequest]) -> None:
    stateless = StatelessDecisions(lambda: NOW, random.Random(1), POLICY.max_body_bytes)
    for _ in range(2):  # the second pass answers from what the first kept
        for request in batch:
            decision, reply = stateless.decide(request, DEFAULT)
            assert reply == fresh(request)
            assert decision_message(decision) == reply


def test_an_http_date_retry_after_is_read_against_the_clock_every_time() -> None:
    now = [1_800_000_000.0]
    stateless = StatelessDecisions(lambda: now[0], random.Random(1), POLICY.max_body_bytes)
    request = pb.DecideRetryRequest(
        attempt=1, http_status=503, headers={"Retry-After": "Fri, 15 Jan 2027 08:00:10 GMT"}
    )
    now[0] = 1_800_000_000.0  # 2027-01-15T08:00:00Z: 10 s before the date
    first = stateless.decide(request, DEFAULT)[1]
    now[0] += 4
    second = stateless.decide(request, DEFAULT)[1]
    assert first.delay.ToMilliseconds() == 10_000
    assert second.delay.ToMilliseconds() == 6_000
    assert len(stateless) == 0


def test_random_jitter_is_never_reused() -> None:
    noisy = dataclasses.replace(DEFAULT, backoff=BackoffConfig(jitter=Jitter.FULL))
    stateless = StatelessDecisions(lambda: NOW, random.Random(7), POLICY.max_body_bytes)
    request = pb.DecideRetryRequest(attempt=1, http_status=503)
    delays = {stateless.decide(request, noisy)[1].delay.ToMilliseconds() for _ in range(20)}
    assert len(delays) > 1
    assert len(stateless) == 0


def test_kept_answers_are_bounded() -> None:
    stateless = StatelessDecisions(lambda: NOW, random.Random(1), POLICY.max_body_bytes)
    for i in range(MAX_ENTRIES + 500):
        stateless.decide(pb.DecideRetryRequest(attempt=1, capability=f"c{i}"), DEFAULT)
    assert len(stateless) == MAX_ENTRIES
    large = pb.DecideRetryRequest(attempt=1, http_status=503, response_body=b"x" * MAX_KEY_BYTES)
    assert stateless.decide(large, DEFAULT)[1] == fresh(large)
    stateless.decide(large, DEFAULT)
    assert len(stateless) == MAX_ENTRIES
    assert large.SerializeToString(deterministic=True) not in stateless._answers
