"""Step runners: run the user's function and let the policy steer failures.

The bookkeeping (attempt numbers, correction budget, the request to send,
the error hook's verdict) lives once in `_Attempts`; `run_step` (asyncio)
and `run_step_sync` (threads) only differ in how they call, wait and get
cancelled. The Go and TypeScript runners follow the same contract, pinned
by the shared runner vectors.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import NoReturn, TypeVar

from squawk.policy import (
    Action,
    Criticality,
    Fairness,
    PolicyInputError,
    Profile,
    Reason,
    delay,
)
from squawk.policy.fair import MAX_WEIGHT
from squawk.policy.limits import (
    MAX_ADMIT_DEADLINE,
    MAX_COST,
    MAX_HEADER_NAME_CHARS,
    MAX_HEADER_VALUE_CHARS,
    MAX_HEADERS,
    MAX_NAME_CHARS,
    check_chars,
    check_number,
)
from squawk.policy.outcome import check_cost
from squawk.v1 import policy_pb2 as pb

from ._admission import Admission
from ._client import AsyncSquawkClient, SquawkClient
from ._decision import Decision
from ._errors import SquawkInputError, StepError, StepFailed
from ._leases import Leases

__all__ = [
    "ErrorInfo",
    "StepCancelled",
    "StepOptions",
    "Tier",
    "bounded_headers",
    "run_step",
    "run_step_sync",
]

P = TypeVar("P")
T = TypeVar("T")


class StepCancelled(Exception):
    """The caller cancelled the step (sync runner); nothing is retried after it."""


class Tier(enum.Enum):
    """The error hook's verdict on a decision."""

    # Follow the decision.
    DEFAULT = "default"
    # Resend the same parameters even when the decision said CORRECT or FAIL:
    # after the Retry-After, else the default backoff; never after
    # cancellation, past the deadline or past the attempt budget.
    RETRY = "retry"
    # End the step even when the decision said RETRY or CORRECT.
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """What the error hook is shown after each failed attempt."""

    # The 1-based number of the attempt that failed.
    attempt: int
    corrections_used: int
    error: BaseException
    # What was sent to DecideRetry.
    request: pb.DecideRetryRequest
    # The policy's answer (the daemon's or the local fallback's).
    decision: Decision


@dataclass(frozen=True)
class StepOptions:
    """Per-step settings; None means "the profile's default"."""

    max_attempts: int | None = None
    # 0 is a real budget: no correction at all.
    max_validation_retries: int | None = None
    # Total time budget for the step, measured from the first attempt.
    deadline: timedelta | None = None
    capability: str = ""
    upstream: str = ""
    profile: str = ""
    hitl_approved: bool = False
    delegated_orchestrator: bool = False
    # The step's estimated cost in the upstream's token units (an LLM call's
    # prompt plus expected completion tokens): sent with Admit for a token
    # rate limit and reported with the outcome. 0 = unknown; finite, 0 to 1e9.
    cost: float = 0.0
    # How much the step matters when the upstream's pace cannot serve every
    # call (sent with Admit; the lower levels are shed first). None: the
    # criticality of the step this one runs inside (`criticality()`), else
    # CRITICAL.
    criticality: Criticality | None = None
    # Whose step this is (a tenant, a workflow) and its weight, sent with
    # Admit: while the upstream's pace cannot serve every call, a key asking
    # less than its share keeps all it asks and the others share the rest by
    # weight. "" = none; weight 0 = 1, at most 100.
    fairness_key: str = ""
    fairness_weight: float = 0.0

    def __post_init__(self) -> None:
        try:
            check_cost("cost", self.cost)  # also refuses NaN
            check_chars("fairness_key", self.fairness_key, MAX_NAME_CHARS)
            check_number("fairness_weight", self.fairness_weight, MAX_WEIGHT, zero=True)
        except PolicyInputError as bad:
            raise SquawkInputError(bad.field, str(bad)) from None


# The criticality of the step running now, which the steps it runs inherit
# (a contextvar: asyncio tasks and `contextvars.copy_context()` carry it).
_CRITICALITY: ContextVar[Criticality | None] = ContextVar("squawk_criticality", default=None)


def criticality() -> Criticality | None:
    """The criticality of the step running now (set by its options, or
    inherited from the step it runs inside); None outside any step that
    named one."""
    return _CRITICALITY.get()


# The header that carries a step's criticality to the next hop (the HTTP
# transports send it; docs/clients/README.md, "The criticality header").
CRITICALITY_HEADER = "squawk-criticality"
_LEVELS = {level.name: level for level in Criticality}


def criticality_from_headers(
    headers: Mapping[str, str] | Iterable[tuple[str, str]],
) -> Criticality | None:
    """The criticality a request's squawk-criticality header names, for
    the steps a service runs for it (StepOptions.criticality): the name and
    the value in any case, spaces trimmed. Absent, empty, unknown, or
    repeated with different levels (a mapping's values joined by commas
    count as repeats): None, so the service keeps its own default."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    named: set[Criticality] = set()
    for name, value in pairs:
        if name.lower() != CRITICALITY_HEADER:
            continue
        for part in value.split(","):
            text = part.strip(" \t")
            # ASCII only: str.upper() folds some other letters (a long s) into one.
            level = _LEVELS.get(text.upper()) if text.isascii() else None
            if level is None:
                return None
            named.add(level)
    return named.pop() if len(named) == 1 else None


async def _inside(level: Criticality | None, call: Awaitable[T]) -> T:
    """Await the step's `call` with `level` as the criticality its own steps inherit."""
    token = _CRITICALITY.set(level)
    try:
        return await call
    finally:
        _CRITICALITY.reset(token)


def _inside_sync(level: Criticality | None, step: Callable[[P], T], params: P) -> T:
    token = _CRITICALITY.set(level)
    try:
        return step(params)
    finally:
        _CRITICALITY.reset(token)


# Outcome.latency's bound, as a deadline's.
_MAX_LATENCY = MAX_ADMIT_DEADLINE
# The longest paced wait a step without a deadline sleeps (Admit's bound).
_MAX_WAIT = MAX_ADMIT_DEADLINE

# A forced resend would revive what these reasons ended for good.
_FINAL = frozenset({Reason.CANCELLED, Reason.ATTEMPTS_EXHAUSTED, Reason.DEADLINE_EXCEEDED})


def _answered(d: Decision) -> str:
    return f"the policy had answered ACTION_{d.action.name}, REASON_{d.reason.name}"


def _real_cost(result: T, cost_of: Callable[[T], float] | None, estimated: float) -> float:
    """The success's cost as `cost_of` reads it from the result; the estimate
    when there is no hook, or it raises or answers out of bounds: a report's
    bookkeeping never fails a step that succeeded (the TypeScript runner's
    costOf reads the same)."""
    if cost_of is None:
        return estimated
    try:
        cost = float(cost_of(result))
    except Exception:
        return estimated
    return cost if 0.0 <= cost <= MAX_COST else estimated


# How many of a result's headers are looked at, at most: a flood is cut here.
_MAX_HEADERS_SCANNED = 1024


def _pace_headers(result: T, headers_of: Callable[[T], Mapping[str, str]] | None) -> dict[str, str]:
    """The rate-limit headers of a success, as `headers_of` reads them from
    the result, for the pod's pace (Outcome.headers). Only the names the
    daemon reads as rate-limit headers on a success (holding "ratelimit" or
    "rate-limit", as squawk.wire.hint tells them) and within its bounds are
    kept, so that a header flood or one odd value never gets a batch of
    outcomes refused; nothing when the hook raises."""
    if headers_of is None:
        return {}
    try:
        return bounded_headers(headers_of(result), _is_rate_limit)
    except Exception:
        return {}


def _is_rate_limit(lower: str) -> bool:
    return "ratelimit" in lower or "rate-limit" in lower


def bounded_headers(headers: Mapping[str, str], wanted: Callable[[str], bool]) -> dict[str, str]:
    """The headers whose lower-cased name `wanted` keeps, within the daemon's
    bounds (count, name and value length, UTF-8): what a caller copies from a
    response it does not control, so that one odd header never gets a
    request refused."""
    kept: dict[str, str] = {}
    for name, value in itertools.islice(headers.items(), _MAX_HEADERS_SCANNED):
        if (
            wanted(name.lower())
            and len(name) <= MAX_HEADER_NAME_CHARS
            and len(value) <= MAX_HEADER_VALUE_CHARS
            and _encodable(name)
            and _encodable(value)
        ):
            kept[name] = value
            if len(kept) == MAX_HEADERS:
                break
    return kept


def _encodable(text: str) -> bool:
    # A protobuf string must be valid UTF-8 (a lone surrogate is not).
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


class _Attempts:
    def __init__(self, options: StepOptions, correction_available: bool, profile: Profile) -> None:
        self.options = options
        self.correction_available = correction_available
        self.profile = profile
        self.budget = profile.max_attempts if options.max_attempts is None else options.max_attempts
        self.attempt = 1
        self.corrections = 0
        self.calls = 1
        self.started = time.monotonic()
        # The upstream state the step's dispatches share, as Admit names it.
        self.key = (options.profile, options.upstream, options.capability)
        self.criticality = options.criticality or _CRITICALITY.get()
        self.fairness = (
            Fairness(options.fairness_key, options.fairness_weight)
            if options.fairness_key or options.fairness_weight
            else None
        )
        # The step's last error, the cause of a FAIL that comes before a call.
        self.last_error: BaseException | None = None
        # The admission of the dispatch now out (AdmitResponse.admission_id),
        # which its outcome names: only then does it count for the learned
        # concurrency limit (its slot freed, its latency read).
        self.admission_id = ""
        # Whether that dispatch started on a lease of paced starts: its
        # success may wait a lease to be reported (squawk_client._outbox).
        self.patient = False
        # ... and whether it holds a slot of a declared cap: its success is
        # reported at once, for the caller waiting for the slot.
        self.urgent = False

    def request(self, exc: BaseException) -> pb.DecideRetryRequest:
        o = self.options
        request = pb.DecideRetryRequest(
            attempt=self.attempt,
            validation_retries_used=self.corrections,
            correction_available=self.correction_available,
            hitl_approved=o.hitl_approved,
            delegated_orchestrator=o.delegated_orchestrator,
            capability=o.capability,
            upstream=o.upstream,
            profile=o.profile,
            admission_id=self.admission_id,
        )
        if isinstance(exc, StepError):
            request.http_status = exc.http_status
            request.transport_failure = exc.transport_failure
            request.response_body = exc.body
            request.headers.update(exc.headers)
        else:
            request.transport_failure = True
        if o.max_attempts is not None:
            request.max_attempts = o.max_attempts
        if o.max_validation_retries is not None:
            request.max_validation_retries = o.max_validation_retries
        if o.deadline is not None:
            request.deadline.FromTimedelta(self.deadline_left())
        return request

    def settle(
        self,
        decision: Decision,
        exc: BaseException,
        request: pb.DecideRetryRequest,
        on_error: Callable[[ErrorInfo], Tier] | None,
    ) -> Decision:
        """The decision after the error hook's verdict."""
        if on_error is None:
            return decision
        info = ErrorInfo(self.attempt, self.corrections, exc, request, decision)
        tier = on_error(info)
        if tier is Tier.FAIL and decision.action is not Action.FAIL:
            return replace(
                decision,
                action=Action.FAIL,
                delay=timedelta(0),
                consumes_attempt=True,
                explanation=f"The error hook ended the step; {_answered(decision)}.",
            )
        if (
            tier is Tier.RETRY
            and decision.action is not Action.RETRY
            and decision.reason not in _FINAL
            and self.attempt < self.budget
        ):
            c = decision.classification
            wait = (
                c.retry_after.ToTimedelta()
                if c.HasField("retry_after")
                else delay(self.attempt, self.profile.backoff)
            )
            ms = round(wait.total_seconds() * 1000)
            return replace(
                decision,
                action=Action.RETRY,
                delay=wait,
                consumes_attempt=True,
                # The hook's own answer: no refusal of the daemon's to explain.
                decision_id="",
                explanation=(
                    f"The error hook asked for a resend; {_answered(decision)}. Resend the "
                    f"same payload after {ms} ms, attempt {self.attempt + 1} of {self.budget}."
                ),
            )
        return decision

    def refused(self, admission: Admission, refusals: int) -> None:
        """Raise StepFailed when a refused dispatch may not wait for admission."""
        o = self.options
        reason = f"REASON_{admission.reason.name}"
        wait = admission.retry_after
        if admission.reason is Reason.UPSTREAM_SATURATED:
            # The pace cannot start the call in time: shed it at the source,
            # at once (no wait, no DecideRetry). The daemon names the limit
            # (the queue's, the deadline, the concurrency limit); an older
            # one does not, and the deadline is not always it.
            cause = admission.explanation or (
                "The upstream's pace cannot start it within the step's deadline "
                "or the queue's limit."
            )
            why = f"The pod refused the dispatch to {o.upstream}: {reason}. {cause}"

        elif o.deadline is not None and wait > self.deadline_left():
            why = (
                f"The pod refused the dispatch to {o.upstream}: {reason}; it admits again in "
                f"{round(wait.total_seconds() * 1000)} ms, past the step's deadline."
            )
        elif refusals > self.budget and admission.reason is not Reason.IN_FLIGHT_CAP:
            # A full in-flight cap is waited out as long as the deadline
            # allows: its refusals are a semaphore's queue, not a failure.
            why = (
                f"The pod refused the dispatch to {o.upstream} {refusals} times in a row: {reason}."
            )
        else:
            return
        self.fail_before_call(admission.reason, why, admission.decision_id)

    def paced(self, admission: Admission) -> None:
        """Raise StepFailed when an allowed dispatch's paced wait passes the
        deadline, or, without one, a day (no daemon paces that far: the Go
        and TypeScript runners refuse it too, rather than sleep on it)."""
        self.admission_id = admission.admission_id
        self.patient = admission.spacing > timedelta(0)
        self.urgent = admission.holds_slot
        o = self.options
        limit = _MAX_WAIT if o.deadline is None else self.deadline_left()
        if admission.wait <= limit:
            return
        ms = round(admission.wait.total_seconds() * 1000)
        past = "a day" if o.deadline is None else "the step's deadline"
        why = (
            f"The pod paces the dispatch to {o.upstream} to start in {ms} ms, past "
            f"{past}: REASON_UPSTREAM_SATURATED."
        )
        self.fail_before_call(Reason.UPSTREAM_SATURATED, why)

    def fail_before_call(self, reason: Reason, why: str, decision_id: str = "") -> NoReturn:
        decision = Decision(
            Action.FAIL,
            timedelta(0),
            reason,
            why,
            True,
            pb.ClassifyResponse(),
            decision_id=decision_id,
        )
        raise StepFailed(decision, self.calls - 1) from self.last_error

    def admit_deadline(self) -> timedelta | None:
        return None if self.options.deadline is None else self.deadline_left()

    def deadline_left(self) -> timedelta:
        assert self.options.deadline is not None
        left = self.options.deadline - timedelta(seconds=time.monotonic() - self.started)
        return max(left, timedelta(0))

    def success(
        self,
        latency: float,
        result: T,
        cost_of: Callable[[T], float] | None,
        headers_of: Callable[[T], Mapping[str, str]] | None,
    ) -> pb.Outcome | None:
        """What to report after a successful dispatch (nothing without an upstream)."""
        o = self.options
        if not o.upstream:
            return None
        done = pb.Outcome(
            upstream=o.upstream,
            capability=o.capability,
            profile=o.profile,
            success=True,
            cost=_real_cost(result, cost_of, o.cost),
            estimated_cost=o.cost,
            headers=_pace_headers(result, headers_of),
            admission_id=self.admission_id,
        )
        # Outcome.latency is bounded to a day (a step may run longer).
        done.latency.FromTimedelta(min(timedelta(seconds=latency), _MAX_LATENCY))
        return done

    def failed(self, leases: Leases) -> None:
        """A dispatch failed: the key's spare permits go (see _leases)."""
        if self.options.upstream:
            leases.revoke(self.key)

    def advance(self, decision: Decision, exc: BaseException) -> None:
        self.last_error = exc
        if decision.action is Action.RETRY:
            self.attempt += 1
        elif decision.action is Action.CORRECT:
            # Corrections spend the correction budget, never an attempt.
            self.corrections += 1
        else:
            raise StepFailed(decision, self.calls) from exc
        self.calls += 1


async def run_step(
    client: AsyncSquawkClient,
    step: Callable[[P], Awaitable[T]],
    params: P,
    *,
    correct: Callable[[P, BaseException, Decision], Awaitable[P]] | None = None,
    on_error: Callable[[ErrorInfo], Tier] | None = None,
    options: StepOptions | None = None,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    cost_of: Callable[[T], float] | None = None,
    headers_of: Callable[[T], Mapping[str, str]] | None = None,
) -> T:
    """Run `step(params)` until it succeeds or the policy says FAIL.

    On RETRY, waits the decided delay and resends the same params; on
    CORRECT, resends `await correct(params, error, decision)` without
    spending an attempt; `on_error` has the final say after each decision.
    Cancelling the task cancels the step or the wait at once and is never
    retried. On FAIL, raises StepFailed (with the decision) from the last error.

    With `options.upstream`, each dispatch is admitted by the pod first: a
    paced `wait` is slept, and a saturated upstream (or a wait past the
    deadline) ends the step at once with REASON_UPSTREAM_SATURATED. Each
    success is reported (in a batch) with `cost_of(result)` as its real
    cost, else `options.cost`, and the rate-limit headers of
    `headers_of(result)`, which set the upstream's pace.
    """
    state = _Attempts(options or StepOptions(), correct is not None, client.fallback_profile)
    upstream = state.options.upstream
    while True:
        if upstream:
            await _admitted(client, state, sleep)
        try:
            started = time.monotonic()
            result = await _inside(state.criticality, step(params))
        except Exception as exc:
            state.failed(client._policy.leases)
            request = state.request(exc)
            decision = await client.decide_retry(request)
            decision = state.settle(decision, exc, request, on_error)
            state.advance(decision, exc)
            if decision.action is Action.CORRECT:
                assert correct is not None
                params = await correct(params, exc, decision)
            else:
                await sleep(decision.delay.total_seconds())
        else:
            if done := state.success(time.monotonic() - started, result, cost_of, headers_of):
                client._report_later(done, state.patient, state.urgent)
            return result


async def _admitted(
    client: AsyncSquawkClient, state: _Attempts, sleep: Callable[[float], Awaitable[object]]
) -> None:
    """Return once the pod admits the dispatch and its paced wait is over;
    raise StepFailed when it may not wait."""
    o = state.options
    refusals = 0
    while not (
        admission := await client._admit_step(
            state.key,
            deadline=state.admit_deadline(),
            cost=o.cost,
            criticality=state.criticality,
            fairness=state.fairness,
        )
    ).allowed:
        refusals += 1
        state.refused(admission, refusals)
        await sleep(admission.retry_after.total_seconds())
    state.paced(admission)
    if admission.wait > timedelta(0):
        await sleep(admission.wait.total_seconds())


def run_step_sync(
    client: SquawkClient,
    step: Callable[[P], T],
    params: P,
    *,
    correct: Callable[[P, BaseException, Decision], P] | None = None,
    on_error: Callable[[ErrorInfo], Tier] | None = None,
    options: StepOptions | None = None,
    cancel: threading.Event | None = None,
    sleep: Callable[[float], object] | None = None,
    cost_of: Callable[[T], float] | None = None,
    headers_of: Callable[[T], Mapping[str, str]] | None = None,
) -> T:
    """The blocking twin of `run_step`; setting `cancel` aborts a wait at once.

    `sleep` replaces the wait (a seam for tests); `cancel` is then checked
    after it returns.
    """
    state = _Attempts(options or StepOptions(), correct is not None, client.fallback_profile)
    cancel = cancel or threading.Event()

    def wait(seconds: float) -> bool:
        """Wait; True when cancelled."""
        if sleep is None:
            return cancel.wait(seconds)
        sleep(seconds)
        return cancel.is_set()

    while True:
        if state.options.upstream:
            _admitted_sync(client, state, wait)
        try:
            started = time.monotonic()
            result = _inside_sync(state.criticality, step, params)
        except Exception as exc:
            state.failed(client._policy.leases)
            request = state.request(exc)
            request.cancelled = cancel.is_set()
            decision = client.decide_retry(request)
            decision = state.settle(decision, exc, request, on_error)
            state.advance(decision, exc)
            if decision.action is Action.CORRECT:
                assert correct is not None
                params = correct(params, exc, decision)
                continue
            if wait(decision.delay.total_seconds()):
                raise StepCancelled("cancelled while waiting to retry") from exc
        else:
            if done := state.success(time.monotonic() - started, result, cost_of, headers_of):
                client._report_later(done, state.patient, state.urgent)
            return result


def _admitted_sync(client: SquawkClient, state: _Attempts, wait: Callable[[float], bool]) -> None:
    o = state.options
    refusals = 0
    while not (
        admission := client._admit_step(
            state.key,
            deadline=state.admit_deadline(),
            cost=o.cost,
            criticality=state.criticality,
            fairness=state.fairness,
        )
    ).allowed:
        refusals += 1
        state.refused(admission, refusals)
        if wait(admission.retry_after.total_seconds()):
            raise StepCancelled("cancelled while waiting for admission")
    state.paced(admission)
    if admission.wait > timedelta(0) and wait(admission.wait.total_seconds()):
        raise StepCancelled("cancelled while waiting for the upstream's pace")
