"""The rate-limit header parser: the shared vectors, then properties over
hostile input (hypothesis): it never raises, and every field it returns is
within its bound."""

from __future__ import annotations

import json
import math
import time
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT
from squawk.policy import Quota, RateLimitHint, rate_limit_hint
from squawk.policy.limits import (
    MAX_HEADER_VALUE_CHARS,
    MAX_HEADERS,
    MAX_POLICY_DURATION,
    MAX_RETRY_AFTER,
)
from squawk.policy.outcome import Outcome, is_near_limit
from squawk.policy.ratelimit import MAX_COUNT, spent_quota_wait

CASES = json.loads((ROOT / "tests" / "vectors" / "ratelimit_headers.json").read_text())["cases"]


def _seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


def _quota(expect: dict[str, Any] | None, got: Quota | None) -> Quota | None:
    if expect is None:
        return None
    return Quota(
        expect["limit"],
        expect["remaining"],
        _seconds(expect["reset"]),
        _seconds(expect["window"]),
        expect.get("refills", False),
        # Checked where the vector names it.
        expect.get("grain", got.grain if got is not None else 0.0),
    )


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_vector(case: dict[str, Any]) -> None:
    expect = case["expect"]
    got = rate_limit_hint(case["headers"], case["wall_now"])
    want = (
        None
        if expect is None
        else RateLimitHint(
            _quota(expect["requests"], got.requests if got else None),
            _quota(expect["tokens"], got.tokens if got else None),
        )
    )
    assert got == want


NAMES = sorted(
    {name for case in CASES for name in case["headers"]}
    | {"ratelimit", "ratelimit-policy", "x-ratelimit-reset", "anthropic-ratelimit-tokens-reset"}
)
PIECES = [
    "0",
    "1",
    "60",
    "1e400",
    "nan",
    "-inf",
    "-1",
    ".",
    "..",
    "5.",
    ".5",
    "999999999999999999999",
    "1714564800",
    "1714564800000",
    "h",
    "ms",
    "\u00b5s",
    "1h2m",
    "s1",
    "T",
    "Z",
    "+99:99",
    "2024-05-01T12:00:00Z",
    "9999-12-31T23:59:59-23:59",
    "0001-01-01T00:00:00+23:59",
    '"',
    ",",
    ";",
    "=",
    "r=",
    "q=",
    "w=",
    "t=",
    "qu=",
    " ",
    "\x00",
    "\u0661",
]
VALUES = st.one_of(
    st.text(max_size=80),
    st.lists(st.sampled_from(PIECES), max_size=12).map("".join),
    st.text(alphabet='0123456789.;,="rqtwu ', max_size=600),
)
HEADERS = st.dictionaries(
    st.one_of(st.sampled_from(NAMES), st.sampled_from(NAMES).map(str.upper), st.text(max_size=20)),
    VALUES,
    max_size=MAX_HEADERS,
)
CLOCKS = st.one_of(
    st.floats(0, 4e11),
    st.sampled_from([math.nan, math.inf, -math.inf, -1e300, 1e300, 0.0]),
)


def _bounded(quota: Quota | None) -> None:
    if quota is None:
        return
    assert quota != Quota(None, None, None, None)
    for count in (quota.limit, quota.remaining):
        assert count is None or 0 <= count <= MAX_COUNT
    assert quota.reset is None or timedelta(0) <= quota.reset <= MAX_RETRY_AFTER
    assert quota.window is None or timedelta(0) < quota.window <= MAX_POLICY_DURATION


@settings(max_examples=400, deadline=None)
@given(HEADERS, CLOCKS)
def test_never_raises_and_stays_in_bounds(headers: dict[str, str], wall_now: float) -> None:
    hint = rate_limit_hint(headers, wall_now)
    if hint is not None:
        assert hint.requests is not None or hint.tokens is not None
        _bounded(hint.requests)
        _bounded(hint.tokens)


def test_a_flood_of_the_largest_headers_is_read_in_linear_time() -> None:
    """The server's bound (64 values of 8,192 characters) of the slowest
    shapes: quoted lists and long digit runs. A generous bound: the defect
    is a hang (backtracking or a quadratic scan), not a slow machine."""
    shapes = ['"a";r=1,' * 1024, "9" * MAX_HEADER_VALUE_CHARS, "1h" * 4096, '"' * 8192]
    headers = {
        name: shapes[i % len(shapes)][:MAX_HEADER_VALUE_CHARS]
        for i, name in enumerate(NAMES[:MAX_HEADERS])
    }
    started = time.process_time()
    for _ in range(100):
        rate_limit_hint(headers, 1714564800.0)
    assert time.process_time() - started < 10.0


@settings(max_examples=400, deadline=None)
@given(HEADERS, CLOCKS)
def test_a_spent_quota_wait_never_raises_and_stays_in_bounds(
    headers: dict[str, str], wall_now: float
) -> None:
    spent = spent_quota_wait(headers, wall_now)
    if spent is not None:
        assert timedelta(0) <= spent[0] <= MAX_RETRY_AFTER
        assert spent[1].lower() in {name.lower() for name in headers}


def test_an_absolute_reset_needs_a_finite_clock() -> None:
    """The epoch and RFC 3339 resets are read against the wall clock; one
    that is not a number names no instant, and the delta forms still count."""
    headers = {
        "x-ratelimit-remaining": "0",
        "x-ratelimit-reset": "1714564860",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2024-05-01T12:00:30Z",
    }
    assert spent_quota_wait(headers, math.nan) is None
    assert spent_quota_wait(headers, 1714564800.0) == (timedelta(seconds=60), "x-ratelimit-reset")
    delta = {**headers, "RateLimit": '"a";r=0;t=5'}
    assert spent_quota_wait(delta, math.inf) == (timedelta(seconds=5), "RateLimit")


def _answer(status: int, requests: Quota | None, tokens: Quota | None = None) -> Outcome:
    return Outcome(
        success=status < 400,
        http_status=status,
        hint=RateLimitHint(requests, tokens) if requests or tokens else None,
    )


@pytest.mark.parametrize(
    ("answer", "near"),
    [
        # 80 of 100 used: at the ratio, near (envoyproxy/ratelimit's >= 80 %).
        (_answer(200, Quota(100, 20, None, None)), True),
        (_answer(200, Quota(100, 21, None, None)), False),
        (_answer(200, Quota(100, 0, None, None)), True),
        # The token quota alone near its limit is enough.
        (_answer(200, Quota(100, 90, None, None), Quota(40_000, 1_000, None, None)), True),
        # A refusal is over the limit (a throttle), not near it.
        (_answer(429, Quota(100, 0, None, None)), False),
        # No limit, no remaining, a zero limit, no headers: nothing to say.
        (_answer(200, Quota(None, 3, None, None)), False),
        (_answer(200, Quota(100, None, None, None)), False),
        (_answer(200, Quota(0, 0, None, None)), False),
        (_answer(200, None), False),
    ],
)
def test_an_answer_near_its_quotas_limit(answer: Outcome, near: bool) -> None:
    assert is_near_limit(answer) is near
