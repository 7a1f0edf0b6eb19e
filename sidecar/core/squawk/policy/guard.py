"""guard_retry: the upstream's shared state, applied to decide()'s answer.

decide() answers for one attempt of one executor; the upstream's state
(squawk.policy.upstream) knows what the whole pod has seen. guard_retry
reads a decision after decide() and can only make it more cautious:

1. CORRECT and FAIL pass unchanged, and so does the state.
2. A RETRY while the breaker is OPEN becomes FAIL, CIRCUIT_OPEN, with
   `retry_after` the time until it half-opens. (HALF_OPEN passes: admit()
   decides whether the resend is one of the probes.)
3. A RETRY the retry budget would overdraw becomes FAIL,
   RETRY_BUDGET_EXHAUSTED; a granted one withdraws from a ratio budget.
4. A RETRY whose delay is shorter than the cool-down left waits the
   cool-down left instead; when that outlasts the step's deadline, the
   core's deadline guard (decide.deadline_exceeded) makes it FAIL,
   DEADLINE_EXCEEDED, with `retry_after` the cool-down left.

So the shared state only ever turns a RETRY into a FAIL or a longer wait,
never the other way round. The checks run in that order and the budget is
withdrawn from only when the answer stays RETRY: a retry that fails on the
deadline does not spend the budget.
"""

from __future__ import annotations

from datetime import timedelta

from . import breaker as _breaker
from . import retry_budget as _budget
from .decide import deadline_exceeded, resend_phrase
from .timing import time_left
from .types import Action, BreakerState, Decision, Reason
from .upstream import UpstreamConfig, UpstreamState

__all__ = ["guard_retry"]

_ZERO = timedelta(0)
_ONE_MS = timedelta(milliseconds=1)


def _fail(decision: Decision, reason: Reason, why: str, wait: timedelta | None) -> Decision:
    return Decision(
        Action.FAIL,
        _ZERO,
        reason,
        why,
        True,
        decision.classification,
        decision.declared_retryable,
        wait,
    )


def guard_retry(
    state: UpstreamState,
    config: UpstreamConfig,
    now: float,
    decision: Decision,
    deadline: timedelta | None = None,
) -> tuple[UpstreamState, Decision]:
    """(state, decision): `decision` as the upstream's state allows it.

    `deadline` is the time left before the step's deadline, as decide() got
    it in AttemptState.deadline; None when the step has none.
    """
    if decision.action is not Action.RETRY:
        return state, decision
    what = resend_phrase(
        decision.reason is Reason.TRANSPORT_FAILURE, decision.classification.upstream_status
    )
    breaker = _breaker.advance(state.breaker, config.circuit_breaker, now)
    if breaker is not state.breaker:
        state = UpstreamState(breaker, state.budget, state.cool_until)
    if breaker.state is BreakerState.OPEN:
        left = time_left(breaker.until, now)
        why = (
            f"{what}, but the upstream's circuit breaker is open; "
            f"it half-opens in {left // _ONE_MS} ms."
        )
        return state, _fail(decision, Reason.CIRCUIT_OPEN, why, left)
    budget = _budget.withdraw(state.budget, config.retry_budget, now)
    if budget is None:
        clause, left_or_none = _budget.describe(state.budget, config.retry_budget, now)
        why = f"{what}, but the upstream's {clause}."
        return state, _fail(decision, Reason.RETRY_BUDGET_EXHAUSTED, why, left_or_none)
    cooling = time_left(state.cool_until, now)
    if cooling > decision.delay:
        past = deadline_exceeded(
            f"{what} and the upstream is cooling down",
            cooling,
            deadline,
            decision.classification,
            decision.declared_retryable,
        )
        if past is not None:
            return state, past._replace(retry_after=cooling)
        decision = decision._replace(
            delay=cooling,
            explanation=f"{decision.explanation.removesuffix('.')}; the upstream is cooling "
            f"down for {cooling // _ONE_MS} ms more, so wait that long instead.",
        )
    if budget is not state.budget:
        # Not dataclasses.replace, which costs twice as much, on every granted retry.
        state = UpstreamState(state.breaker, budget, state.cool_until)
    return state, decision
