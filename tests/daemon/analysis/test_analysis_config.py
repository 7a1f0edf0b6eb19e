"""The policy file's `analyzer:` section, SQUAWK_ANALYZER_* and AnalyzeError's input checks."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from squawk.daemon.analysis import AnalysisRequest, Analyzer, AnalyzerSettings, Backend
from squawk.daemon.config import (
    ConfigError,
    apply_analyzer_env,
    load_config,
    load_policy,
    parse_config,
    parse_policy,
)
from squawk.policy import PolicyInputError, builtin_policy
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

FULL = """\
profiles:
  default:
    max_attempts: 4
analyzer:
  backend: openai
  base_url: https://llm.internal:8443/v1/
  model: small-model
  api_key_env: LLM_KEY
  timeout: 2s
  deadline: 5s
  cache_ttl: 0s
  cache_size: 10
  max_tokens: 256
  json_mode: false
"""


def test_the_analyzer_section() -> None:
    config = parse_config(FULL)
    assert config.policy.profile("default").max_attempts == 4
    assert config.analyzer == AnalyzerSettings(
        backend=Backend.OPENAI,
        base_url="https://llm.internal:8443/v1",
        model="small-model",
        api_key_env="LLM_KEY",
        timeout=timedelta(seconds=2),
        deadline=timedelta(seconds=5),
        cache_ttl=timedelta(0),
        cache_size=10,
        max_tokens=256,
        json_mode=False,
    )
    # The policy alone is unchanged by the section.
    assert parse_policy(FULL) == config.policy


def test_no_section_is_the_offline_analyzer() -> None:
    assert parse_config("").analyzer == AnalyzerSettings()
    assert AnalyzerSettings().backend is Backend.OFFLINE and not AnalyzerSettings().uses_model


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "analyzer:\n  backend: claude\n",
            "analyzer.backend (line 2): expected offline or openai, got 'claude'",
        ),
        (
            "analyzer:\n  cache_size: lots\n",
            "analyzer.cache_size (line 2): expected an integer >= 0, got 'lots'",
        ),
        ("analyzer:\n  modle: x\n", "analyzer.modle (line 2): unknown field"),
        ("analyzer:\n  base_url: ftp://x/v1\n", "analyzer.base_url (line 2)"),
        (
            "analyzer:\n  base_url: https://user:pw@llm/v1\n",
            "credentials in the URL are not allowed",
        ),
        ("analyzer:\n  timeout: 0s\n", "analyzer.timeout (line 2)"),
        ("analyzer:\n  timeout: 10s\n  deadline: 5s\n", "deadline is shorter than timeout"),
        ("analyzer:\n  max_tokens: 0\n", "analyzer.max_tokens (line 2)"),
        ("analyzer:\n  json_mode: maybe\n", "analyzer.json_mode (line 2)"),
        ("analyzer: [1]\n", "analyzer (line 1): expected a mapping"),
    ],
)
def test_errors_name_the_field_and_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert message in str(info.value)


def test_openai_needs_a_url_and_a_model(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("analyzer:\n  backend: openai\n  model: m\n")
    with pytest.raises(
        ConfigError,
        match=r"analyzer\.base_url: required when analyzer\.backend \(line 2\) is openai",
    ):
        load_config(str(path), environ={})
    # ... which the environment may supply.
    config = load_config(str(path), environ={"SQUAWK_ANALYZER_BASE_URL": "http://127.0.0.1:9/v1"})
    assert config.analyzer.uses_model
    assert load_policy(str(path), environ={"SQUAWK_ANALYZER_BASE_URL": "http://h/v1"})


def test_environment_overrides(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(FULL)
    config = load_config(
        str(path),
        environ={
            "SQUAWK_ANALYZER_BASE_URL": "http://127.0.0.1:8000/v1",
            "SQUAWK_ANALYZER_MODEL": "other",
            "LLM_KEY": "from-named-variable",
        },
    )
    assert config.analyzer.base_url == "http://127.0.0.1:8000/v1"
    assert config.analyzer.model == "other"
    assert config.analyzer.api_key == "from-named-variable"
    both = load_config(
        str(path), environ={"LLM_KEY": "named", "SQUAWK_ANALYZER_API_KEY": "squawk-wins"}
    )
    assert both.analyzer.api_key == "squawk-wins"


def test_the_file_key_is_the_last_resort() -> None:
    settings = parse_config("analyzer:\n  api_key: in-file\n").analyzer
    assert settings.api_key == "in-file"
    assert apply_analyzer_env(settings, {}).api_key == "in-file"
    assert apply_analyzer_env(settings, {"SQUAWK_ANALYZER_API_KEY": "env"}).api_key == "env"


def test_the_key_is_never_in_a_repr() -> None:
    settings = AnalyzerSettings(api_key="sk-never-printed-000000")
    assert "sk-never-printed" not in repr(settings) and "sk-never-printed" not in str(settings)


def test_bad_environment_values_are_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    settings = apply_analyzer_env(
        AnalyzerSettings(),
        {
            "SQUAWK_ANALYZER_BACKEND": "openai",
            "SQUAWK_ANALYZER_BASE_URL": "https://user:sk-leak-000000@h/v1",
            "SQUAWK_ANALYZER_API_KEY": "sk-env-key-0000000",
        },
    )
    # No usable URL: the environment's openai is dropped, the daemon stays offline.
    assert settings.backend is Backend.OFFLINE and settings.base_url == ""
    logged = caplog.text
    assert "SQUAWK_ANALYZER_BASE_URL" in logged and "SQUAWK_ANALYZER_BACKEND" in logged
    assert "sk-leak" not in logged and "sk-env-key" not in logged
    assert apply_analyzer_env(AnalyzerSettings(), {"SQUAWK_ANALYZER_BACKEND": "gpt"}).backend is (
        Backend.OFFLINE
    )


# AnalyzeError's input checks: the field is named, in process and over the wire.

INVALID: list[tuple[str, dict[str, Any]]] = [
    ("http_status", {"http_status": 700}),
    ("http_status", {"http_status": -1}),
    ("validation_retries_used", {"validation_retries_used": -1}),
    ("max_validation_retries", {"max_validation_retries": -2}),
    ("semantic_retries_used", {"semantic_retries_used": -1}),
    ("max_semantic_retries", {"max_semantic_retries": -1}),
    ("error_response", {"error_response": "x" * ((1 << 20) + 1)}),
    ("protected_parameters", {"protected_parameters": [""]}),
]


@pytest.mark.parametrize(("field", "fields"), INVALID, ids=[f"{f}={v}"[:60] for f, v in INVALID])
def test_invalid_input_in_process(field: str, fields: dict[str, Any]) -> None:
    merged: dict[str, Any] = {"http_status": 400, **fields}
    if "protected_parameters" in merged:
        merged["protected_parameters"] = frozenset(merged["protected_parameters"])
    analyzer = Analyzer(AnalyzerSettings(), builtin_policy())
    with pytest.raises(PolicyInputError) as info:
        asyncio.run(analyzer.analyze(AnalysisRequest(**merged)))
    assert info.value.field == field


@pytest.mark.parametrize(("field", "fields"), INVALID, ids=[f"{f}={v}"[:60] for f, v in INVALID])
def test_invalid_input_over_the_wire(
    channel: grpc.Channel, field: str, fields: dict[str, Any]
) -> None:
    request = pb.AnalyzeErrorRequest(http_status=400)
    for name, value in fields.items():
        if name == "protected_parameters":
            request.protected_parameters.extend(value)
        else:
            setattr(request, name, value)
    with pytest.raises(grpc.RpcError) as info:
        pb_grpc.PolicyServiceStub(channel).AnalyzeError(request, timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (info.value.details() or "").startswith(field + ":")


def test_unset_budgets_are_not_zero(channel: grpc.Channel) -> None:
    request = pb.AnalyzeErrorRequest(http_status=400, error_response="Invalid currency")
    request.original_request.update({"currency": "eur"})
    request.parameter_schema.update({"properties": {"currency": {"enum": ["EUR", "USD"]}}})
    stub = pb_grpc.PolicyServiceStub(channel)
    assert stub.AnalyzeError(request, timeout=5).should_retry  # unset = 2, 0 used
    request.max_validation_retries = 0
    assert not stub.AnalyzeError(request, timeout=5).should_retry  # explicitly 0
