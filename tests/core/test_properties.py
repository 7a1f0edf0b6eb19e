"""Invariants of the decision core over random inputs (hypothesis).

The vector file pins chosen cases; these properties must hold for every
AttemptState the core accepts, under both built-in profiles and every
jitter mode.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from squawk.policy import (
    Action,
    AttemptState,
    BackoffConfig,
    Jitter,
    Outcome,
    PolicyInputError,
    Profile,
    RateLimitConfig,
    Reason,
    UpstreamConfig,
    UpstreamState,
    admit,
    builtin_policy,
    decide,
    record_outcome,
)
from squawk.policy.cooldown import held
from squawk.policy.limits import MAX_RETRY_AFTER
from squawk.policy.pacer import hold_at_most
from squawk.policy.ratelimit import rate_limit_hint
from squawk.policy.text import shown_text
from squawk.policy.timing import seconds

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


# -- every hold bounded (squawk.policy.upstream, pacer, header_quota) ---------

# Rate-limit headers, hostile ones among them: a quota read wrong (one left
# for a day), a reset a week or a century away, nothing left, a bucket that
# refills, numbers out of range.
_QUOTA_NUMBERS = st.sampled_from(["0", "1", "2", "100", "4000", "5000", "1e9", "-1", "nan", "x"])
_RESETS = st.sampled_from(["0", "1", "2", "60", "86400", "604800", "3153600000", "1s", "-5"])


def _rate_headers() -> st.SearchStrategy[dict[str, str]]:
    generic = st.fixed_dictionaries(
        {"x-ratelimit-remaining": _QUOTA_NUMBERS, "x-ratelimit-reset": _RESETS},
        optional={"x-ratelimit-limit": _QUOTA_NUMBERS},
    )
    openai = st.fixed_dictionaries(
        {
            "x-ratelimit-limit-requests": _QUOTA_NUMBERS,
            "x-ratelimit-remaining-requests": _QUOTA_NUMBERS,
            "x-ratelimit-reset-requests": _RESETS,
        }
    )
    return st.one_of(st.just({}), generic, openai)


_RETRY_AFTERS = st.sampled_from([None, 0.5, 1.0, 2.5, 60.0, 86_400.0])
_COSTS = st.sampled_from([0.0, 1.0, 100.0, 1e9])
_RATES = st.sampled_from([None, 1 / 86_400, 0.0000116, 0.5, 100.0])
_TOKEN_RATES = st.sampled_from([None, 1 / 86_400, 1000.0])
_MAX_COOL_DOWNS = st.sampled_from([1.0, 60.0, 300.0, 3600.0])
_SHARES = st.sampled_from([1.0, 0.5, 1e-6])

_report = st.tuples(
    st.just("report"),
    st.sampled_from([200, 429, 503]),
    _rate_headers(),
    _RETRY_AFTERS,
    _COSTS,
    _COSTS,
)
_reload = st.tuples(st.just("reload"), _RATES, _TOKEN_RATES, _MAX_COOL_DOWNS)
_admit = st.tuples(st.just("admit"), _COSTS, _SHARES)
_HOLD_EVENTS = st.lists(
    st.tuples(st.floats(0, 400), st.one_of(_report, _reload, _admit)), min_size=1, max_size=40
)


def _upstream(rate: float | None, token_rate: float | None, max_cool_down: float) -> UpstreamConfig:
    return UpstreamConfig(
        max_cool_down=timedelta(seconds=max_cool_down),
        rate_limit=RateLimitConfig(rate=rate, token_rate=token_rate),
    )


@settings(max_examples=500, deadline=None)
@given(_HOLD_EVENTS)
def test_no_input_holds_the_upstream_past_its_max_cool_down(events: list[Any]) -> None:
    """No sequence of reports (any headers, Retry-After, cost), reloads
    (tiny rates among them) and Admits (any cost, any fleet share) makes
    the pod refuse or wait past max_cool_down after its last input: the
    cool-down and every hold end within it, a refusal's retry_after says
    at most it, and one max_cool_down after the last input (a grant's
    input is its start, at most max_queue_delay after it was asked) the
    pace starts a call at once."""
    config, state, now = _upstream(None, None, 300.0), UpstreamState(), 0.0
    last = now
    for step, event in events:
        now += step
        # The last input: this event, or a start granted later than it.
        last = max(last, now)
        bound = config.max_cool_down
        if event[0] == "report":
            _, status, headers, retry_after, cost, estimated = event
            outcome = Outcome(
                status < 400,
                status,
                retry_after=None if retry_after is None else timedelta(seconds=retry_after),
                cost=cost,
                estimated=estimated,
                hint=rate_limit_hint(headers, NOW + now),
            )
            state = record_outcome(state, config, now, outcome)
        elif event[0] == "reload":
            was, config = config, _upstream(*event[1:])
            if config.max_cool_down < was.max_cool_down:  # as the daemon's reload does
                state = replace(
                    state,
                    cool_until=held(state.cool_until, now, config.max_cool_down),
                    pacer=hold_at_most(
                        state.pacer, held(state.pacer.quota.hold_until, now, config.max_cool_down)
                    ),
                )
            bound = config.max_cool_down
        else:
            _, cost, share = event
            state, answer = admit(state, config, now, cost=cost, share=share)
            if answer.allowed:
                assert answer.wait <= config.rate_limit.max_queue_delay
                last = max(last, now + seconds(answer.wait))
            elif answer.reason is not Reason.CIRCUIT_OPEN:
                assert answer.retry_after is not None and answer.retry_after <= bound
        assert state.cool_until <= now + seconds(bound)
        assert state.pacer.quota.hold_until <= now + seconds(bound)
    free = last + seconds(config.max_cool_down)
    state, answer = admit(state, config, free)
    if answer.reason is not Reason.CIRCUIT_OPEN:
        assert (answer.allowed, answer.wait) == (True, timedelta(0))
