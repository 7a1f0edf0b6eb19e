"""Why an upstream's shared state changed: the causes the event history
shows beside each breaker transition and cool-down (issue 36).

Each cause names what moved the state and the rule that fired, in the
policy file's own words (failure_ratio, open_for, close_ratio), so an
operator can find the setting to change. Only numbers and the policy's
names reach the text: nothing a caller sent, so no redaction is needed.
"""

from __future__ import annotations

from .breaker import Breaker, BreakerConfig
from .fleet import Restore
from .outcome import Outcome, is_throttled
from .ratelimit import Quota, RateLimitHint
from .timing import seconds, shown_seconds
from .types import BreakerState, PaceSource

__all__ = [
    "breaker_cause",
    "fleet_breaker_cause",
    "hint_text",
    "outcome_text",
    "pace_cause",
    "restored_cause",
]

_PACE_CAUSES = {
    PaceSource.NONE: "nothing paces the upstream: no declared rate, no headers, no throttles",
    PaceSource.POLICY: "the rate declared in the policy (rate_limit.rate)",
    PaceSource.HEADERS: "read from the upstream's rate-limit headers",
    PaceSource.LEARNED: "learned from the upstream's throttling (429, 503 with Retry-After)",
}


def outcome_text(outcome: Outcome) -> str:
    """One outcome as an event shows it: "HTTP 503", "HTTP 429 (throttled),
    Retry-After 30 s", "a transport failure", "a success"."""
    if outcome.cancelled:
        return "a cancelled call"
    if outcome.success:
        return "a success"
    if outcome.transport_failure or not outcome.http_status:
        text = "a transport failure"
    else:
        text = f"HTTP {outcome.http_status}"
    if is_throttled(outcome):
        text += " (throttled)"
    if outcome.retry_after is not None:
        text += f", Retry-After {shown_seconds(seconds(outcome.retry_after))}"
    if outcome.refused_retry:
        text += ", pushback refusing a retry"
    return text


def breaker_cause(after: Breaker, before: BreakerState, config: BreakerConfig) -> str:
    """Why a pod's breaker went from `before` to `after` (its new state,
    which keeps the outcomes that opened it)."""
    now = after.state
    if not config.enabled:
        return "the breaker is disabled (circuit_breaker.enabled: false)"
    if now is BreakerState.HALF_OPEN:
        return (
            f"open for {shown_seconds(config._open_for_s)} (open_for): "
            f"up to {config.half_open_probes} probes go through"
        )
    if now is BreakerState.CLOSED:
        return (
            f"the probes succeeded at or over close_ratio {config.close_ratio:.0%} "
            f"of {config.half_open_probes}"
        )
    calls = after.successes + after.failures
    if before is BreakerState.HALF_OPEN:
        return (
            f"{after.failures} of {calls} probes failed: under close_ratio "
            f"{config.close_ratio:.0%} succeeded"
        )
    return _tripped(after.failures, calls, config)


def fleet_breaker_cause(
    now: BreakerState,
    before: BreakerState,
    calls: int,
    failures: int,
    pods: int,
    config: BreakerConfig,
) -> str:
    """Why the fleet's breaker went from `before` to `now`, as one pod read
    it: `calls`, `failures` and failing `pods` from the fleet's window (or,
    from HALF_OPEN, its probe round) before the move."""
    if now is not BreakerState.OPEN:
        return breaker_cause(Breaker(now), before, config) + " (across the fleet)"
    if before is BreakerState.HALF_OPEN:
        return f"{failures} of {calls} probes across the fleet failed"
    return _tripped(failures, calls, config) + f", from {pods} pod{'s' * (pods != 1)}"


def _tripped(failures: int, calls: int, config: BreakerConfig) -> str:
    share = failures / calls if calls else 0.0
    return (
        f"{failures} of {calls} calls in the window failed ({share:.0%}): at or over "
        f"failure_ratio {config.failure_ratio:.0%} with minimum_calls {config.minimum_calls}"
    )


def pace_cause(source: PaceSource, last: Outcome | None = None) -> str:
    """Why the pace is `source` now, with what `last` (the latest outcome
    that read a quota or was throttled) said: the quota the headers read
    for a header pace, the throttle for a learned one."""
    cause = _PACE_CAUSES[source]
    if last is None:
        return cause
    if source is PaceSource.HEADERS and last.hint is not None:
        read = hint_text(last.hint)
        return f"{cause}: {read}" if read else cause
    if source is PaceSource.LEARNED and is_throttled(last):
        return f"{cause}; last: {outcome_text(last)}"
    return cause


def hint_text(hint: RateLimitHint) -> str:
    """A reading of the rate-limit headers as numbers: "requests 10 of 100
    left, resetting in 1 s; tokens 0 left". Numbers parsed and bounded
    by squawk.policy.ratelimit, never the headers' own text."""
    parts = [
        _quota_text(name, quota)
        for name, quota in (("requests", hint.requests), ("tokens", hint.tokens))
        if quota is not None
    ]
    return "; ".join(p for p in parts if p)


def _quota_text(name: str, quota: Quota) -> str:
    words = []
    if quota.remaining is not None:
        left = _count(quota.remaining)
        limit = f" of {_count(quota.limit)}" if quota.limit is not None else ""
        words.append(f"{left}{limit} left")
    elif quota.limit is not None:
        words.append(f"limit {_count(quota.limit)}")
    if quota.reset is not None:
        words.append(f"resetting in {shown_seconds(seconds(quota.reset))}")
    return f"{name} {', '.join(words)}" if words else ""


def _count(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) or value >= 100 else f"{value:.3g}"


def restored_cause(restore: Restore) -> str:
    """What a pod wrote back to a store that had lost it: "the store had
    lost the fleet's OPEN breaker (50 s left) and cool-down (110 s left)
    this pod still held"."""
    held = []
    if restore.open_left > 0.0:
        held.append(f"OPEN breaker ({shown_seconds(restore.open_left)} left)")
    if restore.cooling > 0.0:
        held.append(f"cool-down ({shown_seconds(restore.cooling)} left)")
    what = " and ".join(held) or "caution"
    return f"the store had lost the fleet's {what} this pod still held (flushed or restarted)"
