"""Unit tests of the pure core: each table is a rule from docs/policy.md."""

from __future__ import annotations

import random
import time
from dataclasses import replace
from datetime import timedelta

import pytest

from squawk.policy import (
    Action,
    AttemptState,
    BackoffConfig,
    Category,
    Failure,
    Jitter,
    PolicyInputError,
    Reason,
    builtin_policy,
    classify,
    decide,
    delay,
    parse_duration,
    redact,
    retry_after,
    status_from_text,
)
from squawk.policy.limits import MAX_ERROR_MESSAGE_CHARS

DEFAULT = builtin_policy().profile("default")
LLM = builtin_policy().profile("llm")
FIXED_NOW = 1_700_000_000.0
_SECOND = timedelta(seconds=1)


def clock() -> float:
    return FIXED_NOW


@pytest.mark.parametrize(
    ("attempt", "ms"),
    [(1, 542), (2, 1091), (3, 2028), (4, 3697), (5, 7233), (6, 9721), (7, 10000), (10, 9456)],
)
def test_sine_backoff_table(attempt: int, ms: int) -> None:
    assert delay(attempt, BackoffConfig()) == timedelta(milliseconds=ms)


@pytest.mark.parametrize("attempt", [1, 2, 5, 50, 10_000, 2**31 - 1])
@pytest.mark.parametrize("jitter", list(Jitter))
def test_backoff_never_exceeds_max(attempt: int, jitter: Jitter) -> None:
    cfg = BackoffConfig(jitter=jitter)
    wait = delay(attempt, cfg, random.Random(attempt))
    assert timedelta(0) <= wait <= cfg.max


def test_no_jitter_is_plain_exponential() -> None:
    cfg = BackoffConfig(jitter=Jitter.NONE)
    assert [delay(a, cfg).total_seconds() for a in (1, 2, 3, 4, 5, 6)] == [
        0.5,
        1.0,
        2.0,
        4.0,
        8.0,
        10.0,
    ]


def test_full_jitter_is_seeded_and_bounded_by_the_base() -> None:
    cfg = BackoffConfig(jitter=Jitter.FULL)
    first = [delay(3, cfg, random.Random(7)) for _ in range(3)]
    assert len(set(first)) == 1  # the same seed gives the same wait
    assert all(timedelta(0) <= w <= timedelta(seconds=2) for w in first)


def test_decorrelated_jitter_stays_between_initial_and_three_times_previous() -> None:
    cfg = BackoffConfig(jitter=Jitter.DECORRELATED)
    rng = random.Random(1)
    for _ in range(200):
        assert timedelta(milliseconds=500) <= delay(3, cfg, rng) <= timedelta(seconds=3)


def test_random_jitter_without_a_source_is_refused() -> None:
    with pytest.raises(ValueError, match="random source"):
        delay(1, BackoffConfig(jitter=Jitter.FULL))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("1s", timedelta(seconds=1)),
        ("1m30s", timedelta(seconds=90)),
        ("1.5s", timedelta(milliseconds=1500)),
        ("2h", timedelta(hours=2)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "5", "abc", "-1s", "1 s", "1x", "s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("Amadeus API error 400: INVALID CITY CODE", 400),
        ("HTTP status 429: rate limit exceeded", 429),
        ("status_code: 503", 503),
        ("Error 404 not found", 404),
        ("code: 12345", 0),
        ("error 600: nope", 0),
        ("error 099", 0),
        ("code: 999 then status 502", 502),
        ("no digits at all", 0),
        ("statuscode", 0),
    ],
)
def test_status_from_text(text: str, status: int) -> None:
    assert status_from_text(text) == status


def test_a_message_over_the_limit_is_refused_before_any_scan() -> None:
    hostile = "key=" + "a" * (MAX_ERROR_MESSAGE_CHARS - 3)
    with pytest.raises(PolicyInputError) as caught:
        classify(Failure(hostile), DEFAULT, clock)
    assert caught.value.field == "error_message"
    assert "a" * 100 not in str(caught.value)


def test_a_message_at_the_limit_is_scanned_in_bounded_time() -> None:
    # Worst cases for the pattern and the redactor: keywords followed by long
    # separator runs, and one huge token. Linear patterns finish in well under
    # a second on any machine; a backtracking one would not finish at all.
    hostile = ("status" + " " * 100 + ":") * 200 + "key=" + "a" * 40_000
    assert len(hostile) <= MAX_ERROR_MESSAGE_CHARS
    started = time.process_time()
    result = classify(Failure(hostile), DEFAULT, clock)
    assert result.upstream_status == 0
    assert "a" * 100 not in result.redacted_message
    assert time.process_time() - started < 30  # a hang guard, not a benchmark


@pytest.mark.parametrize(
    ("status", "tool", "category", "retryable"),
    [
        (400, 400, Category.INPUT_ERROR, False),
        (401, 401, Category.AUTH_ERROR, False),
        (403, 403, Category.AUTH_ERROR, False),
        (404, 400, Category.INPUT_ERROR, False),
        (405, 405, Category.INPUT_ERROR, False),
        (408, 502, Category.SERVICE_ERROR, True),
        (409, 400, Category.INPUT_ERROR, False),
        (410, 400, Category.INPUT_ERROR, False),
        (422, 400, Category.INPUT_ERROR, False),
        (429, 429, Category.RATE_LIMIT, True),
        (500, 502, Category.SERVICE_ERROR, True),
        (503, 502, Category.SERVICE_ERROR, True),
        (599, 502, Category.SERVICE_ERROR, True),
        (302, 502, Category.SERVICE_ERROR, False),
    ],
)
def test_status_table(status: int, tool: int, category: Category, retryable: bool) -> None:
    result = classify(Failure(http_status=status), DEFAULT, clock)
    assert (result.http_status, result.category, result.retryable) == (tool, category, retryable)
    assert result.upstream_status == status


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504, 529])
def test_llm_retryable_set(status: int) -> None:
    assert classify(Failure(http_status=status), LLM, clock).retryable
    assert decide(AttemptState(1, http_status=status), LLM, clock).action is Action.RETRY


@pytest.mark.parametrize("status", [400, 401, 404, 408, 501, 505, 507, 520, 599])
def test_llm_everything_else_is_terminal(status: int) -> None:
    assert not classify(Failure(http_status=status), LLM, clock).retryable
    decision = decide(AttemptState(1, http_status=status, correction_available=True), LLM, clock)
    assert (decision.action, decision.reason) == (Action.FAIL, Reason.NOT_RETRYABLE_STATUS)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, timedelta(seconds=7)),
        ({"retry-after": "0"}, timedelta(0)),
        ({"Retry-After": "Tue, 14 Nov 2023 22:13:30 GMT"}, timedelta(seconds=10)),
        ({"Retry-After": "Tue, 14 Nov 2023 22:13:00 GMT"}, timedelta(0)),
        ({"Retry-After": "1.5"}, timedelta(seconds=1.5)),
        ({"Retry-After": "-3"}, None),
        ({"Retry-After": "+3"}, None),
        ({"Retry-After": "later"}, None),
        ({"Retry-After": "٣"}, None),  # an Arabic-Indic digit is not ASCII
        ({"GRPC-Retry-Pushback-Ms": "120"}, timedelta(milliseconds=120)),
        ({"grpc-retry-pushback-ms": "-1"}, None),
        ({}, None),
    ],
)
def test_retry_after(headers: dict[str, str], expected: timedelta | None) -> None:
    # FIXED_NOW is 2023-11-14 22:13:20 UTC.
    assert retry_after(headers, clock) == expected


def test_retry_after_wins_over_backoff_and_is_checked_against_the_deadline() -> None:
    state = AttemptState(1, http_status=429, headers={"Retry-After": "4"})
    assert decide(state, DEFAULT, clock).delay == timedelta(seconds=4)
    late = AttemptState(
        1, http_status=429, headers={"Retry-After": "4"}, deadline=timedelta(seconds=3)
    )
    assert decide(late, DEFAULT, clock).reason is Reason.DEADLINE_EXCEEDED


HOUR = {"Retry-After": "3600"}


def test_a_wait_past_max_retry_wait_fails_without_a_deadline() -> None:
    """An executor with no deadline does not sleep an hour because a server
    asked it to: the step fails at once, naming the wait and the bound."""
    failed = decide(AttemptState(1, http_status=429, headers=HOUR), DEFAULT, clock)
    assert (failed.action, failed.reason, failed.delay) == (
        Action.FAIL,
        Reason.WAIT_TOO_LONG,
        timedelta(0),
    )
    assert "3600000 ms" in failed.explanation and "300000 ms" in failed.explanation
    # The profile's own bound, not the built-in one, judges it.
    patient = replace(DEFAULT, max_retry_wait=timedelta(hours=1))
    assert decide(AttemptState(1, http_status=429, headers=HOUR), patient, clock).delay == (
        timedelta(hours=1)
    )
    # A capability's bound judges a call that names it.
    strict = replace(DEFAULT, capabilities={"pay": replace(DEFAULT, max_retry_wait=_SECOND)})
    paid = AttemptState(1, http_status=503, headers={"Retry-After": "2"}, capability="pay")
    assert decide(paid, strict, clock).reason is Reason.WAIT_TOO_LONG
    assert decide(replace(paid, capability=""), strict, clock).delay == 2 * _SECOND


def test_a_deadline_judges_a_long_wait_instead_of_max_retry_wait() -> None:
    """The deadline is the caller's explicit word: a wait within it is
    honoured past the bound, one past it fails as past the deadline."""
    within = AttemptState(1, http_status=429, headers=HOUR, deadline=timedelta(hours=2))
    assert decide(within, DEFAULT, clock).delay == timedelta(hours=1)
    past = replace(within, deadline=timedelta(minutes=10))
    assert decide(past, DEFAULT, clock).reason is Reason.DEADLINE_EXCEEDED


def test_the_backoff_is_never_judged_by_max_retry_wait() -> None:
    """The bound is on what the server asks; the backoff's length is the
    profile's own max_delay."""
    slow = replace(
        DEFAULT,
        backoff=BackoffConfig(initial=timedelta(minutes=10), max=timedelta(minutes=10)),
        max_retry_wait=_SECOND,
    )
    decision = decide(AttemptState(1, http_status=503), slow, clock)
    assert (decision.action, decision.reason) == (Action.RETRY, Reason.TRANSIENT_STATUS)


@pytest.mark.parametrize("bound", [timedelta(0), timedelta(milliseconds=999), timedelta(hours=25)])
def test_max_retry_wait_out_of_bounds_is_refused(bound: timedelta) -> None:
    with pytest.raises(PolicyInputError) as info:
        replace(DEFAULT, max_retry_wait=bound)
    assert info.value.field == "max_retry_wait"


@pytest.mark.parametrize(
    ("state", "field"),
    [
        (AttemptState(0), "attempt"),
        (AttemptState(1, max_attempts=0), "max_attempts"),
        (AttemptState(1, http_status=700), "http_status"),
        (AttemptState(1, validation_retries_used=-1), "validation_retries_used"),
        (AttemptState(1, max_validation_retries=-2), "max_validation_retries"),
        (AttemptState(1, deadline=timedelta(seconds=-1)), "deadline"),
        (AttemptState(1, response_body=b"x" * (1024 * 1024 + 1)), "response_body"),
    ],
)
def test_invalid_state_names_the_field(state: AttemptState, field: str) -> None:
    with pytest.raises(PolicyInputError) as info:
        decide(state, DEFAULT, clock)
    assert info.value.field == field


def test_declared_retryable_is_reported() -> None:
    body = b'{"success": false, "error": {"retryable": false, "message": "no"}}'
    decision = decide(AttemptState(1, http_status=503, response_body=body), DEFAULT, clock)
    assert decision.declared_retryable is False
    assert decide(AttemptState(1, http_status=503), DEFAULT, clock).declared_retryable is None


def test_corrections_do_not_consume_attempts() -> None:
    state = AttemptState(3, http_status=400, correction_available=True)
    decision = decide(state, DEFAULT, clock)
    assert (decision.action, decision.consumes_attempt) == (Action.CORRECT, False)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abcdefgh", "eyJhbG"),
        ("url https://x.io/v1?apikey=ABCDEF123456&city=PAR", "ABCDEF123456"),
        ('{"api_key": "live_9a8b7c6d5e"}', "live_9a8b7c6d5e"),
        ("X-API-Key: 0123456789abcdef", "0123456789abcdef"),
        ("used sk-ant-api03-AAAABBBBCCCCDDDD", "AAAABBBBCCCCDDDD"),
        ("password=hunter2&user=bob", "hunter2"),
        ("ftp://alice:wonderland@files.example.com/x", "wonderland"),
        ("token: ghp_abcdefghijklmnopqrstuvwxyz0123", "ghp_abcdefghijklmnop"),
        ("AWS key AKIAIOSFODNN7EXAMPLE rejected", "AKIAIOSFODNN7EXAMPLE"),
        ("client_secret=s3cr3t-value", "s3cr3t-value"),
    ],
)
def test_redaction(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out
    assert "[REDACTED]" in out


def test_redaction_keeps_ordinary_text() -> None:
    text = "Amadeus API error 400: INVALID CITY CODE: PARIS (check_in 2026-04-01)"
    assert redact(text) == text
