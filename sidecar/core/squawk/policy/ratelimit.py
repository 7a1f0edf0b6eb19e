"""An upstream's rate-limit headers, read into quotas the pacer can use.

Only the two values the pacer reads live here for now; the header parser
(`rate_limit_hint`) joins them in this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

__all__ = ["Quota", "RateLimitHint"]


@dataclass(frozen=True, slots=True)
class Quota:
    # The window's limit (requests or token units); None = not sent.
    limit: float | None
    # Left now.
    remaining: float | None
    # Until `remaining` is back to `limit` (or the window resets); relative,
    # >= 0, <= 1 day.
    reset: timedelta | None
    # The window the limit is for (IETF `w`), when sent.
    window: timedelta | None


@dataclass(frozen=True, slots=True)
class RateLimitHint:
    requests: Quota | None
    tokens: Quota | None
