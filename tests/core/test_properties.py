"""Invariants of the decision core over random inputs (hypothesis).

The vector file pins chosen cases; these properties must hold for every
AttemptState the core accepts, under both built-in profiles and every
jitter mode.
"""

from __future__ import annotations

import json
import random
import time
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from squawk.policy import (
    Action,
    AttemptState,
    BackoffConfig,
    Jitter,
    PolicyInputError,
    Profile,
    Reason,
    builtin_policy,
    decide,
)
from squawk.policy.limits import MAX_RETRY_AFTER
from squawk.policy.text import shown_text

NOW = 1_700_000_000.0
POLICY = builtin_policy()
PROFILES = [POLICY.profile("default"), POLICY.profile("llm")]


def clock() -> float:
    return NOW


def _profiles() -> st.SearchStrategy[Profile]:
    jittered = st.builds(
        lambda base, jitter, initial, cap: Profile(
            name=base.name,
            base=base.base,
            transient_statuses=base.transient_statuses,
            terminal_statuses=base.terminal_statuses,
            corrections=base.corrections,
            backoff=BackoffConfig(
                initial=timedelta(milliseconds=initial),
                max=timedelta(milliseconds=max(initial, cap)),
                jitter=jitter,
            ),
        ),
        st.sampled_from(PROFILES),
        st.sampled_from(list(Jitter)),
        st.integers(0, 5_000),
        st.integers(0, 60_000),
    )
    return st.one_of(st.sampled_from(PROFILES), jittered)


_HINTS = st.one_of(
    st.integers(0, 10**25).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["Wed, 21 Oct 2015 07:28:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", "soon"]),
    st.text(max_size=20),
)


def _headers() -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(
        st.sampled_from(
            ["Retry-After", "retry-after", "retry-after-ms", "grpc-retry-pushback-ms", "x-other"]
        ),
        _HINTS,
        max_size=3,
    )


def _bodies() -> st.SearchStrategy[bytes]:
    envelope = st.builds(
        lambda retryable, message: json.dumps(
            {"success": False, "error": {"retryable": retryable, "message": message}}
        ).encode(),
        st.one_of(st.none(), st.booleans(), st.just("false")),
        st.text(max_size=50),
    )
    return st.one_of(st.just(b""), envelope, st.binary(max_size=50))


_STATUSES = st.one_of(st.just(0), st.integers(100, 599), st.sampled_from([400, 401, 429, 503]))

states = st.builds(
    AttemptState,
    attempt=st.integers(1, 2**31 - 1),
    max_attempts=st.one_of(st.none(), st.integers(1, 20)),
    http_status=_STATUSES,
    transport_failure=st.booleans(),
    response_body=_bodies(),
    headers=_headers(),
    validation_retries_used=st.integers(0, 10),
    max_validation_retries=st.one_of(st.none(), st.integers(0, 10)),
    correction_available=st.booleans(),
    hitl_approved=st.booleans(),
    delegated_orchestrator=st.booleans(),
    cancelled=st.booleans(),
    deadline=st.one_of(st.none(), st.integers(0, 10**8).map(lambda ms: timedelta(milliseconds=ms))),
)


def _decide(state: AttemptState, profile: Profile, seed: int) -> tuple[Action, timedelta, Reason]:
    d = decide(state, profile, clock, random.Random(seed))
    return d.action, d.delay, d.reason


@settings(max_examples=2_000, deadline=None)
@given(states, _profiles(), st.integers(0, 2**32))
def test_every_decision_keeps_the_invariants(
    state: AttemptState, profile: Profile, seed: int
) -> None:
    decision = decide(state, profile, clock, random.Random(seed))
    declared_false = decision.declared_retryable is False
    transient = state.transport_failure or state.http_status == 0
    transient = transient or state.http_status in profile.transient_statuses
    hinted = decision.classification.retry_after is not None

    # FAIL and CORRECT never wait; only RETRY carries a delay.
    if decision.action is not Action.RETRY:
        assert decision.delay == timedelta(0)
    # A transient failure is resent unchanged or ends the step; never corrected.
    if transient:
        assert decision.action is not Action.CORRECT
    # Cancellation and an explicit retryable: false always end the step.
    if state.cancelled or declared_false:
        assert decision.action is Action.FAIL
    if decision.action is Action.RETRY:
        # The backoff never exceeds its cap unless the server's hint set the
        # wait, and a hint is capped at a day.
        assert decision.delay <= (MAX_RETRY_AFTER if hinted else profile.backoff.max)
        assert decision.delay >= timedelta(0)
        # No resend outlasts the step's deadline.
        if state.deadline is not None:
            assert decision.delay <= state.deadline
        assert state.attempt < (state.max_attempts or profile.max_attempts)
    # A decision is a function of its inputs.
    assert _decide(state, profile, seed) == (decision.action, decision.delay, decision.reason)


@settings(max_examples=500, deadline=None)
@given(states, st.sampled_from(PROFILES))
def test_correct_never_consumes_an_attempt_and_everything_else_does(
    state: AttemptState, profile: Profile
) -> None:
    decision = decide(state, profile, clock, random.Random(0))
    assert decision.consumes_attempt is (decision.action is not Action.CORRECT)


@settings(max_examples=300, deadline=None)
@given(
    st.builds(
        AttemptState,
        attempt=st.integers(-(2**31), 0),
        max_attempts=st.one_of(st.none(), st.integers(-(2**31), 0)),
    )
)
def test_out_of_range_counts_are_refused_naming_the_field(state: AttemptState) -> None:
    try:
        decide(state, PROFILES[0], clock)
    except PolicyInputError as exc:
        assert exc.field in {"attempt", "max_attempts"}
    else:
        raise AssertionError("an attempt below 1 was decided")


@settings(max_examples=1_000, deadline=None)
@given(st.text(max_size=300), st.integers(1, 200))
def test_shown_text_is_bounded_valid_and_stable(text: str, limit: int) -> None:
    shown = shown_text(text, limit)
    assert len(shown) <= limit + 1  # the ellipsis
    shown.encode("utf-8")  # no lone surrogate survives
    # Showing what was shown changes nothing: the gate is idempotent.
    assert shown_text(shown, limit + 1) == shown


def test_a_cut_inside_a_megabyte_word_is_cheap() -> None:
    # A regex anchored at the end of the text is tried from every position:
    # dropping the cut word that way took seconds on one long word.
    text = "eyJ-" * 262_144
    started = time.process_time()
    shown = shown_text(text, 1_000_000)
    assert time.process_time() - started < 1.0  # a hang guard, not a benchmark
    assert shown.endswith("…") and len(shown) < 1_000_000
