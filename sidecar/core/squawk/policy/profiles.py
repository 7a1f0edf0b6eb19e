"""Profiles: named sets of retry rules, and the two built in.

"default" is the executor step policy of the error-handling guide: 408, 429
and every 5xx are transient, 401/403/405 are terminal, and any other 4xx may
be corrected. "llm" is the LLM-client policy of the companion SDK: an exact
retryable set (a 501, 507 or 520 is terminal) and no correction path.

Both share the same settings for the upstream state kept per (profile,
upstream): a circuit breaker, a retry budget and the shared Retry-After
cool-down, with the defaults of squawk.policy.breaker, .retry_budget and
.cooldown. A profile's `upstreams` entries override them per upstream.

`max_retry_wait` bounds one resend's wait as the server asks for it when
the request has no deadline to judge it by (squawk.policy.decide): a
`Retry-After: 3600` fails the step with WAIT_TOO_LONG rather than leave an
executor asleep for an hour.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from types import MappingProxyType

from .backoff import BackoffConfig, Jitter
from .breaker import BreakerConfig
from .cooldown import DEFAULT_MAX_COOL_DOWN, MAX_COOL_DOWN, MIN_COOL_DOWN
from .outcome import STEP_TRANSIENT
from .pacer import RateLimitConfig
from .retry_budget import RatioBudgetConfig, RetryBudgetConfig
from .text import quoted
from .types import PolicyInputError
from .upstream import UpstreamConfig

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_RETRY_WAIT",
    "DEFAULT_MAX_UPSTREAMS",
    "LLM_RETRYABLE",
    "STEP_TRANSIENT",
    "TERMINAL",
    "Policy",
    "Profile",
    "builtin_policy",
    "builtin_profile",
    "check_max_retry_wait",
]

LLM_RETRYABLE = frozenset({429, 500, 502, 503, 504, 529})
TERMINAL = frozenset({401, 403, 405})
DEFAULT_MAX_BODY_BYTES = 1 << 20
# How many (profile, upstream) states the server tracks at most.
DEFAULT_MAX_UPSTREAMS = 10_000

# The longest wait a server may ask one resend to sleep when the request
# has no deadline: max_cool_down's default and bounds, so that the wait an
# executor sleeps and the cool-down it shares are held to the same length.
DEFAULT_MAX_RETRY_WAIT = DEFAULT_MAX_COOL_DOWN
MIN_RETRY_WAIT = MIN_COOL_DOWN
MAX_RETRY_WAIT = MAX_COOL_DOWN

_NO_OVERRIDES: Mapping[str, Profile] = MappingProxyType({})
_NO_UPSTREAMS: Mapping[str, UpstreamConfig] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    # Which built-in rule set this profile routes by: "default" or "llm".
    base: str = "default"
    max_attempts: int = 3
    backoff: BackoffConfig = field(default_factory=BackoffConfig)
    max_validation_retries: int = 2
    # Statuses resent unchanged; a file's retryable_statuses only add to it.
    transient_statuses: frozenset[int] = STEP_TRANSIENT
    terminal_statuses: frozenset[int] = TERMINAL
    # Whether a non-transient 4xx may be answered with CORRECT.
    corrections: bool = True
    # The longest wait the server may ask of one resend without a deadline.
    max_retry_wait: timedelta = DEFAULT_MAX_RETRY_WAIT
    # Per-capability variants of this profile, already merged.
    capabilities: Mapping[str, Profile] = field(default_factory=lambda: _NO_OVERRIDES)
    # The upstream state's settings for every upstream not in `upstreams`.
    circuit_breaker: BreakerConfig = field(default_factory=BreakerConfig)
    retry_budget: RetryBudgetConfig = field(default_factory=RatioBudgetConfig)
    share_retry_after: bool = True
    max_cool_down: timedelta = DEFAULT_MAX_COOL_DOWN
    rate_limit: RateLimitConfig = field(default_factory=RateLimitConfig)
    # Per-upstream settings, already merged over the five above.
    upstreams: Mapping[str, UpstreamConfig] = field(default_factory=lambda: _NO_UPSTREAMS)
    # The five above as one value, built once: for_upstream runs per call.
    _upstream: UpstreamConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_max_retry_wait(self.max_retry_wait)
        # What the upstream state counts as a failure is what this profile
        # retries (squawk.policy.outcome): set here, once, on every upstream
        # config it hands out, so no `upstreams:` entry can disagree with it.
        failures = self.transient_statuses - self.terminal_statuses
        object.__setattr__(
            self,
            "_upstream",
            UpstreamConfig(
                self.circuit_breaker,
                self.retry_budget,
                self.share_retry_after,
                failures,
                self.max_cool_down,
                self.rate_limit,
            ),
        )
        if any(c.failure_statuses != failures for c in self.upstreams.values()):
            object.__setattr__(
                self,
                "upstreams",
                MappingProxyType(
                    {
                        name: replace(c, failure_statuses=failures)
                        for name, c in self.upstreams.items()
                    }
                ),
            )

    def for_capability(self, capability: str) -> Profile:
        if not capability or not self.capabilities:
            return self
        return self.capabilities.get(capability, self)

    def for_upstream(self, upstream: str) -> UpstreamConfig:
        """The upstream state's settings for `upstream`: its `upstreams`
        entry, else the profile's own."""
        if not upstream or not self.upstreams:
            return self._upstream
        return self.upstreams.get(upstream, self._upstream)


def check_max_retry_wait(value: timedelta) -> None:
    if not MIN_RETRY_WAIT <= value <= MAX_RETRY_WAIT:
        raise PolicyInputError(
            "max_retry_wait", f"must be between 1s and 24h, got {value.total_seconds():g}s"
        )


def builtin_profile(base: str, name: str | None = None) -> Profile:
    if base == "default":
        return Profile(name=name or base)
    if base == "llm":
        return Profile(
            name=name or base,
            base="llm",
            max_attempts=3,
            backoff=BackoffConfig(
                initial=timedelta(milliseconds=500),
                max=timedelta(seconds=10),
                jitter=Jitter.SINE,
            ),
            max_validation_retries=0,
            transient_statuses=LLM_RETRYABLE,
            terminal_statuses=frozenset(),
            corrections=False,
        )
    raise ValueError(f"unknown base profile {base!r}; expected 'default' or 'llm'")


@dataclass(frozen=True, slots=True)
class Policy:
    profiles: Mapping[str, Profile]
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # The bound on the (profile, upstream) states the server keeps.
    max_upstreams: int = DEFAULT_MAX_UPSTREAMS

    def profile(self, name: str) -> Profile:
        found = self.profiles.get(name or "default")
        if found is None:
            known = ", ".join(sorted(self.profiles))
            raise PolicyInputError("profile", f"unknown profile {quoted(name)}; known: {known}")
        return found

    def with_profile(self, profile: Profile) -> Policy:
        return replace(self, profiles=MappingProxyType({**self.profiles, profile.name: profile}))


def builtin_policy() -> Policy:
    return Policy(
        profiles=MappingProxyType({p: builtin_profile(p) for p in ("default", "llm")}),
    )
