"""GCRA spacing: when the next call (or token unit) may start at a rate.

The generic cell rate algorithm (ITU-T I.371) keeps one theoretical
arrival time per rate, advanced by 1 / rate per call and by cost /
token_rate per token unit; a call starts at the later of the two (and of a
hold). A grant reserves its slot, a refusal reserves nothing, so callers
are served first come first served. Which rates apply is the pacer's
choice (squawk.policy.pacer); docs/upstreams.md §Pacing tells the rules.

The state also keeps the running mean of real costs, which prices an
Admit that sent none, and charges the difference between a call's
estimate and its real cost when the outcome arrives.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .limits import MAX_POLICY_DURATION
from .shed import WaitCause
from .types import PaceSource

__all__ = [
    "NO_RATES",
    "Rates",
    "Spacing",
    "charge",
    "is_idle",
    "reserve",
    "shared",
    "slot",
    "start",
    "wait_cause",
]

# A real cost's weight in the running mean that stands in for an unknown one.
_COST_WEIGHT = 0.2
# No start is ever computed later than this past now: past every wait a
# grant may get (max_queue_delay is at most 7 days), so it only refuses, and
# a token burst of 1e9 at one unit a day never overflows a timedelta.
_FAR = 2 * MAX_POLICY_DURATION.total_seconds()


class Spacing(NamedTuple):
    # The theoretical arrival times: calls, and token units.
    tat: float = -math.inf
    token_tat: float = -math.inf
    # The running mean of real costs, for an Admit that sent none.
    mean_cost: float = 0.0


class Rates(NamedTuple):
    """The pace in force, and where it comes from."""

    source: PaceSource
    rate: float  # calls/s, 0 = none
    burst: float  # calls
    token_rate: float  # units/s, 0 = none
    tokens: float  # token burst, units


NO_RATES = Rates(PaceSource.NONE, 0.0, 1.0, 0.0, 0.0)


def shared(rates: Rates, share: float) -> Rates:
    """`rates` cut to a pod's `share` of them: the rates and the bursts (a
    burst at least one call; a token burst at least one second's share)."""
    return Rates(
        rates.source,
        rates.rate * share,
        max(1.0, rates.burst * share),
        rates.token_rate * share,
        rates.tokens * share,
    )


def start(spacing: Spacing, rates: Rates, now: float, units: float, hold_until: float) -> float:
    """The earliest start GCRA gives a call of `units` token units at `now`."""
    at = max(now, hold_until)
    if rates.rate:
        at = max(at, spacing.tat - (rates.burst - 1.0) / rates.rate)
    if rates.token_rate and units:
        need = min(units, rates.tokens)
        at = max(at, spacing.token_tat + (need - rates.tokens) / rates.token_rate)
    return min(at, now + _FAR)


def wait_cause(spacing: Spacing, rates: Rates, units: float, hold_until: float) -> WaitCause:
    """Which of start()'s three starts made the wait."""
    by = WaitCause.HOLD
    at = hold_until
    if rates.rate and spacing.tat - (rates.burst - 1.0) / rates.rate > at:
        by, at = WaitCause.RATE, spacing.tat - (rates.burst - 1.0) / rates.rate
    if rates.token_rate and units:
        need = min(units, rates.tokens)
        if spacing.token_tat + (need - rates.tokens) / rates.token_rate > at:
            by = WaitCause.TOKENS
    return by


def slot(rates: Rates, units: float) -> float:
    """The time one call of `units` takes at `rates`."""
    one = 1.0 / rates.rate if rates.rate else 0.0
    if rates.token_rate and units:
        one = max(one, units / rates.token_rate)
    return one


def reserve(spacing: Spacing, rates: Rates, at: float, units: float, max_wait: float) -> Spacing:
    """`spacing` after a grant of one call of `units` starting `at`."""
    tat = max(spacing.tat, at) + 1.0 / rates.rate if rates.rate else spacing.tat
    token_tat = spacing.token_tat
    if rates.token_rate and units:
        token_tat = _token_debt(max(token_tat, at) + units / rates.token_rate, at, max_wait, rates)
    return Spacing(tat, token_tat, spacing.mean_cost)


def charge(
    spacing: Spacing,
    rates: Rates,
    now: float,
    cost: float,
    estimated: float,
    max_wait: float,
) -> Spacing:
    """`spacing` after a call of real `cost` (> 0) reported.

    Admit charged the estimate (or the mean, when it had none): the
    difference is charged now, so the token rate holds for what was really
    spent."""
    charged = estimated if estimated > 0.0 else spacing.mean_cost
    mean = spacing.mean_cost
    mean = cost if not mean else mean + _COST_WEIGHT * (cost - mean)
    if not rates.token_rate or spacing.token_tat == -math.inf:
        return Spacing(spacing.tat, spacing.token_tat, mean)
    tat = spacing.token_tat + (cost - charged) / rates.token_rate
    return Spacing(spacing.tat, _token_debt(tat, now, max_wait, rates), mean)


def is_idle(spacing: Spacing, now: float) -> bool:
    """Whether every burst has refilled by `now`."""
    return spacing.tat <= now and spacing.token_tat <= now


def _token_debt(tat: float, now: float, max_wait: float, rates: Rates) -> float:
    # One call (its estimate, or its real cost over it) holds later starts
    # for at most the longest wait plus one burst: a cost of 1e9 against a
    # small token rate must not stop the pod for years.
    return min(tat, now + max_wait + rates.tokens / rates.token_rate)
