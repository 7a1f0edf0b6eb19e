"""The policy file's `rate_limit:` (profiles and `upstreams:` entries)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from conftest import squawk
from squawk.daemon.config import ConfigError, parse_policy
from squawk.policy import Criticality, RateLimitConfig

PACED = """\
profiles:
  default:
    rate_limit: {rate: 50, burst: 10, token_rate: 30000, token_burst: 60000, learn: false,
                 quiet: 10s, max_queue_delay: 2s, concurrency: false}
    upstreams:
      api.example:
        rate_limit: {rate: 5}
  llm:
    max_attempts: 4
"""


def test_rate_limit_per_profile_and_merged_into_an_upstream_entry() -> None:
    profile = parse_policy(PACED).profile("default")
    own = RateLimitConfig(
        rate=50,
        burst=10,
        token_rate=30_000,
        token_burst=60_000,
        learn=False,
        quiet=timedelta(seconds=10),
        max_queue_delay=timedelta(seconds=2),
        concurrency=False,
    )
    assert profile.for_upstream("anything").rate_limit == own
    # The entry overrides its own field and keeps the profile's others.
    assert profile.for_upstream("api.example").rate_limit == RateLimitConfig(
        rate=5,
        burst=10,
        token_rate=30_000,
        token_burst=60_000,
        learn=False,
        quiet=timedelta(seconds=10),
        max_queue_delay=timedelta(seconds=2),
        concurrency=False,
    )
    # A profile that says nothing paces nothing.
    assert parse_policy(PACED).profile("llm").for_upstream("x").rate_limit == RateLimitConfig()


_RL = "profiles:\n  default:\n    rate_limit:\n"
_UP = "profiles:\n  default:\n    upstreams:\n      api.example:\n        rate_limit:\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _RL + "      rate: 0\n",
            "profiles.default.rate_limit.rate (line 4): must be in (0, 1e+06]",
        ),
        (_RL + "      rate: nan\n", "rate_limit.rate (line 4): must be in (0, 1e+06], got nan"),
        (_RL + "      rate: 1e400\n", "rate_limit.rate (line 4): must be in (0, 1e+06], got inf"),
        (_RL + "      rate: -3\n", "rate_limit.rate (line 4): must be in (0, 1e+06]"),
        (_RL + "      rate: 1.0e-300\n", "rate_limit.rate (line 4): must be at least one a day"),
        (
            _RL + "      token_rate: 1.0e-300\n",
            "rate_limit.token_rate (line 4): must be at least one a day",
        ),
        (_RL + "      rate: fast\n", "rate_limit.rate (line 4): expected a number"),
        (_RL + "      burst: 0\n", "rate_limit.burst (line 4): must be in 1..1000000"),
        (_RL + "      burst: 2.5\n", "rate_limit.burst (line 4): expected an integer"),
        (_RL + "      token_rate: 2e9\n", "rate_limit.token_rate (line 4): must be in (0, 1e+09]"),
        (_RL + "      token_burst: -1\n", "rate_limit.token_burst (line 4): must be in [0, 1e+09]"),
        (_RL + "      learn: sometimes\n", "rate_limit.learn (line 4): expected true or false"),
        (_RL + "      quiet: 0s\n", "rate_limit.quiet (line 4): must be positive"),
        (_RL + "      max_queue_delay: 8d\n", "rate_limit.max_queue_delay (line 4)"),
        (_RL + "      limit: 5\n", "rate_limit.limit (line 4): unknown field"),
        (
            _RL + "      criticality: low\n",
            "rate_limit.criticality (line 4): expected one of CRITICAL_PLUS, CRITICAL, "
            "SHEDDABLE_PLUS, SHEDDABLE, got 'low'",
        ),
        (
            _UP + "          rate: nan\n",
            "profiles.default.upstreams.api.example.rate_limit.rate (line 6): must be in (0, ",
        ),
    ],
)
def test_a_rate_limit_error_names_the_field_its_path_and_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(text)
    assert message in str(info.value)


def test_check_policy_prints_the_error(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(_UP + "          burst: 0\n")
    done = squawk("check-policy", str(path))
    assert done.returncode == 2
    assert "upstreams.api.example.rate_limit.burst (line 6): must be in 1..1000000" in done.stderr


def test_a_default_criticality_for_calls_that_send_none() -> None:
    policy = parse_policy(
        "profiles:\n  batch:\n    rate_limit: {criticality: SHEDDABLE}\n"
        "    upstreams:\n      chat:\n        rate_limit: {criticality: CRITICAL_PLUS}\n"
    )
    batch = policy.profile("batch")
    assert batch.for_upstream("any").rate_limit.criticality is Criticality.SHEDDABLE
    assert batch.for_upstream("chat").rate_limit.criticality is Criticality.CRITICAL_PLUS
    assert RateLimitConfig().criticality is Criticality.CRITICAL
