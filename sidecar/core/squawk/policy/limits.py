"""The bounds on the caller-supplied values the policy core reads, and on
the sizes of the calls that carry them (a batch, a report, a page).

Each number is stated once, here: the core, squawk.wire, the daemon's
servicer and the Python client read it from here; the proto comments and
the docs quote it. A value past its bound is refused with a PolicyInputError naming the
field before any other work is done on it, so the cost of a request is
bounded by these numbers and not by what a caller chose to send. (gRPC's
own 4 MiB message limit bounds the rest, e.g. the size of a batch.)

The check_* helpers for ratios, counts and durations serve the upstream
state's configs (breaker, retry budget), whose values come from the policy
file; the config classes call them, and the file's parser reports their
PolicyInputError with the field's line.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from .text import quoted
from .types import PolicyInputError

__all__ = [
    "MAX_ADMIT_DEADLINE",
    "MAX_BATCH",
    "MAX_BUCKETS",
    "MAX_BURST",
    "MAX_COST",
    "MAX_DURATION_SECONDS",
    "MAX_ERROR_MESSAGE_CHARS",
    "MAX_HEADERS",
    "MAX_HEADER_NAME_CHARS",
    "MAX_HEADER_VALUE_CHARS",
    "MAX_NAME_CHARS",
    "MAX_OUTCOMES",
    "MAX_OUTCOME_AGE",
    "MAX_PERMITS",
    "MAX_POLICY_DURATION",
    "MAX_PROFILE_CHARS",
    "MAX_RATE",
    "MAX_RETRY_AFTER",
    "MAX_RETRY_RATIO",
    "MAX_TOKENS",
    "MAX_TOKEN_RATE",
    "MAX_UPSTREAMS_PAGE",
    "check_chars",
    "check_count",
    "check_headers",
    "check_number",
    "check_positive",
    "check_ratio",
    "check_status",
    "duration",
]

MAX_PROFILE_CHARS = 128
# capability and upstream: names, not documents.
MAX_NAME_CHARS = 256
# Classify's error_message. An error text longer than this is a page, not a
# message; the envelope's message in a response body is cut to it too.
MAX_ERROR_MESSAGE_CHARS = 65_536
MAX_HEADERS = 64
MAX_HEADER_NAME_CHARS = 256
MAX_HEADER_VALUE_CHARS = 8_192
# google.protobuf.Duration's own range: ±10,000 years.
MAX_DURATION_SECONDS = 315_576_000_000
_MAX_NANOS = 999_999_999
# The longest duration a policy may set (a delay, a window, open_for, a
# TTL): far inside google.protobuf.Duration's range, and below the 24.8 days
# a JavaScript timer can wait (setTimeout fires at once past 2^31 - 1 ms).
MAX_POLICY_DURATION = timedelta(days=7)
# A breaker's window is at most this many buckets: each holds two counters
# and every transition copies the bucket tuple, so this bounds its cost.
MAX_BUCKETS = 1_000
# gRFC A6's bound on a retry token bucket: 0 < maxTokens <= 1000. Also the
# bound on its tokenRatio (A6 says only > 0): a success that adds more than
# the largest bucket holds means nothing more than one that fills it, so a
# larger ratio can only be a mistake (a percentage written as a count).
MAX_TOKENS = 1_000
# A ratio budget's ratio: 0 (only the min_per_second reserve, as Finagle's
# RetryBudget with percentCanRetry 0) up to 10, i.e. 1000 %: ten retries per
# call, already more than a retry budget that bounds load can mean. Finagle
# itself stops at its token scale factor (a ratio of 1000), where a retry
# would cost less than one of its tokens: a bound of its arithmetic, not of
# sense, so Squawk refuses past 10 and accepts every ratio Finagle's tests use.
MAX_RETRY_RATIO = 10.0
# The longest wait a Retry-After (or any wait hint) is read as.
MAX_RETRY_AFTER = timedelta(days=1)
# Admit's deadline: the time left of a step. A step longer than a day is
# not one the pace can plan for (and a day is MAX_RETRY_AFTER's cap too).
MAX_ADMIT_DEADLINE = timedelta(days=1)
# Permits one Admit may ask for (the first and those leased after it).
MAX_PERMITS = 100
# A call's cost (Admit's estimate, an outcome's real one): finite, 0 to 1e9
# token units, as squawk.v1 states it.
MAX_COST = 1e9
# A pace: calls/s, calls that may start together, token units/s (a
# policy's rate_limit, and the most any header or learned pace reaches).
MAX_RATE = 1e6
MAX_BURST = 1_000_000
MAX_TOKEN_RATE = 1e9
# Requests in one DecideRetryBatch call.
MAX_BATCH = 10_000
# Outcomes in one ReportOutcome call.
MAX_OUTCOMES = 1_000
# The longest Outcome.age: how long a runner may hold an outcome before it
# reports it (its batches go within 50 ms; a minute covers a daemon that
# was away for a few retries).
MAX_OUTCOME_AGE = timedelta(seconds=60)
# Upstreams in one GetUpstreams answer: 1,000 of the longest rows (a
# 128-character profile, a 256-character name, four bytes a character, every
# number at its widest: 1,685 bytes, and 1,810 with the fleet's view of
# include_fleet) come to under 2 MiB, within a default client's 4 MiB
# receive limit.
MAX_UPSTREAMS_PAGE = 1_000


def check_chars(field: str, value: str, limit: int) -> None:
    if len(value) > limit:
        raise PolicyInputError(field, f"{len(value)} characters is over the limit of {limit}")


def check_status(status: int, field: str = "http_status") -> None:
    if status != 0 and not 100 <= status <= 599:
        raise PolicyInputError(field, f"{status} is not an HTTP status (0 or 100..599)")


def check_ratio(field: str, value: float) -> None:
    """A share of calls: in (0, 1]. NaN fails the comparison and is refused too."""
    if not 0.0 < value <= 1.0:
        raise PolicyInputError(field, f"must be in (0, 1], got {value}")


def check_number(field: str, value: float, high: float, *, zero: bool = False) -> None:
    """A number in (0, high], or [0, high] with `zero`. NaN fails the
    comparison and is refused too, and so is infinity."""
    low_ok = value >= 0.0 if zero else value > 0.0
    if not (low_ok and value <= high):
        bound = f"[0, {high:g}]" if zero else f"(0, {high:g}]"
        raise PolicyInputError(field, f"must be in {bound}, got {value}")


def check_count(field: str, value: int, low: int = 1, high: int | None = None) -> None:
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in {low}..{high}"
        raise PolicyInputError(field, f"must be {bound}, got {value}")


def check_positive(field: str, value: timedelta) -> None:
    if value <= timedelta(0):
        raise PolicyInputError(field, f"must be positive, got {value.total_seconds()}s")


def check_headers(headers: Mapping[str, str], field: str = "headers") -> None:
    if not headers:
        return
    if len(headers) > MAX_HEADERS:
        raise PolicyInputError(field, f"{len(headers)} headers is over the limit of {MAX_HEADERS}")
    for name in headers:
        if len(name) > MAX_HEADER_NAME_CHARS:
            raise PolicyInputError(
                field,
                f"a header name of {len(name)} characters is over the limit of "
                f"{MAX_HEADER_NAME_CHARS}",
            )
        size = len(headers[name])
        if size > MAX_HEADER_VALUE_CHARS:
            raise PolicyInputError(
                field,
                f"the value of {quoted(name)} is {size} characters, over the limit of "
                f"{MAX_HEADER_VALUE_CHARS}",
            )


def duration(field: str, seconds: int, nanos: int) -> timedelta:
    """A google.protobuf.Duration's value, refused when outside the type's
    range or negative (no duration the policy reads may be).

    The range and the sign rule are protobuf's: |seconds| <= 315,576,000,000,
    |nanos| <= 999,999,999, and both of the same sign. Past it, conversion
    would overflow; and checked after it, -5 ns would read as zero.
    """
    if not -MAX_DURATION_SECONDS <= seconds <= MAX_DURATION_SECONDS:
        raise PolicyInputError(
            f"{field}.seconds",
            f"{seconds} is outside google.protobuf.Duration's range of "
            f"±{MAX_DURATION_SECONDS} seconds",
        )
    if not -_MAX_NANOS <= nanos <= _MAX_NANOS:
        raise PolicyInputError(f"{field}.nanos", f"{nanos} is outside -999999999..999999999")
    if (seconds > 0 and nanos < 0) or (seconds < 0 and nanos > 0):
        raise PolicyInputError(field, "seconds and nanos must have the same sign")
    if seconds < 0 or nanos < 0:
        raise PolicyInputError(field, "must not be negative")
    return timedelta(seconds=seconds, microseconds=nanos / 1000)
