"""Classification: which kind of failure is this, and may it be resent?

The status table is the guide's decision matrix; `retryable` is derived from
the profile's transient set, so Classify and DecideRetry can never disagree
about what a profile resends.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from .headers import retry_after
from .limits import MAX_ERROR_MESSAGE_CHARS, check_chars, check_headers, check_status
from .profiles import Profile
from .text import shown_text
from .types import Category, Classification, Failure

__all__ = ["check_status", "classify", "classify_parts", "status_from_text", "tool_status"]

# The guide's pattern, with two fixes: the digits may not continue
# ("code: 12345" is no status) and only 100..599 counts (checked below).
_STATUS = re.compile(r"(?:status|error|code)[:\s]+([0-9]{3})(?![0-9])", re.IGNORECASE)

# upstream status -> (status the tool answers with, category, code)
_TABLE: dict[int, tuple[int, Category, str]] = {
    400: (400, Category.INPUT_ERROR, "INVALID_INPUT"),
    401: (401, Category.AUTH_ERROR, "UNAUTHORIZED"),
    403: (403, Category.AUTH_ERROR, "FORBIDDEN"),
    404: (400, Category.INPUT_ERROR, "NOT_FOUND"),
    # Kept as 405 so the executor still sees a terminal status.
    405: (405, Category.INPUT_ERROR, "METHOD_NOT_ALLOWED"),
    # An upstream timeout is the tool's gateway failing, not the caller's.
    408: (502, Category.SERVICE_ERROR, "UPSTREAM_TIMEOUT"),
    409: (400, Category.INPUT_ERROR, "CONFLICT"),
    422: (400, Category.INPUT_ERROR, "UNPROCESSABLE"),
    429: (429, Category.RATE_LIMIT, "RATE_LIMITED"),
}
_NO_STATUS = (502, Category.SERVICE_ERROR, "UPSTREAM_UNAVAILABLE")


def status_from_text(message: str) -> int:
    """The first real HTTP status named in an error text, or 0."""
    for match in _STATUS.finditer(message):
        status = int(match.group(1))
        if 100 <= status <= 599:
            return status
    return 0


def tool_status(upstream: int) -> tuple[int, Category, str]:
    """(status the tool answers with, category, code) for an upstream status (0 = none)."""
    row = _TABLE.get(upstream)
    if row is not None:
        return row
    if upstream == 0:
        return _NO_STATUS
    if 400 <= upstream < 500:
        return (400, Category.INPUT_ERROR, "UPSTREAM_CLIENT_ERROR")
    if upstream >= 500:
        return (502, Category.SERVICE_ERROR, "UPSTREAM_SERVER_ERROR")
    # 1xx-3xx reported as a failure: the answer will not change on resend.
    return (502, Category.SERVICE_ERROR, "UNEXPECTED_STATUS")


def classify(failure: Failure, profile: Profile, clock: Callable[[], float]) -> Classification:
    check_chars("error_message", failure.error_message, MAX_ERROR_MESSAGE_CHARS)
    check_headers(failure.headers)
    return classify_parts(
        failure.error_message,
        failure.http_status,
        failure.transport_failure,
        failure.headers,
        profile,
        clock,
    )


def classify_parts(
    error_message: str,
    http_status: int,
    transport_failure: bool,
    headers: Mapping[str, str],
    profile: Profile,
    clock: Callable[[], float],
) -> Classification:
    """`classify` on a Failure's fields: decide() calls it without building one.

    The fields are already within their bounds (decide() passes an
    envelope's message, which read_envelope bounds).
    """
    check_status(http_status)
    upstream = (
        0
        if transport_failure
        else http_status or status_from_text(error_message[:MAX_ERROR_MESSAGE_CHARS])
    )
    status, category, code = tool_status(upstream)
    if transport_failure:
        code = "TRANSPORT_FAILURE"
    return Classification(
        http_status=status,
        category=category,
        retryable=upstream == 0 or upstream in profile.transient_statuses,
        code=code,
        upstream_status=upstream,
        redacted_message=shown_text(error_message, MAX_ERROR_MESSAGE_CHARS),
        retry_after=retry_after(headers, clock),
    )
