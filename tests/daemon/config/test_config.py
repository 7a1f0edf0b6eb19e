"""The policy file and the environment overrides."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from squawk.daemon.config import ConfigError, apply_env, load_policy, parse_config, parse_policy
from squawk.policy import (
    BreakerConfig,
    Jitter,
    RatioBudgetConfig,
    TokenBucketConfig,
    UpstreamConfig,
    builtin_policy,
    parse_duration,
)
from squawk.policy.backoff import format_duration

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


def test_max_retry_wait_is_a_rule_of_the_profile_and_its_capabilities() -> None:
    """5 minutes unless the file says otherwise, as max_cool_down; a
    capability inherits the profile's and may set its own."""
    assert builtin_policy().profile("default").max_retry_wait == timedelta(minutes=5)
    assert builtin_policy().profile("llm").max_retry_wait == timedelta(minutes=5)
    policy = parse_policy(
        "profiles:\n  default:\n    max_retry_wait: 1h\n"
        "    capabilities:\n      search: {max_attempts: 5}\n      pay: {max_retry_wait: 10s}\n"
    )
    default = policy.profile("default")
    assert default.max_retry_wait == timedelta(hours=1)
    assert default.for_capability("search").max_retry_wait == timedelta(hours=1)
    assert default.for_capability("pay").max_retry_wait == timedelta(seconds=10)


def test_retryable_statuses_only_add() -> None:
    llm = parse_policy(EXAMPLE).profile("llm")
    assert {429, 500, 502, 503, 504, 529, 520, 522} == set(llm.transient_statuses)


NEVER_RETRIED = "is a terminal status in this profile, so it is never retried"


@pytest.mark.parametrize(
    ("text", "warnings"),
    [
        # 401/403/405 are decided terminal before the transient set is read.
        (
            "profiles:\n  default:\n    retryable_statuses: [404, 401, 302]\n",
            [f"p.yaml: profiles.default.retryable_statuses (line 3): 401 {NEVER_RETRIED}"],
        ),
        (
            "profiles:\n"
            "  default:\n"
            "    capabilities:\n"
            "      pay:\n"
            "        retryable_statuses:\n"
            "          - 520\n"
            "          - 403\n"
            "          - 405\n",
            [
                f"p.yaml: profiles.default.capabilities.pay.retryable_statuses (line 7): "
                f"403 {NEVER_RETRIED}",
                f"p.yaml: profiles.default.capabilities.pay.retryable_statuses (line 8): "
                f"405 {NEVER_RETRIED}",
            ],
        ),
        # llm has no terminal statuses: a 401 added there is resent.
        ("profiles:\n  cf:\n    base: llm\n    retryable_statuses: [401]\n", []),
        # A 1xx-3xx in the transient set is resent like any other: not dead.
        ("profiles:\n  default:\n    retryable_statuses: [302, 520]\n", []),
    ],
)
def test_a_status_that_can_never_be_retried_is_a_warning(text: str, warnings: list[str]) -> None:
    config = parse_config(text, "p.yaml")
    assert list(config.warnings) == warnings


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


_ATTEMPTS = "profiles:\n  default:\n    max_attempts: {}\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _ATTEMPTS.format("three"),
            "profiles.default.max_attempts (line 3): expected an integer >= 1, got 'three'",
        ),
        # YAML's true is not 1, nor is 3.0 an integer.
        (
            _ATTEMPTS.format("true"),
            "profiles.default.max_attempts (line 3): expected an integer >= 1, got 'true'",
        ),
        (
            _ATTEMPTS.format("3.0"),
            "profiles.default.max_attempts (line 3): expected an integer >= 1, got '3.0'",
        ),
        (
            "profiles:\n  default:\n    max_validation_retries: some\n",
            "profiles.default.max_validation_retries (line 3): expected an integer >= 0, "
            "got 'some'",
        ),
        (
            "profiles:\n  default:\n    backoff:\n      jitter: random\n",
            "profiles.default.backoff.jitter (line 4): "
            "expected none, sine, full or decorrelated, got 'random'",
        ),
        (
            "profiles:\n  default:\n    backoff: {factor: double}\n",
            "profiles.default.backoff.factor (line 3): expected a number >= 1, got 'double'",
        ),
        (
            "profiles:\n  llm:\n    retryable_statuses: [5xx]\n",
            "profiles.llm.retryable_statuses[0] (line 3): expected an HTTP status (100..599), "
            "got '5xx'",
        ),
        ("max_body_bytes: 1MB\n", "max_body_bytes (line 1): expected an integer >= 1, got '1MB'"),
        (
            "profiles:\n  default:\n    circuit_breaker: {minimum_calls: 2.5}\n",
            "profiles.default.circuit_breaker.minimum_calls (line 3): "
            "expected an integer, got '2.5'",
        ),
        (
            "profiles:\n  default:\n    retry_budget: {ratio: half}\n",
            "profiles.default.retry_budget.ratio (line 3): expected a number, got 'half'",
        ),
    ],
)
def test_a_value_of_the_wrong_kind_says_what_was_expected(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(text)
    assert str(info.value) == message


def test_broken_yaml_names_the_file_once_and_the_place(tmp_path: Path) -> None:
    path = tmp_path / "b.yaml"
    # The stray key on line 3 starts in column 2.
    path.write_text("profiles:\n  - a\n b: 1\n")
    with pytest.raises(ConfigError) as info:
        load_policy(str(path), environ={})
    message = str(info.value)
    assert message.startswith(f"{path}: not valid YAML at line 3, column 2: ")
    assert message.count(str(path)) == 1
    assert "<unicode string>" not in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "place"),
    [
        # Column 5: the bell character after "a: 1".
        ("a: 1\x07\n", "line 1, column 5"),
        ("a: 1\n---\nb: 2\n", "line 2, column 1"),
    ],
)
def test_other_yaml_problems_name_the_place_in_one_line(text: str, place: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(text)
    message = str(info.value)
    assert message.startswith(f"not valid YAML at {place}: ")
    assert "\n" not in message and "<unicode string>" not in message


def test_a_file_not_in_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("profiles:\n  caf\u00e9: {}\n".encode("latin-1"))
    with pytest.raises(ConfigError) as info:
        load_policy(str(path), environ={})
    assert str(info.value) == f"{path}: not UTF-8 text"


def test_load_policy_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("profiles:\n  default:\n    max_attempts: nope\n")
    with pytest.raises(ConfigError, match=r"policy\.yaml: profiles\.default\.max_attempts"):
        load_policy(str(path), environ={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_policy(str(tmp_path / "missing.yaml"), environ={})


def test_env_overrides_the_default_profile() -> None:
    policy, warnings = apply_env(
        builtin_policy(),
        {
            "SQUAWK_STEP_RETRY_INITIAL_DELAY": "1s",
            "SQUAWK_STEP_RETRY_MAX_DELAY": "1m30s",
            "SQUAWK_STEP_RETRY_MAX_ATTEMPTS": "5",
        },
    )
    assert warnings == ()
    default = policy.profile("default")
    assert default.backoff.initial == timedelta(seconds=1)
    assert default.backoff.max == timedelta(seconds=90)
    assert default.max_attempts == 5
    assert policy.profile("llm") == builtin_policy().profile("llm")


def test_guide_names_are_accepted_and_squawk_names_win() -> None:
    env = {"TRUVAG3_STEP_RETRY_MAX_ATTEMPTS": "7", "TRUVAG3_STEP_RETRY_INITIAL_DELAY": "2s"}
    assert apply_env(builtin_policy(), env)[0].profile("default").max_attempts == 7
    env["SQUAWK_STEP_RETRY_MAX_ATTEMPTS"] = "4"
    default = apply_env(builtin_policy(), env)[0].profile("default")
    assert default.max_attempts == 4
    assert default.backoff.initial == timedelta(seconds=2)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SQUAWK_STEP_RETRY_INITIAL_DELAY", "-1s"),
        ("SQUAWK_STEP_RETRY_INITIAL_DELAY", "0s"),
        ("SQUAWK_STEP_RETRY_MAX_DELAY", "soon"),
        # Past MAX_POLICY_DURATION, or past any duration at all (an OverflowError).
        ("SQUAWK_STEP_RETRY_MAX_DELAY", "2000000000h"),
        ("SQUAWK_STEP_RETRY_MAX_DELAY", "99999999999999999999h"),
        ("SQUAWK_STEP_RETRY_MAX_ATTEMPTS", "0"),
        ("SQUAWK_STEP_RETRY_MAX_ATTEMPTS", "-2"),
        ("SQUAWK_STEP_RETRY_MAX_ATTEMPTS", "three"),
    ],
)
def test_bad_env_values_warn_and_keep_the_default(name: str, value: str) -> None:
    policy, warnings = apply_env(builtin_policy(), {name: value})
    assert policy.profile("default") == builtin_policy().profile("default")
    assert [name in w for w in warnings] == [True]


def test_env_max_below_initial_is_refused() -> None:
    env = {"SQUAWK_STEP_RETRY_INITIAL_DELAY": "20s", "SQUAWK_STEP_RETRY_MAX_DELAY": "1s"}
    policy, warnings = apply_env(builtin_policy(), env)
    assert policy.profile("default").backoff == builtin_policy().profile("default").backoff
    assert warnings == (
        "ignoring SQUAWK_STEP_RETRY_INITIAL_DELAY=20s and SQUAWK_STEP_RETRY_MAX_DELAY=1s: "
        "the max delay 1s would be below the initial delay 20s; "
        "keeping initial delay 500ms, max delay 10s",
    )


def test_the_config_loader_logs_what_the_env_overlay_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        load_policy(None, environ={"SQUAWK_STEP_RETRY_MAX_ATTEMPTS": "three"})
    assert caplog.messages == [
        "ignoring SQUAWK_STEP_RETRY_MAX_ATTEMPTS='three': expected an integer >= 1; "
        "keeping the default"
    ]


@pytest.mark.parametrize("text", ["500ms", "10s", "1m30s", "2h", "1s500ms", "1ms500us", "0s"])
def test_a_duration_is_shown_as_it_is_written(text: str) -> None:
    assert format_duration(parse_duration(text)) == text


def test_env_initial_above_the_policys_max_names_the_variable() -> None:
    policy, warnings = apply_env(builtin_policy(), {"SQUAWK_STEP_RETRY_INITIAL_DELAY": "20s"})
    assert policy.profile("default").backoff == builtin_policy().profile("default").backoff
    assert warnings == (
        "ignoring SQUAWK_STEP_RETRY_INITIAL_DELAY=20s: "
        "the max delay 10s would be below the initial delay 20s; "
        "keeping initial delay 500ms, max delay 10s",
    )


UPSTREAMS = """
max_upstreams: 500
profiles:
  default:
    circuit_breaker:
      failure_ratio: 0.25
      window: 30s
      buckets: 7
    retry_budget: {ratio: 0.1}
    upstreams:
      amadeus:
        circuit_breaker: {open_for: 10s}
        share_retry_after: false
      openai:
        retry_budget: {kind: token_bucket, max_tokens: 20}
    capabilities:
      search_hotels:
        max_attempts: 6
  llm:
    retry_budget: {kind: token_bucket, token_ratio: 0.5}
"""


def test_upstream_settings_per_profile_and_per_upstream() -> None:
    policy = parse_policy(UPSTREAMS)
    assert policy.max_upstreams == 500
    default = policy.profile("default")
    own = default.for_upstream("anything else")
    assert own.circuit_breaker == BreakerConfig(
        failure_ratio=0.25, window=timedelta(seconds=30), buckets=7
    )
    assert own.retry_budget == RatioBudgetConfig(ratio=0.1)
    assert own.share_retry_after
    # An upstream entry starts from its profile's settings and overrides only its own fields.
    amadeus = default.for_upstream("amadeus")
    assert amadeus.circuit_breaker == replace(own.circuit_breaker, open_for=timedelta(seconds=10))
    assert (amadeus.retry_budget, amadeus.share_retry_after) == (own.retry_budget, False)
    # Another kind starts from that kind's defaults.
    assert default.for_upstream("openai").retry_budget == TokenBucketConfig(max_tokens=20)
    # Capabilities share the profile's settings: the state is kept per profile.
    assert default.for_capability("search_hotels").for_upstream("amadeus") == amadeus
    assert policy.profile("llm").for_upstream("x").retry_budget == TokenBucketConfig(
        token_ratio=0.5
    )


def test_upstream_settings_default_when_the_file_is_silent() -> None:
    policy = parse_policy("profiles:\n  default:\n    max_attempts: 4\n")
    assert policy.max_upstreams == 10_000
    config = policy.profile("default").for_upstream("amadeus")
    assert config == UpstreamConfig(BreakerConfig(), RatioBudgetConfig(), share_retry_after=True)


_CB = "profiles:\n  default:\n    circuit_breaker:\n"
_RB = "profiles:\n  default:\n    retry_budget:\n"
_UP = "profiles:\n  default:\n    upstreams:\n      amadeus:\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _CB + "      failure_ratio: 1.5\n",
            "circuit_breaker.failure_ratio (line 4): must be in (0, 1]",
        ),
        (
            _CB + "      failure_ratio: 0\n",
            "circuit_breaker.failure_ratio (line 4): must be in (0, 1]",
        ),
        (
            _CB + "      failure_ratio: half\n",
            "circuit_breaker.failure_ratio (line 4): expected a number",
        ),
        (
            _CB + "      close_ratio: nan\n",
            "circuit_breaker.close_ratio (line 4): must be in (0, 1]",
        ),
        (_CB + "      minimum_calls: 0\n", "circuit_breaker.minimum_calls (line 4): must be >= 1"),
        (
            _CB + "      minimum_calls: 2.5\n",
            "circuit_breaker.minimum_calls (line 4): expected an integer",
        ),
        (_CB + "      buckets: 1001\n", "circuit_breaker.buckets (line 4): must be in 1..1000"),
        (
            _CB + "      half_open_probes: 0\n",
            "circuit_breaker.half_open_probes (line 4): must be >= 1",
        ),
        (_CB + "      window: 0s\n", "circuit_breaker.window (line 4): must be positive"),
        (_CB + "      open_for: soon\n", "circuit_breaker.open_for (line 4): expected a duration"),
        (
            _CB + "      enabled: maybe\n",
            "circuit_breaker.enabled (line 4): expected true or false",
        ),
        (_CB + "      threshold: 3\n", "circuit_breaker.threshold (line 4): unknown field"),
        (
            "profiles:\n  default:\n    circuit_breaker: 5\n",
            "circuit_breaker (line 3): expected a mapping",
        ),
        (_RB + "      kind: leaky\n", "retry_budget.kind (line 4): expected ratio or token_bucket"),
        (
            _RB + "      max_tokens: 5\n",
            "retry_budget.max_tokens (line 4): not a field of kind ratio",
        ),
        (
            _RB + "      kind: token_bucket\n      ttl: 5s\n",
            "retry_budget.ttl (line 5): not a field of kind token_bucket",
        ),
        (_RB + "      ratio: -1\n", "retry_budget.ratio (line 4): must be in [0, 10]"),
        (_RB + "      ratio: 11\n", "retry_budget.ratio (line 4): must be in [0, 10]"),
        (_RB + "      min_per_second: -1\n", "retry_budget.min_per_second (line 4): must be >= 0"),
        (_RB + "      ttl: 0ms\n", "retry_budget.ttl (line 4): must be positive"),
        (
            _RB + "      kind: token_bucket\n      max_tokens: 0\n",
            "retry_budget.max_tokens (line 5): must be in (0, 1000]",
        ),
        (
            _RB + "      kind: token_bucket\n      token_ratio: 0.0001\n",
            "retry_budget.token_ratio (line 5): must be at least 0.001",
        ),
        (
            "profiles:\n  default:\n    share_retry_after: sometimes\n",
            "share_retry_after (line 3): expected true or false",
        ),
        (
            "profiles:\n  default:\n    max_cool_down: 25h\n",
            "profiles.default.max_cool_down (line 3): must be between 1s and 24h, got 90000s",
        ),
        (
            "profiles:\n  default:\n    max_retry_wait: 25h\n",
            "profiles.default.max_retry_wait (line 3): must be between 1s and 24h, got 90000s",
        ),
        (
            "profiles:\n  default:\n    capabilities:\n      pay:\n        max_retry_wait: 500ms\n",
            "profiles.default.capabilities.pay.max_retry_wait (line 5): "
            "must be between 1s and 24h, got 0.5s",
        ),
        (
            "profiles:\n  default:\n    max_retry_wait: an hour\n",
            "profiles.default.max_retry_wait (line 3): expected a duration such as 5m",
        ),
        (
            _UP + "        max_retry_wait: 1m\n",
            "profiles.default.upstreams.amadeus.max_retry_wait (line 5): unknown field",
        ),
        (
            _UP + "        max_cool_down: 500ms\n",
            "upstreams.amadeus.max_cool_down (line 5): must be between 1s and 24h, got 0.5s",
        ),
        (
            "profiles:\n  default:\n    upstreams: [amadeus]\n",
            "profiles.default.upstreams (line 3): expected a mapping",
        ),
        (
            _UP + "        max_attempts: 5\n",
            "profiles.default.upstreams.amadeus.max_attempts (line 5): unknown field",
        ),
        (
            _UP + "        circuit_breaker:\n          open_for: 0s\n",
            "upstreams.amadeus.circuit_breaker.open_for (line 6): must be positive",
        ),
        (
            "profiles:\n  default:\n    capabilities:\n      search:\n"
            "        circuit_breaker: {}\n",
            "profiles.default.capabilities.search.circuit_breaker (line 5): unknown field",
        ),
        ("max_upstreams: 0\n", "max_upstreams (line 1): expected an integer >= 1"),
        (
            "profiles:\n  default:\n    upstreams:\n      " + "u" * 257 + ": {}\n",
            "(line 4): an upstream name is at most 256 characters",
        ),
    ],
)
def test_upstream_setting_errors_name_the_field_and_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(text)
    assert message in str(info.value)


_BOUNDED = "profiles:\n  default:\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # Every duration in the file has one bound, 7 days
        # (docs/configuration.md, "The policy file").
        (
            _BOUNDED + "    circuit_breaker: {open_for: 2000000000h}\n",
            "profiles.default.circuit_breaker.open_for (line 3): expected a duration such as "
            "30s: 2000000000h is over the limit of 168h",
        ),
        (
            _BOUNDED + "    retry_budget: {ttl: 169h}\n",
            "profiles.default.retry_budget.ttl (line 3): expected a duration such as 30s: "
            "169h is over the limit of 168h",
        ),
        (
            _BOUNDED + "    backoff: {initial_delay: 1s, max_delay: 200h}\n",
            "profiles.default.backoff.max_delay (line 3): expected a positive duration: "
            "200h is over the limit of 168h",
        ),
        (
            _BOUNDED + "    circuit_breaker: {window: 1" + "0" * 400 + "h}\n",
            # The value is quoted as every caller's is: cut to 64 characters
            # (here a whole word, so nothing of it but the ellipsis).
            "profiles.default.circuit_breaker.window (line 3): expected a duration such as 30s: "
            "'…' is longer than any duration can be",
        ),
        (
            _BOUNDED + "    circuit_breaker: {minimum_calls: 2147483648}\n",
            "profiles.default.circuit_breaker.minimum_calls (line 3): expected an integer: "
            "'2147483648' is over the limit of 2147483647",
        ),
        ("a: " + "[" * 33 + "]" * 33 + "\n", "nested deeper than 32 levels at line 1"),
        (
            "profiles: {" + ", ".join(f"p{i}: {{}}" for i in range(25_001)) + "}\n",
            "more than 50000 YAML nodes by line 1",
        ),
    ],
)
def test_every_number_and_duration_and_the_shape_are_bounded(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(text)
    assert str(info.value).startswith(message)


def test_the_longest_duration_and_the_deepest_nesting_allowed_are_accepted() -> None:
    policy = parse_policy(_BOUNDED + "    circuit_breaker: {open_for: 168h}\n")
    assert policy.profile("default").circuit_breaker.open_for == timedelta(days=7)
    with pytest.raises(ConfigError, match=r"policy\.a "):  # past the bound, to the schema
        parse_policy("a: " + "[" * 31 + "]" * 31 + "\n")


MISSPELT = "a new profile, based on default"


@pytest.mark.parametrize(
    ("text", "warnings"),
    [
        (
            "profiles:\n  llm:\n    max_attempts: 2\n  defualt:\n    max_attempts: 5\n",
            [
                f"p.yaml: profiles.defualt (line 4): {MISSPELT} (did you mean 'default'?); "
                "the profile 'default' is left as it was"
            ],
        ),
        (
            "profiles:\n  LLM: {max_attempts: 2}\n",
            [
                f"p.yaml: profiles.LLM (line 2): {MISSPELT} (did you mean 'llm'?); "
                "the profile 'llm' is left as it was"
            ],
        ),
        # A name unlike any profile, a profile the policy has, and a new
        # profile that says what it is based on are what the writer meant.
        ("profiles:\n  batch: {max_attempts: 2}\n  default: {max_attempts: 2}\n", []),
        ("profiles:\n  llm2: {base: llm}\n  defaults: {base: default}\n", []),
    ],
)
def test_a_profile_named_like_a_known_one_is_a_warning(text: str, warnings: list[str]) -> None:
    config = parse_config(text, "p.yaml")
    assert list(config.warnings) == warnings


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "profile:\n  default: {}\n",
            "profile (line 1): unknown field (did you mean 'profiles'?); expected one of ",
        ),
        (
            "profiles:\n  default:\n    max_atempts: 3\n",
            "profiles.default.max_atempts (line 3): unknown field (did you mean 'max_attempts'?)",
        ),
        (
            "profiles:\n  default:\n    backoff: {jiter: full}\n",
            "profiles.default.backoff.jiter (line 3): unknown field (did you mean 'jitter'?)",
        ),
        (
            "profiles:\n  x:\n    base: defualt\n",
            "profiles.x.base (line 3): expected 'default' or 'llm', got 'defualt' "
            "(did you mean 'default'?)",
        ),
        (
            "profiles:\n  default:\n    retry_budget: {kind: token_bukcet}\n",
            "got 'token_bukcet' (did you mean 'token_bucket'?)",
        ),
        (
            "profiles:\n  default:\n    retry_budget: {kind: ratio, min_per_secnd: 5}\n",
            "retry_budget.min_per_secnd (line 3): unknown field (did you mean 'min_per_second'?)",
        ),
        # Nothing near: no guess.
        ("profiles:\n  default:\n    bogus: 1\n", "default.bogus (line 3): unknown field;"),
    ],
)
def test_an_unknown_field_names_the_one_it_looks_like(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(text)
    assert message in str(exc.value)


def test_what_the_file_misspells_is_echoed_bounded_and_redacted() -> None:
    secret = "sk-ant-api03-" + "A" * 40
    for key in (secret, "x" * 1000):
        with pytest.raises(ConfigError) as exc:
            parse_config(f"profiles:\n  default:\n    {key}: 1\n")
        message = str(exc.value)
        assert message.startswith("profiles.default.")
        assert "(line 3): unknown field; expected one of " in message
        assert key[:80] not in message
        assert len(message) < 500
