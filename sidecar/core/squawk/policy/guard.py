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

Every wait these rules answer (the half-open time, the cool-down left) is
jittered upwards by cooldown.spread() when an `rng` is passed, so that
executors refused together come back spread out.

So the shared state only ever turns a RETRY into a FAIL or a longer wait,
never the other way round. The checks run in that order and the budget is
withdrawn from only when the answer stays RETRY: a retry that fails on the
deadline does not spend the budget.

guard_fleet applies the same four rules a second time, to what a fleet
store (the daemon's Redis store) says of every pod's shared state.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import NamedTuple

from . import breaker as _breaker
from . import retry_budget as _budget
from .cooldown import COOL_DOWN_SPREAD_FRACTION, spread
from .decide import deadline_exceeded, resend_phrase
from .timing import time_left
from .types import Action, BreakerState, Decision, Reason
from .upstream import UpstreamConfig, UpstreamState

__all__ = ["FleetAnswer", "guard_fleet", "guard_retry"]

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
    rng: random.Random | None = None,
) -> tuple[UpstreamState, Decision]:
    """(state, decision): `decision` as the upstream's state allows it.

    `deadline` is the time left before the step's deadline, as decide() got
    it in AttemptState.deadline; None when the step has none. `rng` jitters
    the waits answered (None: the exact times).
    """
    if decision.action is not Action.RETRY:
        return state, decision
    what = _what(decision)
    breaker = _breaker.advance(state.breaker, config.circuit_breaker, now)
    if breaker is not state.breaker:
        state = UpstreamState(breaker, state.budget, state.cool_until, state.pacer)
    if breaker.state is BreakerState.OPEN:
        left = time_left(breaker.until, now)
        return state, _open(decision, what, "circuit breaker", left, rng)
    budget = _budget.withdraw(state.budget, config.retry_budget, now)
    if budget is None:
        clause, left_or_none = _budget.describe(state.budget, config.retry_budget, now)
        why = f"{what}, but the upstream's {clause}."
        return state, _fail(decision, Reason.RETRY_BUDGET_EXHAUSTED, why, left_or_none)
    decision, past = _cooled(decision, what, time_left(state.cool_until, now), deadline, rng)
    if past:
        return state, decision
    if budget is not state.budget:
        # Not dataclasses.replace, which costs twice as much, on every granted retry.
        state = UpstreamState(state.breaker, budget, state.cool_until, state.pacer)
    return state, decision


class FleetAnswer(NamedTuple):
    """What the fleet's shared state says of one RETRY (the daemon's fleet
    store reads it from every pod's reports, in the same order of rules)."""

    # The fleet's breaker is OPEN: the time until it half-opens.
    open_left: timedelta | None = None
    # The fleet's retry budget refused: its state, as in "the upstream's
    # fleet-wide retry budget is spent: <budget_spent>".
    budget_spent: str | None = None
    # The fleet's cool-down left; zero when none.
    cooling: timedelta = _ZERO


def guard_fleet(
    decision: Decision,
    answer: FleetAnswer,
    deadline: timedelta | None = None,
    rng: random.Random | None = None,
) -> Decision:
    """`decision` (already guarded by the pod's own state) as the fleet's
    state allows it: the same rules as guard_retry, so again only ever a
    FAIL or a longer wait, never the other way round."""
    if decision.action is not Action.RETRY:
        return decision
    what = _what(decision)
    if answer.open_left is not None:
        return _open(decision, what, "fleet-wide circuit breaker", answer.open_left, rng)
    if answer.budget_spent is not None:
        why = f"{what}, but the upstream's fleet-wide retry budget is spent: {answer.budget_spent}."
        return _fail(decision, Reason.RETRY_BUDGET_EXHAUSTED, why, None)
    return _cooled(decision, what, answer.cooling, deadline, rng)[0]


def _what(decision: Decision) -> str:
    return resend_phrase(
        decision.reason is Reason.TRANSPORT_FAILURE, decision.classification.upstream_status
    )


def _open(
    decision: Decision, what: str, breaker: str, left: timedelta, rng: random.Random | None
) -> Decision:
    why = f"{what}, but the upstream's {breaker} is open; it half-opens in {left // _ONE_MS} ms."
    return _fail(decision, Reason.CIRCUIT_OPEN, why, spread(left, rng))


def _cooled(
    decision: Decision,
    what: str,
    cooling: timedelta,
    deadline: timedelta | None,
    rng: random.Random | None,
) -> tuple[Decision, bool]:
    """(decision, past): a RETRY waiting at least the cool-down left, or
    (past=True) a FAIL when that wait would outlast the step's deadline.

    Only the cool-down left is held to the deadline: its jitter is cut to
    what the deadline leaves rather than failing a step that could wait."""
    if cooling <= decision.delay:
        return decision, False
    past = deadline_exceeded(
        f"{what} and the upstream is cooling down",
        cooling,
        deadline,
        decision.classification,
        decision.declared_retryable,
    )
    if past is not None:
        return past._replace(retry_after=spread(cooling, rng, COOL_DOWN_SPREAD_FRACTION)), True
    wait = spread(cooling, rng, COOL_DOWN_SPREAD_FRACTION)
    if deadline is not None:
        wait = min(wait, deadline)
    return decision._replace(
        delay=wait,
        explanation=f"{decision.explanation.removesuffix('.')}; the upstream is cooling "
        f"down for {cooling // _ONE_MS} ms more, so wait {wait // _ONE_MS} ms instead.",
    ), False
