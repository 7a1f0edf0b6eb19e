"""The fallback's data file agrees with the policy core.

The core keeps the rules; clients/fallback/contract.json holds the numbers
the Go and TypeScript fallbacks are generated from (docs/fallback.md). Each
number is read back from the core, through its public names where it has
them and by what the core answers where it has not, so that a change on
either side fails here.
"""

from __future__ import annotations

import json
import math
from datetime import timedelta
from typing import Any

from conftest import ROOT
from squawk.policy import BackoffConfig, Category, builtin_policy, delay
from squawk.policy.classify import tool_status
from squawk.policy.env import apply_env
from squawk.policy.limits import MAX_RETRY_AFTER
from squawk.policy.profiles import DEFAULT_MAX_BODY_BYTES, STEP_TRANSIENT, TERMINAL

CONTRACT: dict[str, Any] = json.loads(
    (ROOT / "clients" / "fallback" / "contract.json").read_text(encoding="utf-8")
)
DEFAULT = builtin_policy().profile(CONTRACT["profile"]["name"])


def _row(row: list[Any]) -> tuple[int, Category, str]:
    return (row[0], Category[row[1]], row[2])


def test_the_status_sets_are_the_default_profiles() -> None:
    transient = CONTRACT["transientStatuses"]
    listed = {*transient["statuses"], *range(transient["from"], transient["to"] + 1)}
    assert listed == DEFAULT.transient_statuses == STEP_TRANSIENT
    assert set(CONTRACT["terminalStatuses"]) == DEFAULT.terminal_statuses == TERMINAL


def test_the_classification_table_is_the_cores() -> None:
    table = CONTRACT["classification"]
    for status, row in table["table"].items():
        assert tool_status(int(status)) == _row(row), status
    assert tool_status(0) == _row(table["noStatus"])
    listed = {int(s) for s in table["table"]}
    for status in range(100, 600):
        if status in listed:
            continue
        if 400 <= status < 500:
            want = table["other4xx"]
        elif status >= 500:
            want = table["other5xx"]
        else:
            want = table["otherStatus"]
        assert tool_status(status) == _row(want), status


def test_the_default_profiles_numbers() -> None:
    profile, backoff = CONTRACT["profile"], CONTRACT["profile"]["backoff"]
    assert DEFAULT.max_attempts == profile["maxAttempts"]
    assert DEFAULT.max_retry_wait == timedelta(milliseconds=profile["maxRetryWaitMs"])
    assert DEFAULT.backoff == BackoffConfig(
        initial=timedelta(milliseconds=backoff["initialMs"]),
        max=timedelta(milliseconds=backoff["maxMs"]),
        factor=backoff["factor"],
    )


def test_the_backoff_formula_with_the_contracts_jitter() -> None:
    """docs/fallback.md's formula, with the data file's numbers, is what the
    core waits, up to the far attempts where the cap and a negative sine meet."""
    b = CONTRACT["profile"]["backoff"]
    for attempt in [*range(1, 40), 1024, 1025, 5000]:
        base = min(b["initialMs"] * b["factor"] ** min(attempt - 1, 1024), b["maxMs"])
        ms = min(base * (1 + b["sineJitter"] * math.sin(attempt)), b["maxMs"])
        assert delay(attempt, DEFAULT.backoff) == timedelta(milliseconds=round(ms)), attempt


def test_the_limits() -> None:
    limits = CONTRACT["limits"]
    assert limits["maxBodyBytes"] == DEFAULT_MAX_BODY_BYTES == builtin_policy().max_body_bytes
    assert timedelta(milliseconds=limits["maxRetryAfterMs"]) == MAX_RETRY_AFTER


def test_each_environment_prefix_overrides_the_default_profile() -> None:
    for prefix in CONTRACT["envPrefixes"]:
        policy, _ = apply_env(builtin_policy(), {f"{prefix}MAX_ATTEMPTS": "7"})
        assert policy.profile("default").max_attempts == 7, prefix
    first, second = CONTRACT["envPrefixes"]
    both = {f"{first}MAX_ATTEMPTS": "5", f"{second}MAX_ATTEMPTS": "7"}
    assert apply_env(builtin_policy(), both)[0].profile("default").max_attempts == 5
    unknown, _ = apply_env(builtin_policy(), {"OTHER_STEP_RETRY_MAX_ATTEMPTS": "7"})
    assert unknown.profile("default").max_attempts == CONTRACT["profile"]["maxAttempts"]
