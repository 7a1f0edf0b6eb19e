"""Loading the policy: built-in profiles, then the policy file, then env vars.

The file is YAML. Every error names the field's path and line, and stops the
daemon (exit code 2). Environment overrides are forgiving instead: a bad
value is logged as a warning and the default is kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from squawk.policy import Policy, builtin_policy
from squawk.policy.env import apply_env

from ..analysis.settings import AnalyzerSettings
from ._yaml import ConfigError, mapping, positive_int, scalar
from .analyzer import apply_analyzer_env, check_analyzer, parse_analyzer
from .profiles import parse_profiles
from .state import StateSettings, apply_state_env, check_state, parse_state

__all__ = [
    "Config",
    "ConfigError",
    "StateSettings",
    "apply_analyzer_env",
    "apply_env",
    "load_config",
    "load_policy",
    "parse_config",
    "parse_policy",
]


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the policy file configures: the policy, and the analyzer apart from it.

    The analyzer's settings are kept out of Policy so the pure core never
    sees analysis (or network) types.
    """

    policy: Policy
    analyzer: AnalyzerSettings = field(default_factory=AnalyzerSettings)
    state: StateSettings = field(default_factory=StateSettings)


def _positive(fields: Mapping[str, yaml.Node], name: str) -> int:
    return scalar(fields[name], name, positive_int, "an integer >= 1")


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    return parse_config(text, source).policy


def parse_config(text: str, source: str = "<policy>") -> Config:
    """The policy file's policy and analyzer settings (the file's API key included)."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    policy = builtin_policy()
    if root is None:
        return Config(policy)
    fields = mapping(
        root, "policy", {"profiles", "max_body_bytes", "max_upstreams", "analyzer", "state"}
    )
    if "max_body_bytes" in fields:
        policy = replace(policy, max_body_bytes=_positive(fields, "max_body_bytes"))
    if "max_upstreams" in fields:
        policy = replace(policy, max_upstreams=_positive(fields, "max_upstreams"))
    if "profiles" in fields:
        policy = parse_profiles(fields["profiles"], policy)
    analyzer = AnalyzerSettings()
    if "analyzer" in fields:
        analyzer, key = parse_analyzer(fields["analyzer"])
        analyzer = replace(analyzer, api_key=key)
    state = parse_state(fields["state"]) if "state" in fields else StateSettings()
    return Config(policy, analyzer, state)


def load_config(
    path: str | None, environ: Mapping[str, str] | None = None, text: str | None = None
) -> Config:
    """The built-in policy, overlaid with the file at `path` (if any), then env
    vars. `text`: the file's contents, when the caller has read them already."""
    config = Config(builtin_policy())
    if path:
        if text is None:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"{path}: cannot read the policy file: {exc.strerror}") from None
        try:
            config = parse_config(text, path)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    environ = os.environ if environ is None else environ
    analyzer = apply_analyzer_env(config.analyzer, environ)
    check_analyzer(analyzer, path or "<policy>")
    state = apply_state_env(config.state, environ)
    check_state(state, path or "<policy>")
    return Config(apply_env(config.policy, environ), analyzer, state)


def load_policy(path: str | None, environ: Mapping[str, str] | None = None) -> Policy:
    """The built-in policy, overlaid with the file at `path` (if any), then env vars."""
    return load_config(path, environ).policy
