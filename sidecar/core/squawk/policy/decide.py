"""Routing: what the executor does after a failed attempt.

The rules run in a fixed order and the first that applies decides:
cancellation, the component's explicit refusal, terminal statuses, single
dispatch, transient failures (resend unchanged), other 4xx (correct), and
everything else fails. A resend is refused when the server's
grpc-retry-pushback-ms asks not to retry (gRFC A6; see headers.py) or its
x-should-retry says false, before the attempt count, as grpc-go's
shouldRetry reads the pushback before the budget; x-should-retry: true
resends a status that is neither transient nor terminal. The deadline guard
applies to every resend.

The wait is the server's hint (headers.wait_hint) when there is one. A 429
without one whose rate-limit headers say a quota is spent (remaining 0) with
a reset waits until that reset (ratelimit.spent_quota_wait), as GitHub
documents for its headers and octokit's throttling plugin does; else the
backoff. A spent quota on another status says nothing of why it failed, so
only the status that means "throttled" reads it.

A wait the server asks for is capped at a day (MAX_RETRY_AFTER). With a
deadline the deadline guard judges it: the deadline is the caller's
explicit word, so a wait within it is honoured however long. Without one, a wait past the profile's
max_retry_wait (5 min by default) fails with WAIT_TOO_LONG instead, as
openai-python and openai-go refuse to retry past their own bound (see
docs/policy.md). The backoff is never judged by it: its length is the
profile's own word (backoff.max_delay), not the server's.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta

from .backoff import delay
from .classify import check_status, classify_parts
from .envelope import read_envelope
from .headers import pushback_refuses, should_retry, wait_hint
from .limits import MAX_NAME_CHARS, check_chars, check_headers
from .profiles import DEFAULT_MAX_BODY_BYTES, Profile
from .ratelimit import spent_quota_wait
from .types import (
    Action,
    AttemptState,
    Classification,
    Decision,
    PolicyInputError,
    Reason,
)

__all__ = ["deadline_exceeded", "decide", "resend_phrase", "validate"]

_ZERO = timedelta(0)
_ONE_MS = timedelta(milliseconds=1)


def validate(state: AttemptState, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
    """Raise PolicyInputError naming the first field the policy cannot accept."""
    if state.attempt < 1:
        raise PolicyInputError("attempt", f"must be >= 1 (1-based), got {state.attempt}")
    if state.max_attempts is not None and state.max_attempts < 1:
        raise PolicyInputError("max_attempts", f"must be >= 1 when set, got {state.max_attempts}")
    check_status(state.http_status)
    if state.validation_retries_used < 0:
        raise PolicyInputError(
            "validation_retries_used", f"must be >= 0, got {state.validation_retries_used}"
        )
    if state.max_validation_retries is not None and state.max_validation_retries < 0:
        raise PolicyInputError(
            "max_validation_retries", f"must be >= 0 when set, got {state.max_validation_retries}"
        )
    if state.deadline is not None and state.deadline < _ZERO:
        raise PolicyInputError("deadline", "must not be negative")
    if len(state.response_body) > max_body_bytes:
        raise PolicyInputError(
            "response_body",
            f"{len(state.response_body)} bytes is over the limit of {max_body_bytes} bytes",
        )
    check_headers(state.headers)
    check_chars("capability", state.capability, MAX_NAME_CHARS)
    check_chars("upstream", state.upstream, MAX_NAME_CHARS)


def _ms(wait: timedelta) -> int:
    return round(wait / _ONE_MS)


def decide(
    state: AttemptState,
    profile: Profile,
    clock: Callable[[], float],
    rng: random.Random | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> Decision:
    validate(state, max_body_bytes)
    profile = profile.for_capability(state.capability)
    envelope = read_envelope(state.response_body)
    seen = classify_parts(
        envelope.message, state.http_status, state.transport_failure, state.headers, profile, clock
    )
    declared = envelope.retryable
    status = state.http_status
    transport = state.transport_failure or status == 0

    def fail(reason: Reason, why: str) -> Decision:
        return Decision(Action.FAIL, _ZERO, reason, why, True, seen, declared)

    if state.cancelled:
        return fail(
            Reason.CANCELLED, "The step was cancelled; nothing is retried after cancellation."
        )
    if declared is False:
        return fail(
            Reason.EXPLICIT_NOT_RETRYABLE,
            "The component declared error.retryable=false, which stops every same-step retry.",
        )
    if not transport and status in profile.terminal_statuses:
        return fail(
            Reason.TERMINAL_STATUS,
            f"HTTP {status} is an authentication or method error; retrying cannot fix it.",
        )
    if state.delegated_orchestrator:
        return fail(
            Reason.SINGLE_DISPATCH,
            "A delegated orchestrator is dispatched exactly once; it is never retried here.",
        )
    if transport or status in profile.transient_statuses:
        return _resend(state, profile, seen, declared, transport, clock, rng)
    if should_retry(state.headers):
        return _resend(state, profile, seen, declared, transport, clock, rng, marked=True)
    if profile.corrections and 400 <= status < 500:
        return _correct(state, profile, seen, declared)
    return fail(
        Reason.NOT_RETRYABLE_STATUS,
        f"HTTP {status} is not in profile {profile.name!r}'s retryable set.",
    )


def _resend(
    state: AttemptState,
    profile: Profile,
    seen: Classification,
    declared: bool | None,
    transport: bool,
    clock: Callable[[], float],
    rng: random.Random | None,
    *,
    marked: bool = False,
) -> Decision:
    reason = Reason.TRANSPORT_FAILURE if transport else Reason.TRANSIENT_STATUS
    what = resend_phrase(transport, state.http_status)
    if marked:
        what = f"HTTP {state.http_status} is marked retryable by the server's x-should-retry"
    refusal = None
    if pushback_refuses(state.headers):
        refusal = "grpc-retry-pushback-ms asks not to retry (a negative or unparsable value)"
    elif not transport and should_retry(state.headers) is False:
        refusal = "x-should-retry: false asks not to retry"
    if refusal is not None:
        return Decision(
            Action.FAIL,
            _ZERO,
            Reason.SERVER_PUSHBACK,
            f"{what}, but the server's {refusal}.",
            True,
            seen,
            declared,
        )
    max_attempts = profile.max_attempts if state.max_attempts is None else state.max_attempts
    if state.attempt >= max_attempts:
        return Decision(
            Action.FAIL,
            _ZERO,
            Reason.ATTEMPTS_EXHAUSTED,
            f"{what}, but attempt {state.attempt} of {max_attempts} was the last.",
            True,
            seen,
            declared,
        )
    wait, source, asker = _wait(state, profile, seen, transport, clock, rng)
    past = deadline_exceeded(what, wait, state.deadline, seen, declared)
    if past is not None:
        return past
    if asker is not None and state.deadline is None and wait > profile.max_retry_wait:
        return Decision(
            Action.FAIL,
            _ZERO,
            Reason.WAIT_TOO_LONG,
            f"{what}, but {asker} asks for {_ms(wait)} ms, past the profile's "
            f"max_retry_wait of {_ms(profile.max_retry_wait)} ms and there is no "
            "deadline to judge it by.",
            True,
            seen,
            declared,
        )
    return Decision(
        Action.RETRY,
        wait,
        reason,
        f"{what}; resend the same payload after {_ms(wait)} ms ({source}), "
        f"attempt {state.attempt + 1} of {max_attempts}.",
        True,
        seen,
        declared,
    )


def _wait(
    state: AttemptState,
    profile: Profile,
    seen: Classification,
    transport: bool,
    clock: Callable[[], float],
    rng: random.Random | None,
) -> tuple[timedelta, str, str | None]:
    """A resend's wait, where it came from (for the explanation) and, when
    the server asked for it, who asked (None for the backoff)."""
    if seen.retry_after is not None:
        # The wait is the classification's; which header gave it is asked
        # of the parser that chose it, not guessed here.
        hint = wait_hint(state.headers, clock)
        if hint is None:
            return seen.retry_after, "backoff", None
        asker = f"the server's {hint[1]}"
        return seen.retry_after, asker, asker
    if not transport and state.http_status == 429:
        spent = spent_quota_wait(state.headers, clock())
        if spent is not None:
            return (
                spent[0],
                f"the server's {spent[1]}, remaining 0",
                f"the server's {spent[1]} (remaining 0)",
            )
    return delay(state.attempt, profile.backoff, rng), "backoff", None


def resend_phrase(transport: bool, status: int) -> str:
    """How a resend's explanation names the failure it resends."""
    return "The call failed in transport" if transport else f"HTTP {status} is transient"


def deadline_exceeded(
    what: str,
    wait: timedelta,
    deadline: timedelta | None,
    seen: Classification,
    declared: bool | None,
) -> Decision | None:
    """The deadline guard, written once: a wait longer than the `deadline`
    left fails the step with DEADLINE_EXCEEDED instead of sleeping past it
    (a wait equal to it is allowed); None when the wait fits. decide()
    applies it to every resend, guard_retry() to a wait the upstream's
    cool-down stretched."""
    if deadline is None or wait <= deadline:
        return None
    return Decision(
        Action.FAIL,
        _ZERO,
        Reason.DEADLINE_EXCEEDED,
        f"{what}, but the {_ms(wait)} ms wait would outlast the "
        f"{_ms(deadline)} ms left before the step's deadline.",
        True,
        seen,
        declared,
    )


def _correct(
    state: AttemptState, profile: Profile, seen: Classification, declared: bool | None
) -> Decision:
    status = state.http_status
    budget = (
        profile.max_validation_retries
        if state.max_validation_retries is None
        else state.max_validation_retries
    )
    if state.hitl_approved:
        reason, why = (
            Reason.HITL_PROTECTED,
            f"HTTP {status} on human-approved inputs; they are never rewritten or resent.",
        )
    elif not state.correction_available:
        reason, why = (
            Reason.NO_CORRECTION_AVAILABLE,
            f"HTTP {status} needs corrected parameters and no analyzer or correction hook "
            "is enabled; a non-transient 4xx is never resent unchanged.",
        )
    elif state.validation_retries_used >= budget:
        reason, why = (
            Reason.CORRECTION_BUDGET_EXHAUSTED,
            f"HTTP {status} needs corrected parameters, but {state.validation_retries_used} "
            f"of {budget} corrections are already used.",
        )
    else:
        return Decision(
            Action.CORRECT,
            _ZERO,
            Reason.CORRECTION_ELIGIBLE,
            f"HTTP {status} is an input error; ask for corrected parameters "
            f"(correction {state.validation_retries_used + 1} of {budget}, "
            "not counted as an attempt).",
            False,
            seen,
            declared,
        )
    return Decision(Action.FAIL, _ZERO, reason, why, True, seen, declared)
