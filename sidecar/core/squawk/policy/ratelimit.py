"""What an upstream says of its own rate limit: the quota headers of the
major LLM and SaaS APIs, read into one RateLimitHint for the pacer.

Forms read (names are case-insensitive; the first family present wins for
each quota, in this order):

Requests
  1. OpenAI (and the OpenAI-compatible APIs that copy it: Azure OpenAI,
     Groq, Together...): ``x-ratelimit-limit-requests``,
     ``x-ratelimit-remaining-requests``, ``x-ratelimit-reset-requests``;
     the reset is a Go duration (``1s``, ``6m0s``, ``20ms``, ``1h2m3.5s``,
     ``0.5s``); a bare number is read as seconds.
  2. Anthropic: ``anthropic-ratelimit-requests-limit``, ``-remaining``,
     ``-reset``; the reset is an RFC 3339 time (``2024-05-01T12:00:30Z``).
  3. The IETF httpapi draft, structured-field form (draft-07 on):
     ``RateLimit: "default";r=50;t=30`` with ``RateLimit-Policy:
     "default";q=100;w=60`` (``r`` remaining, ``t`` seconds to reset, ``q``
     the quota, ``w`` its window; only policies in requests, i.e. without a
     ``qu`` or with ``qu="requests"``). With several policies, the one with
     the fewest remaining; its quota is the policy of the same name.
  4. The older IETF draft (up to -06): ``RateLimit-Limit`` (``10`` or
     ``10, 10;w=1``), ``RateLimit-Remaining``, ``RateLimit-Reset`` (delta
     seconds), ``RateLimit-Policy: 10;w=1``.
  5. GitHub, Discord, Reddit and many SaaS APIs: ``x-ratelimit-limit``,
     ``x-ratelimit-remaining`` (Reddit sends a float, ``598.0``),
     ``x-ratelimit-used``, ``x-ratelimit-reset`` and Discord's
     ``x-ratelimit-reset-after`` (float seconds, preferred: it needs no
     clock); Twitter / X's ``x-rate-limit-limit``, ``-remaining``,
     ``-reset``. Without a limit, ``used + remaining`` is the limit
     (Reddit); without a remaining, ``limit - used`` is (GitHub sends both).

Tokens
  1. OpenAI: ``x-ratelimit-limit-tokens``, ``-remaining-tokens``,
     ``-reset-tokens`` (as for requests).
  2. Anthropic: ``anthropic-ratelimit-tokens-*``, which Anthropic documents
     as the most restrictive token limit in force; without it, the tighter of
     ``anthropic-ratelimit-input-tokens-*`` and ``-output-tokens-*`` (the
     lower remaining / limit share; else the lower remaining), since Admit's
     ``cost`` is one estimate and the first limit hit is the one that throttles.

The OpenAI and Anthropic quotas refill continuously, and their reset is
when the quota is full again (OpenAI: "the time until the rate limit resets
to its initial state"; Anthropic: a token bucket, "the time when the rate
limit will be fully replenished"): Quota.refills says so, and the pacer
reads a refill rate from them. Every other family counts a window that
starts over at its reset.

``x-ratelimit-reset`` is epoch seconds at GitHub, Twitter / X and Discord
and delta seconds at Reddit (and elsewhere), and says nothing of which: by
magnitude, a value below 1e9 (a delta of 31 years, past the cap anyway) is
delta seconds, one below 1e11 epoch seconds (2001 to 5138), and a larger one
epoch milliseconds (which passed 1e11 in 1973).

The IETF fields are structured fields (draft-ietf-httpapi-ratelimit-headers,
RFC 9651): ``q``, ``w``, ``r`` and ``t`` are Integers, so a value with a
fraction or a sign is malformed and ignored, as the draft requires ("Malformed
RateLimit header fields MUST be ignored"). Of two policies with as few
remaining, the one that resets last is the tighter.

A spent quota: ``spent_quota_wait`` answers a different question from
``rate_limit_hint``: not "what is the quota" (one family, for the pacer) but
"is any quota the server named spent, and when does the last of them reset".
GitHub says it for its own headers ("If the x-ratelimit-remaining header is 0,
you should not make another request until after the time specified by the
x-ratelimit-reset header"), the IETF draft for ``r=0`` within ``t`` seconds,
and OpenAI's and Anthropic's resets are when a spent quota is full again. A
request needs every quota it draws on, so every family present is read and
the latest reset of those at remaining 0 wins, whatever its unit: a spent
byte or token quota throttles a request as surely as a spent request quota.
On a tie the first names it, in the families' order above (OpenAI,
Anthropic, the IETF fields, the older draft, x-ratelimit, x-rate-limit;
requests before tokens). decide() waits for it on a 429 that carries no wait
hint (headers.wait_hint).

Hostile input: this never raises. A value it cannot read is ignored (that
field is None): counts must be plain ASCII decimals, finite, in [0, 1e12];
a reset is clamped to [0, MAX_RETRY_AFTER] (a date in the past is 0, one far
ahead the cap); a window must be in (0, MAX_POLICY_DURATION]. A scalar value
over 64 characters (a structured list over 512) is ignored without being
scanned, no pattern can backtrack, and the header map was already bounded at
the server's boundary (limits.check_headers: 64 headers, names of 256 and
values of 8,192 characters), so the cost is linear in the header bytes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from .limits import MAX_POLICY_DURATION, MAX_RETRY_AFTER

__all__ = ["MAX_COUNT", "Quota", "RateLimitHint", "rate_limit_hint", "spent_quota_wait"]

MAX_COUNT = 1e12
_MAX_RESET = MAX_RETRY_AFTER.total_seconds()
_MAX_WINDOW = MAX_POLICY_DURATION.total_seconds()
_MAX_SCALAR_CHARS = 64
_MAX_LIST_CHARS = 512
_MAX_LIST_MEMBERS = 16
# Magnitudes that tell x-ratelimit-reset's forms apart (see the docstring).
_EPOCH_SECONDS = 1e9
_EPOCH_MILLIS = 1e11
_PREFIXES = ("x-ratelimit", "x-rate-limit", "anthropic-ratelimit", "ratelimit")
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+", re.ASCII)
# RFC 9651's Integer without its sign: at most 15 digits.
_SF_INTEGER = re.compile(r"[0-9]{1,15}", re.ASCII)
_GO_UNITS = {
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "\u00b5s": 1e-6,
    "\u03bcs": 1e-6,
    "ns": 1e-9,
}
_NUMBER_CHARS = frozenset("0123456789.")
# The seconds of an RFC 3339 time and their fraction; a value's last number
# and the unit after it (for _grain).
_CLOCK_SECONDS = re.compile(r"[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.([0-9]+))?", re.ASCII)
_LAST_NUMBER = re.compile(r"([0-9]*\.?[0-9]+)([a-z\u00b5\u03bc]*)$", re.ASCII | re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Quota:
    """One window of an upstream's limit, as far as its headers said."""

    limit: float | None
    remaining: float | None
    reset: timedelta | None
    window: timedelta | None
    # The family says its reset is when the quota is full again, refilled
    # continuously (a token bucket: OpenAI's "resets to its initial state",
    # Anthropic's "fully replenished"), not when a window starts over
    # (GitHub, X, Reddit, Discord, the IETF fields). The pacer reads the two
    # differently (squawk.policy.header_quota).
    refills: bool = False
    # How coarsely the reset is written, in seconds: the true reset may be
    # up to this much later (a whole-second time or count: 1; "250ms":
    # 0.001; 0 = exact or none). A rate read from a reset a second short
    # of a one-second bucket would be twice the true one.
    grain: float = 0.0


@dataclass(frozen=True, slots=True)
class RateLimitHint:
    """The upstream's own account of its request and token quotas."""

    requests: Quota | None
    tokens: Quota | None


def _decimal(value: str | None) -> float | None:
    """A plain non-negative ASCII decimal, or None (a sign, an exponent,
    NaN, inf, non-ASCII digits and anything over 64 characters)."""
    if value is None or len(value) > _MAX_SCALAR_CHARS:
        return None
    value = value.strip()
    if not _DECIMAL.fullmatch(value):
        return None
    return float(value)


def _count(value: str | None) -> float | None:
    number = _decimal(value)
    return number if number is not None and number <= MAX_COUNT else None


def _sf_integer(value: str | None) -> float | None:
    """A non-negative structured-field Integer, or None."""
    if value is None:
        return None
    value = value.strip()
    return float(value) if _SF_INTEGER.fullmatch(value) else None


def _sf_count(value: str | None) -> float | None:
    number = _sf_integer(value)
    return number if number is not None and number <= MAX_COUNT else None


def _reset(seconds: float | None) -> timedelta | None:
    if seconds is None or math.isnan(seconds):
        return None
    return timedelta(seconds=min(max(seconds, 0.0), _MAX_RESET))


def _window(seconds: float | None) -> timedelta | None:
    if seconds is None or not 0.0 < seconds <= _MAX_WINDOW:
        return None
    return timedelta(seconds=seconds)


def _go_duration(value: str | None) -> float | None:
    """Seconds in a Go duration (time.ParseDuration's grammar without a
    sign: one or more decimal-and-unit pairs, or a bare 0), or a bare
    decimal read as seconds; None when it is neither."""
    if value is None or len(value) > _MAX_SCALAR_CHARS:
        return None
    value = value.strip()
    bare = _decimal(value)
    if bare is not None:
        return bare
    total, i, end = 0.0, 0, len(value)
    if end == 0:
        return None
    while i < end:
        start = i
        while i < end and value[i] in _NUMBER_CHARS:
            i += 1
        number = _decimal(value[start:i])
        unit_start = i
        while i < end and value[i] not in _NUMBER_CHARS:
            i += 1
        scale = _GO_UNITS.get(value[unit_start:i])
        if number is None or scale is None:
            return None
        total += number * scale
    return total


def _rfc3339(value: str | None, wall_now: float) -> float | None:
    """Seconds from wall_now to an RFC 3339 time with an offset, or None."""
    if value is None or len(value) > _MAX_SCALAR_CHARS or not math.isfinite(wall_now):
        return None
    value = value.strip()
    if not value.isascii() or len(value) < 20 or value[10] not in "Tt":
        return None
    if value[-1] in "zZ":
        value = value[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(value)
        if when.tzinfo is None:
            return None
        return when.timestamp() - wall_now
    except (ValueError, OverflowError):
        return None


def _epoch_or_delta(value: str | None, wall_now: float) -> float | None:
    """x-ratelimit-reset's seconds from now, by the magnitude rule."""
    number = _decimal(value)
    if number is None or number < _EPOCH_SECONDS:
        return number
    if not math.isfinite(wall_now):
        return None
    if number >= _EPOCH_MILLIS:
        number /= 1000.0
    return number - wall_now


def _grain(value: str | None) -> float:
    """How coarsely a reset is written, in seconds: one unit of the last
    digit of its last number (the unit after it, for a Go duration: "1m0s"
    is a whole second, "250ms" a millisecond; an RFC 3339 time's seconds or
    their fraction). 0 for a value none of the readers takes."""
    if value is None or len(value) > _MAX_SCALAR_CHARS:
        return 0.0
    seconds = _CLOCK_SECONDS.search(value)
    if seconds is not None:
        return 10.0 ** -len(seconds.group(1) or "")
    last = _LAST_NUMBER.search(value.strip())
    if last is None:
        return 0.0
    number, unit = last.groups()
    _, _, fraction = number.partition(".")
    scale = _GO_UNITS.get(unit, 1.0)
    if not unit and float(number) >= _EPOCH_MILLIS:
        scale = 1e-3  # epoch milliseconds (see _epoch_or_delta)
    return scale * 10.0 ** -len(fraction)


def _quota(
    limit: float | None,
    remaining: float | None,
    reset: float | None,
    window: float | None = None,
    refills: bool = False,
    grain: float = 0.0,
) -> Quota | None:
    quota = Quota(limit, remaining, _reset(reset), _window(window), refills, grain)
    if (quota.limit, quota.remaining, quota.reset, quota.window) == (None, None, None, None):
        return None
    return quota


def _lowered(headers: Mapping[str, str]) -> dict[str, str]:
    """The rate-limit headers by lower-case name, in one pass over the
    names. An exact lower-case name wins over another spelling of it, as
    in headers.header."""
    found: dict[str, str] = {}
    for key in headers:
        name = key.lower()
        if name.startswith(_PREFIXES) and (name not in found or key == name):
            found[name] = headers[key]
    return found


def _family(found: Mapping[str, str], prefix: str, wall_now: float) -> Quota | None:
    """Anthropic's `<prefix>-limit`, `-remaining` and `-reset` (RFC 3339)."""
    reset = found.get(prefix + "-reset")
    return _quota(
        _count(found.get(prefix + "-limit")),
        _count(found.get(prefix + "-remaining")),
        _rfc3339(reset, wall_now),
        refills=True,
        grain=_grain(reset),
    )


def _share(quota: Quota) -> tuple[float, float]:
    """How tight a quota is, for picking the tighter one: the remaining
    share of the limit, then the remaining count (lower is tighter)."""
    remaining = math.inf if quota.remaining is None else quota.remaining
    if quota.limit:
        return remaining / quota.limit, remaining
    return math.inf, remaining


def _anthropic_tokens(found: Mapping[str, str], wall_now: float) -> Quota | None:
    tokens = _family(found, "anthropic-ratelimit-tokens", wall_now)
    if tokens is not None:
        return tokens
    parts = [
        quota
        for quota in (
            _family(found, "anthropic-ratelimit-input-tokens", wall_now),
            _family(found, "anthropic-ratelimit-output-tokens", wall_now),
        )
        if quota is not None
    ]
    return min(parts, key=_share) if parts else None


def _members(value: str | None) -> list[tuple[str, dict[str, str]]]:
    """A structured-field list (RFC 8941), read loosely: each member's bare
    item and its parameters, split on `,` and `;` outside quoted strings.
    Empty when the value is too long; at most 16 members."""
    if value is None or len(value) > _MAX_LIST_CHARS:
        return []
    members: list[tuple[str, dict[str, str]]] = []
    parts: list[str] = []
    piece: list[str] = []
    quoted = False
    for char in value + ",":
        if char == '"':
            quoted = not quoted
        elif not quoted and char in ",;":
            parts.append("".join(piece).strip())
            piece = []
            if char == ",":
                params = {}
                for param in parts[1:]:
                    key, _, text = param.partition("=")
                    params[key.strip()] = text.strip().strip('"')
                members.append((parts[0].strip('"'), params))
                parts = []
                if len(members) == _MAX_LIST_MEMBERS:
                    break
            continue
        piece.append(char)
    return members


def _fewest_remaining(member: tuple[str, dict[str, str]]) -> tuple[float, float]:
    """The tighter policy sorts first: the fewest remaining, then the
    latest reset (a policy without one resets first)."""
    remaining = _sf_count(member[1].get("r"))
    reset = _sf_integer(member[1].get("t"))
    return (math.inf if remaining is None else remaining, -(reset or 0.0))


def _ietf(found: Mapping[str, str]) -> Quota | None:
    policies: dict[str, dict[str, str]] = {}
    other_units: set[str] = set()
    for name, params in _members(found.get("ratelimit-policy")):
        if params.get("qu", "requests") == "requests":
            policies.setdefault(name, params)
        else:
            other_units.add(name)
    current = [m for m in _members(found.get("ratelimit")) if m[0] not in other_units]
    if current:
        name, params = min(current, key=_fewest_remaining)
        policy = policies.get(name, {})
        quota = _quota(
            _sf_count(policy.get("q")),
            _sf_count(params.get("r")),
            _sf_integer(params.get("t")),
            _sf_integer(policy.get("w")),
            grain=1.0,  # whole seconds (an sf-integer)
        )
        if quota is not None:
            return quota
    named = [(n, p) for n, p in policies.items() if "q" in p]
    if named:
        _, policy = named[0]
        quota = _quota(_sf_count(policy.get("q")), None, None, _sf_integer(policy.get("w")))
        if quota is not None:
            return quota
    return _ietf_older(found, policies)


def _ietf_older(found: Mapping[str, str], policies: Mapping[str, dict[str, str]]) -> Quota | None:
    limits = _members(found.get("ratelimit-limit"))
    limit = _count(limits[0][0]) if limits else None
    window = None
    for item, params in [*limits[1:], *policies.items()]:
        if "w" in params and (limit is None or _count(item) == limit):
            limit = _count(item) if limit is None else limit
            window = _decimal(params["w"])
            break
    reset = found.get("ratelimit-reset")
    return _quota(
        limit,
        _count(found.get("ratelimit-remaining")),
        _decimal(reset),
        window,
        grain=_grain(reset),
    )


def _generic(found: Mapping[str, str], prefix: str, wall_now: float) -> Quota | None:
    limit = _count(found.get(prefix + "-limit"))
    remaining = _count(found.get(prefix + "-remaining"))
    used = _count(found.get(prefix + "-used"))
    if limit is None and remaining is not None and used is not None:
        limit = used + remaining
    if remaining is None and limit is not None and used is not None:
        remaining = max(limit - used, 0.0)
    text = found.get(prefix + "-reset-after")
    reset = _decimal(text)
    if reset is None:
        text = found.get(prefix + "-reset")
        reset = _epoch_or_delta(text, wall_now)
    return _quota(limit, remaining, reset, grain=_grain(text))


def _openai(found: Mapping[str, str], kind: str) -> Quota | None:
    reset = found.get("x-ratelimit-reset-" + kind)
    return _quota(
        _count(found.get("x-ratelimit-limit-" + kind)),
        _count(found.get("x-ratelimit-remaining-" + kind)),
        _go_duration(reset),
        refills=True,
        grain=_grain(reset),
    )


def _requests(found: Mapping[str, str], wall_now: float) -> Quota | None:
    # In order, each read only when the ones before it gave nothing.
    return (
        _openai(found, "requests")
        or _family(found, "anthropic-ratelimit-requests", wall_now)
        or _ietf(found)
        or _generic(found, "x-ratelimit", wall_now)
        or _generic(found, "x-rate-limit", wall_now)
    )


def rate_limit_hint(headers: Mapping[str, str], wall_now: float) -> RateLimitHint | None:
    """The upstream's rate-limit headers as a RateLimitHint, or None when
    none is present (or none parses).

    `wall_now` is the current Unix time (time.time()), read only for the
    epoch-seconds and RFC 3339 resets. Never raises (see the module's
    docstring for the bounds).
    """
    if not headers:
        return None
    found = _lowered(headers)
    if not found:
        return None
    requests = _requests(found, wall_now)
    tokens = _openai(found, "tokens") or _anthropic_tokens(found, wall_now)
    if requests is None and tokens is None:
        return None
    return RateLimitHint(requests, tokens)


def _resets(
    found: Mapping[str, str], wall_now: float
) -> Iterator[tuple[float | None, float | None, str]]:
    """Every quota's remaining count, seconds to its reset and the header
    that gave the reset, family by family in the module's order."""
    for kind in ("requests", "tokens"):
        name = "x-ratelimit-reset-" + kind
        remaining = _count(found.get("x-ratelimit-remaining-" + kind))
        yield remaining, _go_duration(found.get(name)), name
    for kind in ("requests", "tokens", "input-tokens", "output-tokens"):
        prefix = "anthropic-ratelimit-" + kind
        remaining = _count(found.get(prefix + "-remaining"))
        yield remaining, _rfc3339(found.get(prefix + "-reset"), wall_now), prefix + "-reset"
    for _, params in _members(found.get("ratelimit")):
        yield _sf_count(params.get("r")), _sf_integer(params.get("t")), "RateLimit"
    remaining = _count(found.get("ratelimit-remaining"))
    yield remaining, _decimal(found.get("ratelimit-reset")), "RateLimit-Reset"
    for prefix in ("x-ratelimit", "x-rate-limit"):
        remaining = _count(found.get(prefix + "-remaining"))
        after = _decimal(found.get(prefix + "-reset-after"))
        if after is not None:
            yield remaining, after, prefix + "-reset-after"
        else:
            yield (
                remaining,
                _epoch_or_delta(found.get(prefix + "-reset"), wall_now),
                prefix + "-reset",
            )


def spent_quota_wait(headers: Mapping[str, str], wall_now: float) -> tuple[timedelta, str] | None:
    """How long until the last spent quota resets, and the header that says
    so; None when no quota is at remaining 0 with a readable reset.

    Clamped as every reset is (a reset in the past is 0, one past a day the
    cap); `wall_now` (Unix time) is read only for the absolute resets.
    """
    if not headers:
        return None
    found = _lowered(headers)
    latest: tuple[timedelta, str] | None = None
    for remaining, seconds, name in _resets(found, wall_now):
        reset = _reset(seconds)
        if remaining == 0 and reset is not None and (latest is None or reset > latest[0]):
            latest = reset, name
    return latest
