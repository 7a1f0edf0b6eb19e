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
    "COST_CLIP",
    "NO_RATES",
    "Rates",
    "Spacing",
    "bounded",
    "charge",
    "current",
    "is_idle",
    "reserve",
    "shared",
    "slot",
    "start",
    "wait_cause",
]

# A real cost's weight in the running mean that stands in for an unknown one.
_COST_WEIGHT = 0.2
# A real cost counts in that mean for at most this many times the mean: one
# outlier (a cost of 1e9 among costs of 100) moves the mean by at most
# _COST_WEIGHT x (COST_CLIP - 1) = 20 %, while costs that really rise are
# followed within a few outcomes (each lifts the mean by up to 20 %).
COST_CLIP = 2.0
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
    # The rates the arrival times were reserved at (0 = none yet).
    rate: float = 0.0
    token_rate: float = 0.0
    # The latest start reserved, or cost charged: no start is spaced
    # further than the hold bound past it.
    last: float = -math.inf


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


def bounded(rates: Rates, bound: float) -> Rates:
    """`rates` with no call's slot longer than `bound` seconds (a rate of
    at least 1 / bound): one call a day, under a bound of 5 min, is one
    call every 5 min."""
    if not rates.rate or rates.rate * bound >= 1.0:
        return rates
    return rates._replace(rate=1.0 / bound)


def current(spacing: Spacing, rates: Rates, now: float) -> Spacing:
    """`spacing` re-derived for `rates`: the calls (token units) reserved
    ahead of `now` at the rate they were reserved at, spaced at the rate
    in force (the same `spacing` when it did not change)."""
    tat, token_tat = spacing.tat, spacing.token_tat
    moved = False
    if rates.rate and spacing.rate and rates.rate != spacing.rate and tat > now:
        tat = now + (tat - now) * spacing.rate / rates.rate
        moved = True
    if (
        rates.token_rate
        and spacing.token_rate
        and rates.token_rate != spacing.token_rate
        and token_tat > now
    ):
        token_tat = now + (token_tat - now) * spacing.token_rate / rates.token_rate
        moved = True
    if not moved:
        return spacing
    return spacing._replace(
        tat=tat,
        token_tat=token_tat,
        rate=rates.rate or spacing.rate,
        token_rate=rates.token_rate or spacing.token_rate,
    )


def start(
    spacing: Spacing,
    rates: Rates,
    now: float,
    units: float,
    hold_until: float,
    bound: float = _FAR,
) -> float:
    """The earliest start GCRA gives a call of `units` token units at `now`
    (`spacing` current for `rates`): never more than `bound` seconds past
    the last start reserved or cost charged."""
    at = max(now, hold_until)
    spaced = -math.inf
    if rates.rate:
        spaced = spacing.tat - (rates.burst - 1.0) / rates.rate
    if rates.token_rate and units:
        need = min(units, rates.tokens)
        spaced = max(spaced, spacing.token_tat + (need - rates.tokens) / rates.token_rate)
    if spaced > at:
        at = max(at, min(spaced, spacing.last + bound))
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
    """`spacing` (current for `rates`) after a grant of one call of
    `units` starting `at`."""
    tat = max(spacing.tat, at) + 1.0 / rates.rate if rates.rate else spacing.tat
    token_tat = spacing.token_tat
    if rates.token_rate and units:
        token_tat = _token_debt(max(token_tat, at) + units / rates.token_rate, at, max_wait, rates)
    return Spacing(
        tat,
        token_tat,
        spacing.mean_cost,
        rates.rate or spacing.rate,
        rates.token_rate if rates.token_rate and units else spacing.token_rate,
        max(spacing.last, at),
    )


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
    difference is charged now, at the token rate it was reserved at, so the
    token rate holds for what was really spent. The cost counts in the mean
    for at most COST_CLIP times the mean."""
    charged = estimated if estimated > 0.0 else spacing.mean_cost
    mean = spacing.mean_cost
    mean = cost if not mean else mean + _COST_WEIGHT * (min(cost, COST_CLIP * mean) - mean)
    if not rates.token_rate or spacing.token_tat == -math.inf:
        return spacing._replace(mean_cost=mean)
    token_rate = spacing.token_rate or rates.token_rate
    tat = _token_debt(spacing.token_tat + (cost - charged) / token_rate, now, max_wait, rates)
    last = max(spacing.last, now) if tat > spacing.token_tat else spacing.last
    return spacing._replace(token_tat=tat, mean_cost=mean, last=last)


def is_idle(spacing: Spacing, now: float) -> bool:
    """Whether every burst has refilled by `now`."""
    return spacing.tat <= now and spacing.token_tat <= now


def _token_debt(tat: float, now: float, max_wait: float, rates: Rates) -> float:
    # One call (its estimate, or its real cost over it) holds later starts
    # for at most the longest wait plus one burst: a cost of 1e9 against a
    # small token rate must not stop the pod for years.
    return min(tat, now + max_wait + rates.tokens / rates.token_rate)
