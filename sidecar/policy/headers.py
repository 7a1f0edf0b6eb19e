"""Server-sent wait hints: Retry-After and grpc-retry-pushback-ms."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from email.utils import parsedate_to_datetime

__all__ = ["header", "retry_after"]


def header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive lookup; `name` is lower case.

    Keys, not items(): on a protobuf map (the server passes the request's
    map as it is) items() goes through the generic Mapping mixin and costs
    three times as much. `in` before indexing, because indexing a protobuf
    map with a missing key inserts it.
    """
    if name in headers:
        return headers[name]
    for key in headers:
        if key.lower() == name:
            return headers[key]
    return None


def _digits(value: str) -> int | None:
    # Only plain ASCII digits: a fraction, a sign or a word is malformed.
    value = value.strip()
    if value and value.isascii() and value.isdigit():
        return int(value)
    return None


def retry_after(headers: Mapping[str, str], clock: Callable[[], float]) -> timedelta | None:
    """The wait the server asked for, or None when it asked for none (or garbage).

    `clock` returns the current Unix time; it is only called for an HTTP-date.
    """
    if not headers:
        return None
    value = header(headers, "retry-after")
    if value is not None:
        seconds = _digits(value)
        if seconds is not None:
            return timedelta(seconds=seconds)
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            when = None
        if when is not None and when.tzinfo is not None:
            return timedelta(seconds=max(0.0, when.timestamp() - clock()))
    pushback = header(headers, "grpc-retry-pushback-ms")
    if pushback is not None:
        ms = _digits(pushback)
        if ms is not None:
            return timedelta(milliseconds=ms)
    return None
