"""The pure policy core: no gRPC, no I/O, no clock and no hidden randomness.

The server, the CLI and the clients' local fallback all call these functions,
so there is exactly one place for each rule.

The public surface is `__all__` below. Each module's own `__all__` lists
what the rest of the project (the daemon, `squawk.wire`, the Python
client) may import from it; every other name is private to the core.
tests/test_core_surface.py pins both.
"""

from .backoff import BackoffConfig, Jitter, delay, parse_duration
from .breaker import BreakerConfig
from .classify import classify, status_from_text
from .decide import decide, validate
from .fair import Fairness
from .guard import FleetAnswer, guard_fleet, guard_retry
from .headers import pushback_refuses, retry_after
from .outcome import Outcome, counts_as_failure
from .pacer import (
    Pace,
    Pacer,
    PaceSample,
    PaceSnapshot,
    RateLimitConfig,
    observe,
    pace,
    pacer_is_idle,
    pacer_snapshot,
)
from .profiles import Policy, Profile, builtin_policy, builtin_profile
from .ratelimit import Quota, RateLimitHint, rate_limit_hint
from .redact import REDACTED, redact
from .retry_budget import RatioBudgetConfig, RetryBudgetConfig, TokenBucketConfig
from .types import (
    Action,
    AttemptState,
    BreakerState,
    Category,
    Classification,
    Criticality,
    Decision,
    Failure,
    PaceSource,
    PolicyInputError,
    Reason,
)
from .upstream import (
    Admission,
    UpstreamConfig,
    UpstreamSnapshot,
    UpstreamState,
    admit,
    is_idle,
    record_outcome,
    upstream_snapshot,
)

__all__ = [
    "REDACTED",
    "Action",
    "Admission",
    "AttemptState",
    "BackoffConfig",
    "BreakerConfig",
    "BreakerState",
    "Category",
    "Classification",
    "Criticality",
    "Decision",
    "Failure",
    "Fairness",
    "FleetAnswer",
    "Jitter",
    "Outcome",
    "Pace",
    "PaceSample",
    "PaceSnapshot",
    "PaceSource",
    "Pacer",
    "Policy",
    "PolicyInputError",
    "Profile",
    "Quota",
    "RateLimitConfig",
    "RateLimitHint",
    "RatioBudgetConfig",
    "Reason",
    "RetryBudgetConfig",
    "TokenBucketConfig",
    "UpstreamConfig",
    "UpstreamSnapshot",
    "UpstreamState",
    "admit",
    "builtin_policy",
    "builtin_profile",
    "classify",
    "counts_as_failure",
    "decide",
    "delay",
    "guard_fleet",
    "guard_retry",
    "is_idle",
    "observe",
    "pace",
    "pacer_is_idle",
    "pacer_snapshot",
    "parse_duration",
    "pushback_refuses",
    "rate_limit_hint",
    "record_outcome",
    "redact",
    "retry_after",
    "status_from_text",
    "upstream_snapshot",
    "validate",
]
