"""Secret redaction (squawk.policy.redact): exact outputs, time bound, properties.

The exact outputs are the "redaction" vectors in tests/vectors/decisions.json,
which the Go and TypeScript fallbacks check too; the properties below search
for inputs the tables did not think of.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from squawk.policy import REDACTED, redact
from squawk.policy.redact import _RULES

VECTORS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parents[1] / "vectors" / "decisions.json").read_text(encoding="utf-8")
)["redaction"]


def redact_without_prefilter(text: str) -> str:
    """Every rule's regex on every text: what the word prefilter may only speed up."""
    for rule in _RULES:
        text = rule.pattern.sub(rule.replacement, text)
    return text


@pytest.mark.parametrize("case", VECTORS, ids=lambda c: c["name"])
def test_vectors(case: dict[str, Any]) -> None:
    out = redact(case["input"])
    assert out == case["redacted"]
    for secret in case["secrets"]:
        assert secret not in out


@pytest.mark.parametrize(
    "text",
    [
        "Amadeus API error 400: INVALID CITY CODE: PARIS (check_in 2026-04-01)",
        "error code: 400",
        "status 503",
        "HTTP status 429: rate limit exceeded, retry-after: 3",
        "max_tokens=4096, prompt_tokens: 12, keys: 3, monkey=banana, turkey: 2, MONKEY=1",
        "Basic authentication required; Bearer token missing; token expired",
        "bypass: true, passed: 12 of 12, the session expired",
        "risk-averse task-management desk-top xsk-abcdefghijkl",
        "ssh://git@github.com/org/repo.git",
        f"already clean: password={REDACTED} and Bearer {REDACTED}",
        "",
    ],
)
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert redact(text) == text
    assert redact_without_prefilter(text) == text


# --- the time bound -------------------------------------------------------------

MIB = 1 << 20
# Each unit repeated to 1 MiB: the prefixes every rule starts with, the
# separators it scans, and runs of the characters its quantifiers consume.
HOSTILE_UNITS = [
    *(
        "eyJ-",
        "eyJa.",
        "eyJaaaaaaaa.",
        "sk-",
        "sk-a",
        "a_",
        "a-",
        "a",
        "-",
        "AKIA",
        "SG.a",
        "ya29.",
    ),
    *("password=", 'password="', "password='a ", "password:", 'apiKey: "', "key ", "y:", "=", ":"),
    *("Key=", "x_token=", "secret: ", 'password="a\\', "password=\\", "X-Amz-Signature="),
    *('"password": "', "\npassword", "Bearer ", "Token aB", "basic ", "x://a:", "x://"),
    *("a://a:a@", ":a@", "@", "-----BEGIN PRIVATE KEY-----", "-----BEGIN ", "\n", "\u0041"),
    *("é", "ééé key=", "\u2028", " ", "'", '"'),
]
TIME_BOUND_S = 5.0


@pytest.mark.parametrize("tail", ["", " =x"])
@pytest.mark.parametrize("unit", HOSTILE_UNITS)
def test_hostile_megabyte_is_redacted_in_bounded_time(unit: str, tail: str) -> None:
    """A safety bound, not a benchmark: every rule is linear, so 1 MiB of any
    of these takes well under a second; a quadratic rule takes minutes (the
    old JWT pattern needed 2.9 s for 64 KiB of "eyJ-"). The bound is generous
    so that a loaded machine never fails it."""
    text = (unit * (MIB // len(unit) + 1))[:MIB] + tail
    started = time.process_time()
    redact(text)
    assert time.process_time() - started < TIME_BOUND_S


# --- secrets and the text around them -------------------------------------------


def body(alphabet: str, size: int, extra: int = 40) -> st.SearchStrategy[str]:
    """`size` to `size + extra` characters of `alphabet`, one of them a "Q"."""
    return st.tuples(
        st.text(alphabet, min_size=size - 1, max_size=size - 1 + extra),
        st.integers(0, size + extra),
    ).map(lambda t: t[0][: t[1]] + "Q" + t[0][t[1] :])


# Every secret below holds a "Q"; the text around it never does, so a "Q" in
# the output can only come from a secret that survived.
ALNUM = "ABCDEFGHIJKLMNOPRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
TOKEN = ALNUM + "_-"
TOKENS = st.one_of(
    st.tuples(st.sampled_from(["sk-", "pk-", "rk-", "sk-ant-", "glpat-"]), body(TOKEN, 16)),
    st.tuples(
        st.sampled_from(["sk_live_", "rk_test_", "whsec_", "hf_", "npm_", "shpat_"]),
        body(ALNUM, 32),
    ),
    st.tuples(
        st.sampled_from(["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"]),
        body(ALNUM + "_", 16),
    ),
    st.tuples(st.sampled_from(["xoxb-", "xoxp-", "xapp-"]), body(ALNUM + "-", 8)),
    st.tuples(st.sampled_from(["AIza", "ya29."]), body(TOKEN, 30)),
    st.tuples(st.sampled_from(["dop_v1_", "doo_v1_", "dor_v1_"]), body(ALNUM, 64)),
    st.tuples(
        st.sampled_from(["AKIA", "ASIA"]), body("ABCDEFGHIJKLMNOPRSTUVWXYZ0123456789", 16, 0)
    ),
    st.tuples(
        st.just("eyJ"), st.tuples(body(TOKEN, 8), body(TOKEN, 8), st.text(TOKEN)).map(".".join)
    ),
    st.tuples(st.just("SG."), st.tuples(body(TOKEN, 16), body(TOKEN, 16)).map(".".join)),
).map("".join)
NAMES = st.sampled_from(
    [
        *("password", "DB_PASSWORD", "passwd", "pwd", "pass", "passphrase", "api_key", "apiKey"),
        *("MY_API_KEY", "x-api-key", "X-Api-Key", "AWS_SECRET_ACCESS_KEY", "clientSecret"),
        *("client_secret", "GITHUB_TOKEN", "access_token", "accessToken", "refresh_token"),
        *("private_token", "auth", "auth_token", "Authorization", "appid", "app_key", "hapikey"),
        *("subscription-key", "sig", "signature", "X-Amz-Signature", "X-Goog-Credential"),
        *("X-Amz-Security-Token", "session", "sessionid", "session_id", "jwt", "key", "secret"),
    ]
)
VALUE = body(ALNUM + "._~+/-%", 1)
QUOTED_VALUE = body(ALNUM + " .,;&:=/-", 1)
# (text, the secret in it)
ASSIGNMENTS = st.one_of(
    st.builds(
        lambda n, s, v: (f"{n}{s}{v}", v),
        NAMES,
        st.sampled_from(["=", ": ", ":", " = ", "=>"]),
        VALUE,
    ),
    st.builds(
        lambda n, q, v: (f"{q}{n}{q}: {q}{v}{q}", v),
        NAMES,
        st.sampled_from(['"', "'", '\\"']),
        QUOTED_VALUE,
    ),
    st.builds(lambda n, v: (f"{n}: Bearer {v}", v), NAMES, VALUE),
)
OTHERS = st.one_of(
    # A credential with a digit: one that reads as a word is left alone.
    st.builds(
        lambda s, v: (f"{s} {v}7", v),
        st.sampled_from(["Bearer", "bearer", "Basic", "Token"]),
        body(ALNUM + "._~+/=-", 8),
    ),
    st.builds(
        lambda u, p: (f"https://{u}:{p}@host.example", p),
        st.from_regex(r"[a-z]{0,8}", fullmatch=True),
        body(ALNUM + "!$*:@", 1),
    ),
    st.builds(
        lambda v: (f"-----BEGIN RSA PRIVATE KEY-----\n{v}\n-----END RSA PRIVATE KEY-----", v),
        body(ALNUM + "+/=\n", 16, 200),
    ),
)
SECRETS = st.one_of(TOKENS.map(lambda t: (t, t)), ASSIGNMENTS, OTHERS)

# Pieces that steer the rules into their corners.
FRAGMENTS = [
    *(
        "password",
        "API_KEY",
        "apiKey",
        "XApiKey",
        "token",
        "Authorization",
        "key",
        "monkey",
        "pass",
    ),
    *("=", ": ", "=>", '":"', ":=", '"', "'", '\\"', "\\'", "\\n", "\\t", "\\x0b", "\\u00e9", "\\"),
    *(
        "Bearer ",
        "Basic ",
        "token ",
        "sk-",
        "sk_live_",
        "eyJ",
        "AKIA",
        "ghp_",
        "SG.",
        "ya29.",
        "hf_",
    ),
    *("-----BEGIN PRIVATE KEY-----", "-----END PRIVATE KEY-----", "-----", "https://", "@", "/"),
    *(REDACTED, " ", "\n", "&", ",", ";", "}", "<", "é", "\u2028", "\xa0", "K", "\u212a"),
    *('"x"', "'a b'", "BeArer", "xToken", "0"),
]
# Random text made of those pieces, whole secrets, runs of token characters
# and anything else.
TEXTS = st.lists(
    st.one_of(
        st.sampled_from(FRAGMENTS),
        SECRETS.map(lambda case: case[0]),
        st.text(max_size=4),
        st.from_regex(r"[A-Za-z0-9_-]{1,24}", fullmatch=True),
    ),
    max_size=24,
).map("".join)
AROUND = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4)), max_size=8).map(
    lambda parts: "".join(parts).replace("Q", "")
)
# What may stand right before and after a secret: a character, or an escape,
# that cannot be part of it.
EDGES = st.sampled_from([" ", "\n", "(", ")", ",", ";", '"', "'", "\\n", "\\t", "\\r", "<", ">"])

# --- properties -----------------------------------------------------------------

SETTINGS = settings(
    max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(TEXTS)
def test_redaction_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


@SETTINGS
@given(TEXTS)
def test_prefilter_never_skips_a_rule_that_applies(text: str) -> None:
    assert redact(text) == redact_without_prefilter(text)


@SETTINGS
@given(AROUND, EDGES, SECRETS, EDGES, AROUND)
def test_a_secret_never_survives(
    before: str, left: str, case: tuple[str, str], right: str, after: str
) -> None:
    text, secret = case
    out = redact(before + left + text + right + after)
    assert secret not in out
    assert "Q" not in out


PLAIN_WORDS = st.sampled_from(
    [
        *("error", "Error", "code", "status", "HTTP", "upstream", "request", "failed", "retry"),
        *("after", "timeout", "the", "city", "PARIS", "INVALID", "monkey", "turkey", "MONKEY"),
        *("keys", "tokens", "max_tokens", "passed", "bypass", "authentication", "session"),
        *("expired", "required", "400", "429", "503", "12", "2026-04-01"),
    ]
)
PLAIN_SEPARATORS = st.sampled_from([" ", ": ", "=", ", ", "; ", "\n", " - ", "(", ")", ". "])


@SETTINGS
@given(st.lists(st.tuples(PLAIN_WORDS, PLAIN_SEPARATORS), max_size=30))
def test_ordinary_words_come_back_unchanged(words: list[tuple[str, str]]) -> None:
    text = "".join(w + s for w, s in words)
    # "session" right before ":" or "=" names a secret, as it should.
    assume(not any(w == "session" and s in (": ", "=") for w, s in words))
    assert redact(text) == text
    assert redact_without_prefilter(text) == text
