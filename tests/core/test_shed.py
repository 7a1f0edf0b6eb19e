"""A shed call's explanation names the limit that refused it, with its number.

A refusal once said "cannot start before the step's deadline" whatever
refused it; a call with a 60 s deadline refused by the queue's 1 s limit
read the same, and its caller raised a deadline that was never the limit.
Each case below sets up one cause through admit() and checks the sentence
AdmitResponse.explanation carries (squawk.policy.shed.explain). The numbers
are worked out from the pacer's rules (tests/core/test_pacer.py): GCRA
spaces starts by 1 / rate, the queue's limit is max_queue_delay (1 s by
default), the short queue's max(5 ms, 4 slots).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from squawk.policy import (
    Outcome,
    Pacer,
    PaceSample,
    RateLimitConfig,
    RateLimitHint,
    Reason,
    UpstreamConfig,
    UpstreamState,
    admit,
    observe,
    record_outcome,
)
from squawk.policy.ratelimit import Quota
from squawk.policy.shed import MAX_EXPLANATION_CHARS, Shed, ShedCause, explain
from squawk.policy.types import PaceSource
from squawk.wire import admission_message

MS = timedelta(milliseconds=1)
RATE_20 = UpstreamConfig(rate_limit=RateLimitConfig(rate=20))
RATE_10 = UpstreamConfig(rate_limit=RateLimitConfig(rate=10))

Setup = Callable[[], tuple[UpstreamState, UpstreamConfig, float, timedelta | None]]


def _queued(config: UpstreamConfig, calls: int, now: float = 0.0) -> UpstreamState:
    """`calls` admitted at `now` without a deadline: the queue they leave."""
    state = UpstreamState()
    for _ in range(calls):
        state, granted = admit(state, config, now)
        assert granted.allowed
    return state


def queue_limit() -> tuple[UpstreamState, UpstreamConfig, float, timedelta | None]:
    # 20/s: slots of 50 ms. 21 calls wait 0..1000 ms; the 22nd would wait
    # 1.05 s, past the 1 s queue, with 60 s of its deadline left.
    return _queued(RATE_20, 21), RATE_20, 0.0, timedelta(seconds=60)


def deadline() -> tuple[UpstreamState, UpstreamConfig, float, timedelta | None]:
    # 10/s: the second call waits 100 ms; its step has 50 ms left.
    return _queued(RATE_10, 1), RATE_10, 0.0, 50 * MS


def queue_and_deadline() -> tuple[UpstreamState, UpstreamConfig, float, timedelta | None]:
    # The 12th call at 10/s would wait 1.1 s: past the queue and the 500 ms left.
    return _queued(RATE_10, 11), RATE_10, 0.0, 500 * MS


def short_queue() -> tuple[UpstreamState, UpstreamConfig, float, timedelta | None]:
    # 10/s: 10 calls at 0 (the last waits 900 ms: past the short limit of
    # max(5 ms, 4 x 100 ms) = 400 ms, so the busy interval begins), one at
    # 0.05 (waits 950 ms, still the long limit); at 0.15 the queue has been
    # busy past 400 ms for 100 ms: the short limit refuses a 950 ms wait.
    state = _queued(RATE_10, 10)
    state, granted = admit(state, RATE_10, 0.05)
    assert granted.wait == 950 * MS
    return state, RATE_10, 0.15, None


def token_pace() -> tuple[UpstreamState, UpstreamConfig, float, timedelta | None]:
    # 100 units/s, a burst of 100: calls of 100 units start at 0, 1 s, 2 s;
    # the third would wait 2 s.
    config = UpstreamConfig(rate_limit=RateLimitConfig(token_rate=100))
    state = UpstreamState()
    for _ in range(2):
        state, granted = admit(state, config, 0.0, cost=100)
        assert granted.allowed
    return state, config, 0.0, None


def hold() -> tuple[UpstreamState, UpstreamConfig, float, timedelta | None]:
    # The upstream's headers: nothing left of 5000 for 30 s.
    spent = RateLimitHint(Quota(5000, 0, timedelta(seconds=30), None), None)
    config = UpstreamConfig()
    state = record_outcome(UpstreamState(), config, 0.0, Outcome(True, hint=spent))
    return state, config, 0.0, None


def in_flight() -> tuple[UpstreamState, UpstreamConfig, float, timedelta | None]:
    # tests/core/test_pacer.py's _slowing: ten 100 ms calls, then two of
    # 1 s: a concurrency limit of 5, filled by five calls.
    ok = PaceSample(throttled=False, success=True, counted=True, admitted_at=0.0)
    config = UpstreamConfig()
    p = Pacer()
    for _ in range(10):
        p = observe(p, config.rate_limit, 0.0, ok._replace(latency=100 * MS))
    p = observe(p, config.rate_limit, 0.1, ok._replace(latency=1000 * MS))
    p = observe(p, config.rate_limit, 0.2, ok._replace(latency=1000 * MS))
    state = UpstreamState(pacer=p)
    for _ in range(5):
        state, granted = admit(state, config, 0.3)
        assert granted.allowed
    return state, config, 0.3, timedelta(seconds=60)


POLICY = "(declared in the policy)"
QUEUE = "past the queue's limit of 1 s (rate_limit.max_queue_delay)"


@pytest.mark.parametrize(
    ("setup", "cause", "said"),
    [
        (
            queue_limit,
            ShedCause.QUEUE,
            f"The call would wait 1.05 s for the pace of 20/s {POLICY}, {QUEUE}.",
        ),
        (
            deadline,
            ShedCause.DEADLINE,
            f"The call would wait 100 ms for the pace of 10/s {POLICY}, "
            "past the step's deadline 50 ms away.",
        ),
        (
            queue_and_deadline,
            ShedCause.QUEUE,
            f"The call would wait 1.1 s for the pace of 10/s {POLICY}, {QUEUE} "
            "and the step's deadline 500 ms away.",
        ),
        (
            short_queue,
            ShedCause.SHORT_QUEUE,
            f"The call would wait 950 ms for the pace of 10/s {POLICY}, past the short "
            "queue's limit of 400 ms (the pod is shedding a sustained overload).",
        ),
        (
            token_pace,
            ShedCause.QUEUE,
            f"The call would wait 2 s for the token pace of 100 units/s {POLICY}, {QUEUE}.",
        ),
        (
            hold,
            ShedCause.QUEUE,
            f"The call would wait 30 s for the upstream's hold to end (its quota spent), {QUEUE}.",
        ),
        (
            in_flight,
            ShedCause.IN_FLIGHT,
            "The upstream's concurrency limit of 5 calls in flight (learned as its "
            "latency rose) is full.",
        ),
    ],
    ids=lambda v: v.__name__ if callable(v) else None,
)
def test_a_shed_call_names_the_limit_that_refused_it(
    setup: Setup, cause: ShedCause, said: str
) -> None:
    state, config, now, left = setup()
    _, refused = admit(state, config, now, deadline=left, cost=100 if setup is token_pace else 0)
    assert (refused.allowed, refused.reason) == (False, Reason.UPSTREAM_SATURATED)
    assert refused.shed is not None and refused.shed.cause is cause
    # The daemon's answer carries the sentence.
    assert admission_message(refused).explanation == said


def test_only_a_shed_refusal_carries_an_explanation() -> None:
    granted = admit(UpstreamState(), RATE_10, 0.0)[1]
    assert admission_message(granted).explanation == ""
    cooling = record_outcome(
        UpstreamState(), RATE_10, 0.0, Outcome(False, 429, retry_after=timedelta(seconds=5))
    )
    refused = admit(cooling, RATE_10, 0.0)[1]
    assert refused.reason is Reason.UPSTREAM_COOLING_DOWN
    assert admission_message(refused).explanation == ""


@pytest.mark.parametrize(
    ("shed", "said"),
    [
        # Whole ms below a second, three digits below 100 s, whole seconds past it.
        (Shed(ShedCause.DEADLINE, 0.0004, 0.0), "would wait 0 ms for the pace of 0/s"),
        (Shed(ShedCause.QUEUE, 99.94, 1.0, 0.5), "would wait 99.9 s for the pace of 0.5/s,"),
        (Shed(ShedCause.QUEUE, 3600.4, 1.0, 250.4), "would wait 3600 s for the pace of 250/s,"),
        (
            Shed(ShedCause.QUEUE, 2.0, 1.0, 1 / 3600, source=PaceSource.LEARNED),
            "the pace of 0.000278/s (learned from the upstream's throttling)",
        ),
        (
            Shed(ShedCause.QUEUE, 2.0, 1.0, 5, source=PaceSource.HEADERS),
            "the pace of 5/s (read from the upstream's rate-limit headers)",
        ),
    ],
)
def test_the_numbers_are_shown_short_and_exact(shed: Shed, said: str) -> None:
    assert said in explain(shed)


def test_the_longest_explanation_is_within_its_bound() -> None:
    longest = Shed(ShedCause.SHORT_QUEUE, 1e9, 1e9, 1e9, 1e9, PaceSource.HEADERS, deadline=1e9)
    assert len(explain(longest)) <= MAX_EXPLANATION_CHARS
