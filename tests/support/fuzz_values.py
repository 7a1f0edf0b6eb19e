"""Hostile values for the wire fuzz: numbers at the edges of their types,
wait hints no parser expects, strings that stress regexes and redaction,
and JSON shapes that stress converters and schema readers.

Every function draws from the caller's seeded rng, so a case is rebuilt
exactly from (seed, rpc, index).
"""

from __future__ import annotations

import random
from typing import Any

__all__ = [
    "DURATION_NANOS",
    "DURATION_SECONDS",
    "INT32S",
    "hostile_json",
    "hostile_schema",
    "hostile_string",
    "length",
    "profile_name",
    "wait_headers",
    "wait_value",
]

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

INT32S = (
    *(INT32_MIN, INT32_MIN + 1, -(10**9), -600, -1, 0, 1, 2, 3, 99, 100, 199, 200, 399),
    *(400, 401, 404, 408, 422, 429, 499, 500, 503, 599, 600, 999, 10**9, INT32_MAX - 1, INT32_MAX),
)
# Protobuf's Duration: |seconds| <= 315,576,000,000 and |nanos| <= 999,999,999,
# both of one sign. Each edge, one past it, and the int64/int32 extremes.
DURATION_SECONDS = (
    *(INT64_MIN, -315_576_000_001, -315_576_000_000, -86_400, -1, 0, 1, 3, 86_400),
    *(10**10, 315_576_000_000, 315_576_000_001, INT64_MAX),
)
DURATION_NANOS = (
    *(INT32_MIN, -1_000_000_000, -999_999_999, -1, 0, 1, 500_000_000),
    *(999_999_999, 1_000_000_000, INT32_MAX),
)

# RFC 9110 allows three date forms; these sit far in the past and future,
# at the 32-bit and year-9999 edges, and out of every range a parser checks.
HTTP_DATES = (
    "Fri, 31 Dec 9999 23:59:59 GMT",
    "Mon, 01 Jan 0001 00:00:00 GMT",
    "Thu, 01 Jan 1970 00:00:00 GMT",
    "Tue, 19 Jan 2038 03:14:08 GMT",
    "Sun, 06 Nov 1994 08:49:37 GMT",
    "Sunday, 06-Nov-94 08:49:37 GMT",
    "Sun Nov  6 08:49:37 1994",
    "Fri, 31 Dec 99999 23:59:59 GMT",
    "Sat, 01 Jan 275760 00:00:00 GMT",
    "Mon, 01 Jan 2024 00:00:00 +9999",
    "Mon, 01 Jan 2024 00:00:00 -9999",
    "Mon, 01 Jan 2024 25:61:61 GMT",
    "Mon, 32 Foo 2024 00:00:00 GMT",
    "Mon, 01 Jan 2024 00:00:00",
    "01 Jan 99999999999999999999 00:00:00 GMT",
)
# Each shape names the way it hurts: backtracking, redaction's own regexes,
# case folding that changes length, template scanning, escaping.
_SHAPES = (
    "eyJ-",
    "eyJa.",
    "a",
    "Bearer ",
    "api_key=",
    'password="',
    "://a:b@",
    "a:",
    "{{",
    "${",
    "\\",
    "%",
    "\"'",
    "<",
    "İ",
    "ß",
    "\u212a",
    "\u0301",
    "\u202e",
    "\x00",
    "\r\n",
    "😀",
    "sk-",
    "AKIA",
    "xoxb-",
    "9",
    " ",
    "[REDACTED]",
)
# Printable ASCII and as much again from the rest of the BMP below the surrogates.
_ALPHABET = [chr(c) for c in range(32, 127)] + [chr(c) for c in range(0x80, 0xD800, 0xD800 // 95)]
_TAILS = ("", "!", "\x00", "😀", "=", "@", ".", "}}")
# Strings that look like JSON but hold what a parser must survive. \ud800 is
# a JSON escape for a lone surrogate: the text is valid UTF-8, the decoded
# string is not.
JSONISH = (
    '{"a": "\\ud800"}',
    '"\\udfff\\ud800"',
    '{"a": NaN, "b": Infinity, "c": -Infinity}',
    '{"a": 1e999999}',
    '{"a": -0.0, "b": 5e-324}',
    '{"a": ' + "9" * 5000 + "}",
    "[" * 100_000,
    '{"a":' * 50_000,
)


def length(rng: random.Random) -> int:
    """Mostly short; sometimes long; now and then (0.3%) around the 1 MiB body limit."""
    roll = rng.random()
    if roll < 0.75:
        return rng.randrange(0, 64)
    if roll < 0.957:
        return rng.randrange(64, 4096)
    if roll < 0.997:
        return rng.randrange(4096, 65_536)
    return rng.choice((2**20 - 1, 2**20, 2**20 + 1, 3 * 2**20))


def hostile_string(rng: random.Random, max_len: int | None = None) -> str:
    n = length(rng) if max_len is None else rng.randrange(max_len + 1)
    roll = rng.random()
    if roll < 0.55:
        shape = rng.choice(_SHAPES)
        text = shape * max(1, n // len(shape)) + rng.choice(_TAILS)
    elif roll < 0.75:
        text = rng.choice(JSONISH)[: max_len or None]
    elif roll < 0.9:
        text = "".join(rng.choices(_ALPHABET, k=min(n, 512)))
    else:
        text = rng.choice(
            ("", " ", "default", "None", "null", "0", "-1", "__proto__", "[0]", "a.b")
        )
    # A lone surrogate cannot be serialized; those travel as crafted bytes instead.
    return text.encode("utf-8", "replace").decode("utf-8")


def digit_string(rng: random.Random) -> str:
    n = rng.randrange(10, 21)
    return rng.choice(
        ("9" * n, "1" + "0" * (n - 1), "0" * n + "1", str(rng.randrange(10 ** (n - 1), 10**n)))
    )


# Arabic-Indic and full-width digits are digits to str.isdigit(), not to HTTP.
_MALFORMED_WAITS = (
    *("-1", "1.5", " 3 ", "+3", "1e9", "0x10", "inf", "NaN", "", "3\x00", "3, 4"),
    *("\u0663", "\uff13"),
)


def wait_value(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.4:
        return digit_string(rng)
    if roll < 0.7:
        return rng.choice(HTTP_DATES)
    return rng.choice(_MALFORMED_WAITS)


def wait_headers(rng: random.Random) -> dict[str, str]:
    """Retry-After and grpc-retry-pushback-ms with hostile values, in any case, and noise."""
    headers: dict[str, str] = {}
    names = (
        "Retry-After",
        "retry-after",
        "RETRY-AFTER",
        "grpc-retry-pushback-ms",
        "GRPC-Retry-Pushback-Ms",
    )
    for name in rng.sample(names, rng.randrange(1, 4)):
        headers[name] = wait_value(rng)
    roll = rng.random()
    if roll < 0.1:
        headers |= {f"x-h{i}": "v" * rng.randrange(8) for i in range(rng.choice((100, 2000)))}
    elif roll < 0.3:
        headers[hostile_string(rng)] = hostile_string(rng)
    return headers


def profile_name(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.5:
        return rng.choice(("", "default", "llm"))
    if roll < 0.8:
        return rng.choice(
            ("DEFAULT", " default", "llm\x00", "unknown", "cloudflare-llm", "default\n")
        )
    return hostile_string(rng)


def _number(rng: random.Random) -> float:
    return rng.choice(
        (
            float("nan"),
            float("inf"),
            float("-inf"),
            1e308,
            -1e308,
            5e-324,
            -0.0,
            2.0**53 + 1,
            0.5,
            3.0,
        )
    )


def _width(rng: random.Random) -> int:
    return rng.choice((1, 2, 3, 8)) if rng.random() < 0.99 else 500


def hostile_json(rng: random.Random, depth: int = 0) -> Any:
    """A JSON-like value for a Struct: NaN and infinities, huge and tiny numbers, deep and wide."""
    roll = rng.random()
    if depth > 4 or roll < 0.35:
        return hostile_string(rng, 64) if rng.random() < 0.6 else rng.choice((True, False, None))
    if roll < 0.55:
        return _number(rng)
    if roll < 0.65 and depth == 0:
        # Deep, but within protobuf's recursion limit (wire_bytes crafts the deeper ones).
        value: Any = "bottom"
        for _ in range(rng.choice((5, 10, 20, 30))):
            value = {"a": value} if rng.random() < 0.5 else [value]
        return value
    if roll < 0.8:
        width = _width(rng) if depth == 0 else rng.randrange(4)
        return [hostile_json(rng, depth + 1) for _ in range(width)]
    width = _width(rng) if depth == 0 else rng.randrange(4)
    return {hostile_string(rng, 16): hostile_json(rng, depth + 1) for _ in range(width)}


# Schema keywords with the wrong type, patterns Python's `re` backtracks on
# (or cannot compile), and huge enums; readers must ignore or bound them.
_PATTERNS = (
    "^(a+)+$",
    "(a|a?)+$",
    "^(a|aa)+$",
    "(.*a){12}",
    "^([a-zA-Z0-9]+\\s?)*$",
    "(",
    "[",
    "\\",
    "(?<=a+)b",
    "a{1000000}",
    "(?P<x>a)(?P=x){99999}",
    "^[A-Z]{3}$",
)
_FORMATS = ("date", "date-time", "time", "email", "uri", "regex", "unknown")


def hostile_property(rng: random.Random) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.3:
        return {"type": "string", "pattern": rng.choice(_PATTERNS)}
    if roll < 0.45:
        n = rng.choice((3, 50)) if rng.random() < 0.98 else 10_000
        stem = hostile_string(rng, 40)
        enum: list[Any] = [f"{stem}{i}" for i in range(n)]
        return {"type": rng.choice(("string", "integer", ["string", "null"])), "enum": enum}
    if roll < 0.55:
        return {"type": "string", "format": rng.choice(_FORMATS)}
    if roll < 0.7:
        keyword = rng.choice(("minimum", "maximum", "minLength", "maxLength", "multipleOf"))
        return {"type": "number", keyword: rng.choice((_number(rng), -1, 0, "x", None, [1]))}
    if roll < 0.85:
        return {
            rng.choice(("type", "enum", "required", "properties", "items", "anyOf", "$ref")): (
                hostile_json(rng, 5)
            )
        }
    return {
        "type": "object",
        "properties": {"a": hostile_property(rng)},
        "required": ["a", 1, None],
    }


def hostile_schema(rng: random.Random, keys: list[str]) -> dict[str, Any]:
    if rng.random() < 0.15:
        return {"type": hostile_json(rng, 5), "required": hostile_json(rng, 5)}
    props = {key: hostile_property(rng) for key in keys}
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if rng.random() < 0.5:
        schema["required"] = [
            *rng.sample(keys, min(len(keys), 2)),
            "missing_" + hostile_string(rng, 8),
        ]
    return schema
