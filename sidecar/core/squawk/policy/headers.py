"""Server-sent wait hints: retry-after-ms, Retry-After and grpc-retry-pushback-ms.

retry-after-ms (OpenAI, Azure OpenAI, Anthropic) is read first, as the
OpenAI and Anthropic Python SDKs read it (`_parse_retry_after_header`:
`float(headers["retry-after-ms"]) / 1000`, then Retry-After): milliseconds,
a fraction allowed. Unlike float() here only a plain non-negative ASCII
decimal is read (a sign, an exponent, NaN or inf is ignored, and the other
headers decide), so the Go and TypeScript fallbacks read the same values.
The SDKs disagree on a hint of zero and on a long one (docs/policy.md has
each one's rule: openai-python refuses to retry past 120 s, openai-go past
2 minutes, openai-node uses its own backoff past 60 s, anthropic waits any
length), so Squawk follows none of them: it keeps zero as "now" (as
Retry-After: 0) and caps a long one at MAX_RETRY_AFTER like the other headers.

gRFC A6 "Pushback": grpc-retry-pushback-ms is a signed integer of
milliseconds, and a value that is negative or does not parse means the server
asks the client not to retry at all. grpc-go (`strconv.Atoi`, then `< 0`)
and grpc-java (`Integer.valueOf`, -1 on NumberFormatException) read it so,
and both count the refusal against the retry throttle. Here the same:
`pushback_refuses` says so, wait_hint then gives no wait for that header,
decide() fails a resend with SERVER_PUSHBACK and the failure counts against
the upstream (Outcome.refused_retry). Like the peers' parsers a leading `+`
and leading zeros are accepted, and `-0` is zero; unlike them, whitespace
around the value is allowed (HTTP strips it from field values) and a value
past a day is capped, not refused.

Retry-After is RFC 9110's delay-seconds (ASCII digits) or an HTTP-date.
Some servers send a fraction of a second ("1.5"); RFC 9110 has no such
form, but its meaning is plain and rounding it away (or falling back to the
backoff) waits longer or shorter than asked, so it is read as retry-after-ms
is: a plain non-negative ASCII decimal, capped like the rest. A sign, an
exponent or a word is still malformed.

x-should-retry (OpenAI, Anthropic) is the server's own word on a resend,
and wins over the status in every official SDK (openai-python and
anthropic `_should_retry`, openai-node `shouldRetry`, openai-go
`retryMiddleware`): exactly `true` resends, exactly `false` does not,
anything else says nothing. `should_retry` reads it so (spaces and tabs
around the value ignored, as for the other headers); decide() fails a resend
it forbids with SERVER_PUSHBACK and resends a status it marks retryable,
though never a terminal one. Unlike a refusing pushback it says nothing
about load, so it does not count as throttling.

A hint is capped at MAX_RETRY_AFTER: a server asking for more than a day
says "not today", and a 317-year delay (ten digits of seconds) is neither
useful nor representable everywhere (google.protobuf.Duration ends at
10,000 years; grpcurl prints none past 99,999,999 seconds). The deadline
guard in decide() still fails a step whose wait would outlast its deadline.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Literal

from .limits import MAX_RETRY_AFTER

__all__ = [
    "HintHeader",
    "header",
    "pushback_refuses",
    "retry_after",
    "should_retry",
    "wait_hint",
]

HintHeader = Literal["retry-after-ms", "Retry-After", "grpc-retry-pushback-ms"]

_MAX_SECONDS = MAX_RETRY_AFTER // timedelta(seconds=1)
# More digits than this already mean "over the cap"; int() of thousands of
# digits would raise.
_MAX_DIGITS = 12
# RFC 9110's asctime-date, the one HTTP-date form without a zone, defined as
# GMT. parsedate_to_datetime reads it but leaves it naive, as it leaves every
# date without a zone; only this exact layout may stand for GMT, so that a
# zone left out of another form still names no instant.
_ASCTIME = re.compile(
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
    r" [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}"
)
# retry-after-ms and Retry-After's seconds: a plain non-negative decimal;
# linear, nothing to backtrack.
_DECIMAL = re.compile(r"([0-9]+)(?:\.[0-9]*)?|\.[0-9]+", re.ASCII)
# Any Unicode decimal digit but 0-9: the date parser's int() would read it.
_NON_ASCII_DIGIT = re.compile(r"(?![0-9])\d")


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


def _unsigned(value: str) -> int | None:
    # Only plain ASCII digits: a fraction, a sign or a word is malformed.
    if value and value.isascii() and value.isdigit():
        # Leading zeros are no digits of the bound: "000...07" is 7.
        significant = value.lstrip("0") or "0"
        return int(significant) if len(significant) <= _MAX_DIGITS else 10**_MAX_DIGITS
    return None


def _pushback_ms(value: str) -> int | None:
    """The milliseconds a grpc-retry-pushback-ms value asks to wait, or None
    when it asks not to retry (negative, empty or not an integer)."""
    value = value.strip()
    sign = value[:1]
    ms = _unsigned(value[1:] if sign in ("+", "-") else value)
    if ms is None or (sign == "-" and ms > 0):
        return None
    return ms


def _decimal(value: str, cap: float) -> float | None:
    """A plain non-negative decimal (retry-after-ms in milliseconds,
    Retry-After in seconds) capped at `cap`, or None when it is not one."""
    value = value.strip()
    match = _DECIMAL.fullmatch(value)
    if match is None:
        return None
    # Leading zeros are no digits of the bound: "000...07" is 7.
    whole = (match.group(1) or "").lstrip("0")
    return cap if len(whole) > _MAX_DIGITS else min(float(value), cap)


def pushback_refuses(headers: Mapping[str, str]) -> bool:
    """Whether the server's grpc-retry-pushback-ms asks not to retry (gRFC A6)."""
    if not headers:
        return False
    value = header(headers, "grpc-retry-pushback-ms")
    return value is not None and _pushback_ms(value) is None


def should_retry(headers: Mapping[str, str]) -> bool | None:
    """The server's x-should-retry: True or False when it says exactly
    `true` or `false`, else None (absent, or any other value)."""
    if not headers:
        return None
    value = header(headers, "x-should-retry")
    if value is None:
        return None
    return {"true": True, "false": False}.get(value.strip(" \t"))


def _http_date(value: str) -> datetime | None:
    """The instant an HTTP-date names, or None when it names none.

    The three RFC 9110 forms and what parsedate_to_datetime also reads (a
    numeric or named zone, a missing seconds field...); a value with
    non-ASCII digits is malformed, as it is for seconds.
    """
    if _NON_ASCII_DIGIT.search(value):
        return None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return when.replace(tzinfo=UTC) if _ASCTIME.fullmatch(value.strip()) else None
    return when


def retry_after(headers: Mapping[str, str], clock: Callable[[], float]) -> timedelta | None:
    """The wait the server asked for, or None when it asked for none (or garbage).

    `clock` returns the current Unix time; it is only called for an HTTP-date.
    """
    hint = wait_hint(headers, clock)
    return None if hint is None else hint[0]


def wait_hint(
    headers: Mapping[str, str], clock: Callable[[], float]
) -> tuple[timedelta, HintHeader] | None:
    """The wait the server asked for and the header that asked for it, or None.

    retry-after-ms wins when it parses, then Retry-After; a malformed one
    (or a date naming no instant) leaves the next header to decide. A pushback that asks
    not to retry gives no wait (see pushback_refuses). The header is named
    here, where the choice is made, so an explanation cannot credit the
    wrong one. `clock` returns the current Unix time; it is only called for
    an HTTP-date.
    """
    if not headers:
        return None
    millis = header(headers, "retry-after-ms")
    if millis is not None:
        ms = _decimal(millis, _MAX_SECONDS * 1000.0)
        if ms is not None:
            return timedelta(milliseconds=ms), "retry-after-ms"
    value = header(headers, "retry-after")
    if value is not None:
        seconds = _decimal(value, _MAX_SECONDS)
        if seconds is not None:
            return timedelta(seconds=seconds), "Retry-After"
        when = _http_date(value)
        if when is not None:
            wait = min(max(0.0, when.timestamp() - clock()), _MAX_SECONDS)
            return timedelta(seconds=wait), "Retry-After"
    pushback = header(headers, "grpc-retry-pushback-ms")
    if pushback is not None:
        ms = _pushback_ms(pushback)
        if ms is not None:
            return timedelta(milliseconds=min(ms, _MAX_SECONDS * 1000)), "grpc-retry-pushback-ms"
    return None
