"""The pure policy core: no gRPC, no I/O, no clock and no hidden randomness.

The server, the CLI and the clients' local fallback all call these functions,
so there is exactly one place for each rule.
"""

from .backoff import BackoffConfig, Jitter, delay, parse_duration
from .classify import classify, status_from_text
from .decide import decide, validate
from .headers import retry_after
from .profiles import Policy, Profile, builtin_policy, builtin_profile
from .redact import REDACTED, redact
from .types import (
    Action,
    AttemptState,
    Category,
    Classification,
    Decision,
    Failure,
    PolicyInputError,
    Reason,
)

__all__ = [
    "REDACTED",
    "Action",
    "AttemptState",
    "BackoffConfig",
    "Category",
    "Classification",
    "Decision",
    "Failure",
    "Jitter",
    "Policy",
    "PolicyInputError",
    "Profile",
    "Reason",
    "builtin_policy",
    "builtin_profile",
    "classify",
    "decide",
    "delay",
    "parse_duration",
    "redact",
    "retry_after",
    "status_from_text",
    "validate",
]
