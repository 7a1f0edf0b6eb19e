"""The bounds on the caller-supplied values the policy core reads.

Each number is stated once, here; the proto comments and the README quote
them. A value past its bound is refused with a PolicyInputError naming the
field before any other work is done on it, so the cost of a request is
bounded by these numbers and not by what a caller chose to send. (gRPC's
own 4 MiB message limit bounds the rest, e.g. the size of a batch.)
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from .text import quoted
from .types import PolicyInputError

__all__ = [
    "MAX_DURATION_SECONDS",
    "MAX_ERROR_MESSAGE_CHARS",
    "MAX_HEADERS",
    "MAX_HEADER_NAME_CHARS",
    "MAX_HEADER_VALUE_CHARS",
    "MAX_NAME_CHARS",
    "MAX_PROFILE_CHARS",
    "check_chars",
    "check_headers",
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


def check_chars(field: str, value: str, limit: int) -> None:
    if len(value) > limit:
        raise PolicyInputError(field, f"{len(value)} characters is over the limit of {limit}")


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
