"""The declared cap on calls in flight (squawk.policy.capped, composed in
squawk.policy.pacer), as tables over a fake clock: every admission while
the cap is declared takes a slot, only the outcome of a call admitted since
the cap was declared frees one, and a call that never reports leaves the
count after one to two epochs of FLIGHT_EPOCH (120 s)."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squawk.policy import (
    Outcome,
    PolicyInputError,
    RateLimitConfig,
    Reason,
    UpstreamConfig,
    UpstreamState,
    admit,
    is_idle,
    record_outcome,
    upstream_snapshot,
)
from squawk.policy.capped import refused
from squawk.policy.flight import FLIGHT_EPOCH
from squawk.policy.shed import explain

CAP2 = UpstreamConfig(rate_limit=RateLimitConfig(max_in_flight=2))
CAP4 = UpstreamConfig(rate_limit=RateLimitConfig(max_in_flight=4))
OK = Outcome(True, latency=timedelta(seconds=1))


def _admitted(state: UpstreamState, config: UpstreamConfig, now: float) -> UpstreamState:
    state, granted = admit(state, config, now)
    assert granted.allowed
    return state


def test_a_full_cap_refuses_until_an_admitted_call_reports() -> None:
    state = _admitted(UpstreamState(), CAP2, 0.0)
    state = _admitted(state, CAP2, 0.0)
    state, refused = admit(state, CAP2, 0.1)
    assert (refused.allowed, refused.reason) == (False, Reason.IN_FLIGHT_CAP)
    assert refused.shed is not None
    assert explain(refused.shed) == (
        "The upstream's cap of 2 calls in flight (rate_limit.max_in_flight) is full."
    )
    # The outcome of a call the pod admitted frees its slot.
    state = record_outcome(state, CAP2, 1.0, OK, admitted_at=0.0)
    state, granted = admit(state, CAP2, 1.0)
    assert granted.allowed
    assert admit(state, CAP2, 1.0)[1].allowed is False


def test_outcomes_nobody_admitted_free_no_slot() -> None:
    state = _admitted(UpstreamState(), CAP2, 10.0)
    state = _admitted(state, CAP2, 10.0)
    # Made up (no live admission named) or admitted before the cap was
    # declared (at 10.0): neither frees a slot.
    for admitted_at in (None, 9.0):
        for _ in range(5):
            state = record_outcome(state, CAP2, 11.0, OK, admitted_at=admitted_at)
    assert admit(state, CAP2, 11.0)[1].allowed is False


def test_a_call_that_never_reports_leaves_the_count_after_two_epochs() -> None:
    state = _admitted(UpstreamState(), CAP2, 0.0)
    state = _admitted(state, CAP2, 0.0)
    assert admit(state, CAP2, FLIGHT_EPOCH)[1].allowed is False  # the older epoch now
    assert admit(state, CAP2, 2 * FLIGHT_EPOCH)[1].allowed is True


def test_a_full_cap_says_to_ask_again_after_a_twentieth_of_a_call() -> None:
    # Calls of 1 s (the mean of what reported): ask again in 50 ms, so a
    # slot that frees is taken within about 5 % of a call's length.
    state = _admitted(UpstreamState(), CAP2, 0.0)
    state = _admitted(state, CAP2, 0.0)
    state = record_outcome(state, CAP2, 1.0, OK, admitted_at=0.0)
    state = _admitted(state, CAP2, 1.0)
    assert refused(state.pacer.capped, 1.0, 2)[1] == pytest.approx(0.05)
    # Jittered upwards by at most a fifth, never less.
    _, answer = admit(state, CAP2, 1.0)
    assert answer.retry_after is not None
    assert 50 <= answer.retry_after / timedelta(milliseconds=1) <= 60
    # Nothing known of the calls yet: 5 ms, the least.
    assert refused(UpstreamState().pacer.capped, 0.0, 2)[1] == pytest.approx(0.005)


def test_many_callers_waiting_ask_less_often_each() -> None:
    # Calls of 1 s under a cap of 4: the daemon answers about 20 x sqrt(4)
    # = 40 asks a second. Refusals at 400 a second (many callers waiting)
    # make each wait ten times the 50 ms, so the asks fall back to about 40.
    state = _admitted(UpstreamState(), CAP4, 0.0)
    state = record_outcome(state, CAP4, 1.0, OK, admitted_at=0.0)
    for _ in range(4):
        state = _admitted(state, CAP4, 1.0)
    capped, now = state.pacer.capped, 1.0
    waits = []
    for _ in range(2000):  # 400 refusals a second, for 5 s
        now += 0.0025
        capped, wait = refused(capped, now, 4)
        waits.append(wait)
    assert waits[0] == pytest.approx(0.05)
    assert waits[-1] == pytest.approx(0.5, rel=0.02)


def test_the_cap_grants_one_permit_an_answer_and_shows_in_the_snapshot() -> None:
    state, granted = admit(UpstreamState(), CAP2, 0.0, permits=10)
    assert granted.permits == 1
    pace = upstream_snapshot(state, CAP2, 0.0).pace
    assert (pace.concurrency_limit, pace.in_flight) == (2, 1)
    # A key with calls out under a cap is not idle: dropping it would lose them.
    assert not is_idle(state, CAP2, 1.0)
    state = record_outcome(state, CAP2, 1.0, OK, admitted_at=0.0)
    assert is_idle(state, CAP2, 100.0)


def test_a_cap_declared_anew_counts_afresh() -> None:
    state = _admitted(UpstreamState(), CAP2, 0.0)
    state = _admitted(state, CAP2, 0.0)
    # A reload drops the cap, then declares it again: the calls admitted
    # while it was not declared were never counted and free nothing.
    state, _ = admit(state, UpstreamConfig(), 5.0)
    assert state.pacer.capped.on_at == math.inf
    state = _admitted(state, CAP2, 6.0)
    state = record_outcome(state, CAP2, 7.0, OK, admitted_at=5.0)
    state = _admitted(state, CAP2, 7.0)
    assert admit(state, CAP2, 7.0)[1].allowed is False


def test_the_cap_is_bounded() -> None:
    for bad in (0, 1001):
        with pytest.raises(PolicyInputError, match="max_in_flight"):
            RateLimitConfig(max_in_flight=bad)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 5),
    st.lists(st.sampled_from(["admit", "report", "made-up", "old"]), max_size=80),
)
def test_no_sequence_of_reports_lifts_the_calls_out_past_the_cap(
    cap: int, actions: list[str]
) -> None:
    # The calls really out are the admissions whose own outcome has not
    # come; whatever else is reported (an outcome no live admission names,
    # one admitted before the cap was declared), they never pass the cap.
    config = UpstreamConfig(rate_limit=RateLimitConfig(max_in_flight=cap))
    state, now = UpstreamState(), 1.0
    state, _ = admit(state, config, now)
    out = [now]
    for action in actions:
        now += 0.01
        if action == "admit":
            state, granted = admit(state, config, now)
            if granted.allowed:
                out.append(now)
        elif action == "report" and out:
            state = record_outcome(state, config, now, OK, admitted_at=out.pop(0))
        elif action == "made-up":
            state = record_outcome(state, config, now, OK, admitted_at=None)
        elif action == "old":
            state = record_outcome(state, config, now, OK, admitted_at=0.5)
        assert len(out) <= cap
