"""The policy file and the environment overrides."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import pytest

from squawk.daemon.config import ConfigError, apply_env, load_policy, parse_policy
from squawk.policy import Jitter, builtin_policy

EXAMPLE = """
max_body_bytes: 65536
profiles:
  default:
    max_attempts: 4
    backoff:
      initial_delay: 200ms
      max_delay: 5s
      factor: 3
    capabilities:
      search_hotels:
        max_attempts: 6
  llm:
    retryable_statuses: [520, 522]
  batch:
    base: llm
    backoff:
      jitter: full
"""


def test_profiles_and_capability_overrides() -> None:
    policy = parse_policy(EXAMPLE)
    default = policy.profile("default")
    assert default.max_attempts == 4
    assert default.backoff.initial == timedelta(milliseconds=200)
    assert default.backoff.max == timedelta(seconds=5)
    assert default.backoff.factor == 3
    assert default.for_capability("search_hotels").max_attempts == 6
    # An override inherits everything it does not set.
    assert default.for_capability("search_hotels").backoff == default.backoff
    assert default.for_capability("unknown_tool") is default
    assert policy.max_body_bytes == 65536


def test_retryable_statuses_only_add() -> None:
    llm = parse_policy(EXAMPLE).profile("llm")
    assert {429, 500, 502, 503, 504, 529, 520, 522} == set(llm.transient_statuses)


def test_new_profile_from_a_base() -> None:
    batch = parse_policy(EXAMPLE).profile("batch")
    assert batch.base == "llm"
    assert not batch.corrections
    assert batch.backoff.jitter is Jitter.FULL


def test_empty_file_is_the_builtin_policy() -> None:
    assert parse_policy("") == builtin_policy()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("profiles:\n  default:\n    max_attempts: 0\n", "profiles.default.max_attempts (line 3)"),
        ("profiles:\n  default:\n    bogus: 1\n", "profiles.default.bogus (line 3): unknown field"),
        (
            "profiles:\n  default:\n    backoff:\n      initial_delay: fast\n",
            "profiles.default.backoff.initial_delay (line 4)",
        ),
        (
            "profiles:\n  default:\n    backoff:\n      initial_delay: 0s\n",
            "profiles.default.backoff.initial_delay (line 4)",
        ),
        (
            "profiles:\n  default:\n    backoff: {initial_delay: 5s, max_delay: 1s}\n",
            "max_delay is shorter than initial_delay",
        ),
        ("profiles:\n  x:\n    base: grpc\n", "profiles.x.base (line 3)"),
        (
            "profiles:\n  llm:\n    retryable_statuses: [700]\n",
            "profiles.llm.retryable_statuses[0] (line 3)",
        ),
        ("profiles: [1, 2]\n", "profiles (line 1): expected a mapping"),
        ("profiles:\n  default: {max_attempts: [1]}\n", "profiles.default.max_attempts (line 2)"),
        ("listen: 1\n", "policy.listen (line 1): unknown field"),
        ("profiles: {a: 1\n", "not valid YAML"),
        ("max_body_bytes: -5\n", "max_body_bytes (line 1)"),
    ],
)
def test_errors_name_the_field_and_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(text)
    assert message in str(info.value)


def test_load_policy_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("profiles:\n  default:\n    max_attempts: nope\n")
    with pytest.raises(ConfigError, match=r"policy\.yaml: profiles\.default\.max_attempts"):
        load_policy(str(path), environ={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_policy(str(tmp_path / "missing.yaml"), environ={})


def test_env_overrides_the_default_profile() -> None:
    policy = apply_env(
        builtin_policy(),
        {
            "SQUAWK_STEP_RETRY_INITIAL_DELAY": "1s",
            "SQUAWK_STEP_RETRY_MAX_DELAY": "1m30s",
            "SQUAWK_STEP_RETRY_MAX_ATTEMPTS": "5",
        },
    )
    default = policy.profile("default")
    assert default.backoff.initial == timedelta(seconds=1)
    assert default.backoff.max == timedelta(seconds=90)
    assert default.max_attempts == 5
    assert policy.profile("llm") == builtin_policy().profile("llm")


def test_guide_names_are_accepted_and_squawk_names_win() -> None:
    env = {"TRUVAG3_STEP_RETRY_MAX_ATTEMPTS": "7", "TRUVAG3_STEP_RETRY_INITIAL_DELAY": "2s"}
    assert apply_env(builtin_policy(), env).profile("default").max_attempts == 7
    env["SQUAWK_STEP_RETRY_MAX_ATTEMPTS"] = "4"
    default = apply_env(builtin_policy(), env).profile("default")
    assert default.max_attempts == 4
    assert default.backoff.initial == timedelta(seconds=2)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SQUAWK_STEP_RETRY_INITIAL_DELAY", "-1s"),
        ("SQUAWK_STEP_RETRY_INITIAL_DELAY", "0s"),
        ("SQUAWK_STEP_RETRY_MAX_DELAY", "soon"),
        ("SQUAWK_STEP_RETRY_MAX_ATTEMPTS", "0"),
        ("SQUAWK_STEP_RETRY_MAX_ATTEMPTS", "-2"),
        ("SQUAWK_STEP_RETRY_MAX_ATTEMPTS", "three"),
    ],
)
def test_bad_env_values_warn_and_keep_the_default(
    name: str, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        policy = apply_env(builtin_policy(), {name: value})
    assert policy.profile("default") == builtin_policy().profile("default")
    assert name in caplog.text


def test_env_max_below_initial_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    env = {"SQUAWK_STEP_RETRY_INITIAL_DELAY": "20s", "SQUAWK_STEP_RETRY_MAX_DELAY": "1s"}
    with caplog.at_level(logging.WARNING):
        default = apply_env(builtin_policy(), env).profile("default")
    assert default.backoff == builtin_policy().profile("default").backoff
    assert "below initial delay" in caplog.text
