"""Step runners: run the user's function and let the policy steer failures.

The bookkeeping (attempt numbers, correction budget, the request to send)
lives once in `_Attempts`; `run_step` (asyncio) and `run_step_sync` (threads)
only differ in how they call, wait and get cancelled.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from squawk.policy import Action
from squawk.v1 import policy_pb2 as pb

from ._client import AsyncSquawkClient, SquawkClient
from ._decision import Decision
from ._errors import StepError, StepFailed

__all__ = ["StepCancelled", "StepOptions", "run_step", "run_step_sync"]

P = TypeVar("P")
T = TypeVar("T")


class StepCancelled(Exception):
    """The caller cancelled the step (sync runner); nothing is retried after it."""


@dataclass(frozen=True)
class StepOptions:
    """Per-step settings; None means "the daemon's profile default"."""

    max_attempts: int | None = None
    max_validation_retries: int | None = None
    # Total time budget for the step, measured from the first attempt.
    deadline: timedelta | None = None
    capability: str = ""
    upstream: str = ""
    profile: str = ""
    hitl_approved: bool = False
    delegated_orchestrator: bool = False


class _Attempts:
    def __init__(self, options: StepOptions, correction_available: bool) -> None:
        self.options = options
        self.correction_available = correction_available
        self.attempt = 1
        self.corrections = 0
        self.started = time.monotonic()

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
            left = o.deadline - timedelta(seconds=time.monotonic() - self.started)
            request.deadline.FromTimedelta(max(left, timedelta(0)))
        return request

    def advance(self, decision: Decision, exc: BaseException) -> None:
        if decision.action is Action.RETRY:
            self.attempt += 1
        elif decision.action is Action.CORRECT:
            # Corrections spend the correction budget, not an attempt.
            self.corrections += 1
        else:
            raise StepFailed(decision) from exc


async def run_step(
    client: AsyncSquawkClient,
    step: Callable[[P], Awaitable[T]],
    params: P,
    *,
    correct: Callable[[P, BaseException, Decision], Awaitable[P]] | None = None,
    options: StepOptions | None = None,
) -> T:
    """Run `step(params)` until it succeeds or the policy says FAIL.

    Cancelling the task cancels the step or the wait at once and is never
    retried. On FAIL, raises StepFailed (with the decision) from the last error.
    """
    state = _Attempts(options or StepOptions(), correct is not None)
    while True:
        try:
            return await step(params)
        except Exception as exc:
            decision = await client.decide_retry(state.request(exc))
            state.advance(decision, exc)
            if decision.action is Action.CORRECT:
                assert correct is not None
                params = await correct(params, exc, decision)
            else:
                await asyncio.sleep(decision.delay.total_seconds())


def run_step_sync(
    client: SquawkClient,
    step: Callable[[P], T],
    params: P,
    *,
    correct: Callable[[P, BaseException, Decision], P] | None = None,
    options: StepOptions | None = None,
    cancel: threading.Event | None = None,
) -> T:
    """The blocking twin of `run_step`; setting `cancel` aborts a wait at once."""
    state = _Attempts(options or StepOptions(), correct is not None)
    cancel = cancel or threading.Event()
    while True:
        try:
            return step(params)
        except Exception as exc:
            request = state.request(exc)
            request.cancelled = cancel.is_set()
            decision = client.decide_retry(request)
            state.advance(decision, exc)
            if decision.action is Action.CORRECT:
                assert correct is not None
                params = correct(params, exc, decision)
            elif cancel.wait(decision.delay.total_seconds()):
                raise StepCancelled("cancelled while waiting to retry") from exc
