"""Loading the policy: built-in profiles, then the policy file, then env vars.

The file is YAML. Every error names the field's path and line, and stops the
daemon (exit code 2). Environment overrides are forgiving instead, as in the
executor guide: a bad value is logged as a warning and the default is kept.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar
from urllib.parse import urlsplit

import yaml

from .analysis.settings import DEFAULT_API_KEY_ENV, AnalyzerSettings, Backend
from .policy import BackoffConfig, Jitter, Policy, Profile, builtin_policy, builtin_profile
from .policy.backoff import parse_duration

__all__ = [
    "Config",
    "ConfigError",
    "apply_analyzer_env",
    "apply_env",
    "load_config",
    "load_policy",
    "parse_config",
    "parse_policy",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

_ENV_PREFIXES = ("SQUAWK_STEP_RETRY_", "TRUVAG3_STEP_RETRY_")


class ConfigError(ValueError):
    """The policy file is wrong; the message names the field and line."""


def _where(node: yaml.Node, path: str) -> str:
    return f"{path} (line {node.start_mark.line + 1})"


def _mapping(node: yaml.Node, path: str, allowed: set[str]) -> dict[str, yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{_where(node, path)}: expected a mapping")
    out: dict[str, yaml.Node] = {}
    for key, value in node.value:
        name = str(key.value)
        if allowed and name not in allowed:
            raise ConfigError(
                f"{_where(key, f'{path}.{name}')}: unknown field; expected one of "
                + ", ".join(sorted(allowed))
            )
        if name in out:
            raise ConfigError(f"{_where(key, f'{path}.{name}')}: field given twice")
        out[name] = value
    return out


def _scalar(node: yaml.Node, path: str, convert: Callable[[str], T], what: str) -> T:
    if not isinstance(node, yaml.ScalarNode):
        raise ConfigError(f"{_where(node, path)}: expected {what}")
    try:
        return convert(str(node.value))
    except ValueError as exc:
        raise ConfigError(f"{_where(node, path)}: expected {what}: {exc}") from None


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(f"{value} is below 1")
    return value


def _natural(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"{value} is negative")
    return value


def _positive_duration(text: str) -> timedelta:
    value = parse_duration(text)
    if value <= timedelta(0):
        raise ValueError("must be positive")
    return value


def _factor(text: str) -> float:
    value = float(text)
    if not value >= 1.0:
        raise ValueError("must be >= 1")
    return value


def _status(text: str) -> int:
    value = int(text)
    if not 100 <= value <= 599:
        raise ValueError(f"{value} is not an HTTP status")
    return value


_BACKOFF_FIELDS = {"initial_delay", "max_delay", "factor", "jitter"}
_RULE_FIELDS = {"max_attempts", "max_validation_retries", "retryable_statuses", "backoff"}
_PROFILE_FIELDS = _RULE_FIELDS | {"base", "capabilities"}


def _backoff(node: yaml.Node, path: str, base: BackoffConfig) -> BackoffConfig:
    fields = _mapping(node, path, _BACKOFF_FIELDS)
    cfg = base
    if "initial_delay" in fields:
        cfg = replace(
            cfg,
            initial=_scalar(
                fields["initial_delay"],
                f"{path}.initial_delay",
                _positive_duration,
                "a positive duration",
            ),
        )
    if "max_delay" in fields:
        cfg = replace(
            cfg,
            max=_scalar(
                fields["max_delay"], f"{path}.max_delay", _positive_duration, "a positive duration"
            ),
        )
    if "factor" in fields:
        cfg = replace(
            cfg, factor=_scalar(fields["factor"], f"{path}.factor", _factor, "a number >= 1")
        )
    if "jitter" in fields:
        cfg = replace(
            cfg,
            jitter=_scalar(
                fields["jitter"], f"{path}.jitter", Jitter, "one of none, sine, full, decorrelated"
            ),
        )
    if cfg.max < cfg.initial:
        raise ConfigError(f"{_where(node, path)}: max_delay is shorter than initial_delay")
    return cfg


def _rules(fields: Mapping[str, yaml.Node], path: str, profile: Profile) -> Profile:
    if "max_attempts" in fields:
        profile = replace(
            profile,
            max_attempts=_scalar(
                fields["max_attempts"], f"{path}.max_attempts", _positive_int, "an integer >= 1"
            ),
        )
    if "max_validation_retries" in fields:
        profile = replace(
            profile,
            max_validation_retries=_scalar(
                fields["max_validation_retries"],
                f"{path}.max_validation_retries",
                _natural,
                "an integer >= 0",
            ),
        )
    if "retryable_statuses" in fields:
        node = fields["retryable_statuses"]
        where = f"{path}.retryable_statuses"
        if not isinstance(node, yaml.SequenceNode):
            raise ConfigError(f"{_where(node, where)}: expected a list of HTTP statuses")
        added = {
            _scalar(item, f"{where}[{i}]", _status, "an HTTP status (100..599)")
            for i, item in enumerate(node.value)
        }
        # Additive only: a profile can never drop a status from its base set.
        profile = replace(profile, transient_statuses=profile.transient_statuses | added)
    if "backoff" in fields:
        profile = replace(
            profile, backoff=_backoff(fields["backoff"], f"{path}.backoff", profile.backoff)
        )
    return profile


def _profile(name: str, node: yaml.Node, path: str, known: Mapping[str, Profile]) -> Profile:
    fields = _mapping(node, path, _PROFILE_FIELDS)
    if "base" in fields:
        base = _scalar(fields["base"], f"{path}.base", str, "'default' or 'llm'")
        if base not in ("default", "llm"):
            raise ConfigError(
                f"{_where(fields['base'], f'{path}.base')}: "
                f"expected 'default' or 'llm', got {base!r}"
            )
        profile = builtin_profile(base, name)
    elif name in known:
        profile = known[name]
    else:
        profile = builtin_profile("default", name)
    profile = _rules(fields, path, profile)
    if "capabilities" in fields:
        caps = _mapping(fields["capabilities"], f"{path}.capabilities", set())
        overrides = {}
        for cap, cap_node in caps.items():
            cap_path = f"{path}.capabilities.{cap}"
            overrides[cap] = _rules(
                _mapping(cap_node, cap_path, _RULE_FIELDS),
                cap_path,
                replace(profile, name=f"{name}/{cap}"),
            )
        profile = replace(profile, capabilities=MappingProxyType(overrides))
    return profile


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the policy file configures: the policy, and the analyzer apart from it.

    The analyzer's settings are kept out of Policy so the pure core never
    sees analysis (or network) types.
    """

    policy: Policy
    analyzer: AnalyzerSettings = field(default_factory=AnalyzerSettings)


_ANALYZER_FIELDS = {
    "backend",
    "base_url",
    "model",
    "api_key",
    "api_key_env",
    "timeout",
    "deadline",
    "cache_ttl",
    "cache_size",
    "max_tokens",
    "json_mode",
}


def _base_url(text: str) -> str:
    # The messages never echo the URL: it might carry a credential.
    try:
        parts = urlsplit(text)
        hostname = parts.hostname
    except ValueError:
        raise ValueError("not a URL") from None
    if parts.username is not None or parts.password is not None:
        # The URL reaches log lines; a key belongs in api_key / the env.
        raise ValueError("credentials in the URL are not allowed; use api_key_env")
    if parts.scheme not in ("http", "https") or not hostname:
        raise ValueError("not an http(s) URL")
    return text.rstrip("/")


def _boolean(text: str) -> bool:
    if text.lower() in ("true", "yes", "on"):
        return True
    if text.lower() in ("false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean")


def _analyzer(node: yaml.Node) -> tuple[AnalyzerSettings, str]:
    """The analyzer section, and the API key the file itself gives ("" if none)."""
    path = "analyzer"
    fields = _mapping(node, path, _ANALYZER_FIELDS)

    def get(name: str, parse: Callable[[str], T], what: str) -> T | None:
        if name not in fields:
            return None
        return _scalar(fields[name], f"{path}.{name}", parse, what)

    settings = AnalyzerSettings()
    backend = get("backend", Backend, "offline or openai")
    updates: dict[str, Any] = {
        "backend": backend,
        "base_url": get("base_url", _base_url, "an http(s) URL such as https://api.openai.com/v1"),
        "model": get("model", str, "a model name"),
        "api_key_env": get("api_key_env", str, "an environment variable name"),
        "timeout": get("timeout", _positive_duration, "a positive duration such as 10s"),
        "deadline": get("deadline", _positive_duration, "a positive duration such as 30s"),
        "cache_ttl": get("cache_ttl", parse_duration, "a duration such as 60s (0s = off)"),
        "cache_size": get("cache_size", _natural, "an integer >= 0"),
        "max_tokens": get("max_tokens", _positive_int, "an integer >= 1"),
        "json_mode": get("json_mode", _boolean, "true or false"),
    }
    settings = replace(settings, **{k: v for k, v in updates.items() if v is not None})
    if settings.deadline < settings.timeout:
        raise ConfigError(f"{_where(node, path)}: deadline is shorter than timeout")
    return settings, get("api_key", str, "a string") or ""


def _check_analyzer(settings: AnalyzerSettings, source: str) -> None:
    if settings.backend is Backend.OPENAI:
        for name in ("base_url", "model"):
            if not getattr(settings, name):
                raise ConfigError(
                    f"{source}: analyzer.{name}: required when analyzer.backend is openai "
                    f"(set it in the file or in SQUAWK_ANALYZER_{name.upper()})"
                )


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
    fields = _mapping(root, "policy", {"profiles", "max_body_bytes", "analyzer"})
    if "max_body_bytes" in fields:
        policy = replace(
            policy,
            max_body_bytes=_scalar(
                fields["max_body_bytes"], "max_body_bytes", _positive_int, "an integer >= 1"
            ),
        )
    if "profiles" in fields:
        for name, node in _mapping(fields["profiles"], "profiles", set()).items():
            policy = policy.with_profile(_profile(name, node, f"profiles.{name}", policy.profiles))
    analyzer = AnalyzerSettings()
    if "analyzer" in fields:
        analyzer, key = _analyzer(fields["analyzer"])
        analyzer = replace(analyzer, api_key=key)
    return Config(policy, analyzer)


def _env(environ: Mapping[str, str], suffix: str) -> tuple[str, str] | None:
    # The SQUAWK_ name wins when both are set.
    for prefix in _ENV_PREFIXES:
        value = environ.get(prefix + suffix)
        if value is not None:
            return prefix + suffix, value
    return None


def apply_env(policy: Policy, environ: Mapping[str, str]) -> Policy:
    """Apply SQUAWK_STEP_RETRY_* (or TRUVAG3_STEP_RETRY_*) to the "default" profile."""
    profile = policy.profile("default")
    backoff = profile.backoff
    parsers: list[tuple[str, Callable[[str], Any], str]] = [
        ("INITIAL_DELAY", _positive_duration, "a positive duration such as 500ms"),
        ("MAX_DELAY", _positive_duration, "a positive duration such as 10s"),
        ("MAX_ATTEMPTS", _positive_int, "an integer >= 1"),
    ]
    for suffix, parse, what in parsers:
        found = _env(environ, suffix)
        if found is None:
            continue
        name, raw = found
        try:
            value = parse(raw)
        except ValueError:
            log.warning("ignoring %s=%r: expected %s; keeping the default", name, raw, what)
            continue
        if suffix == "INITIAL_DELAY":
            backoff = replace(backoff, initial=value)
        elif suffix == "MAX_DELAY":
            backoff = replace(backoff, max=value)
        else:
            profile = replace(profile, max_attempts=value)
    if backoff.max < backoff.initial:
        log.warning(
            "ignoring step retry delays: max delay %s is below initial delay %s",
            backoff.max,
            backoff.initial,
        )
        backoff = profile.backoff
    return policy.with_profile(replace(profile, backoff=backoff))


def apply_analyzer_env(settings: AnalyzerSettings, environ: Mapping[str, str]) -> AnalyzerSettings:
    """Apply SQUAWK_ANALYZER_{BACKEND,BASE_URL,MODEL,API_KEY} over the file's settings.

    The API key is SQUAWK_ANALYZER_API_KEY, else the variable the file names
    in api_key_env, else the file's own api_key. A bad value is logged (by
    name, never the key) and ignored, like every other environment override.
    """
    backend = environ.get("SQUAWK_ANALYZER_BACKEND")
    if backend is not None:
        try:
            settings = replace(settings, backend=Backend(backend.strip().lower()))
        except ValueError:
            log.warning("ignoring SQUAWK_ANALYZER_BACKEND=%r: expected offline or openai", backend)
    base_url = environ.get("SQUAWK_ANALYZER_BASE_URL")
    if base_url is not None:
        try:
            settings = replace(settings, base_url=_base_url(base_url.strip()))
        except ValueError as exc:
            log.warning("ignoring SQUAWK_ANALYZER_BASE_URL: %s", exc)
    model = environ.get("SQUAWK_ANALYZER_MODEL")
    if model is not None and model.strip():
        settings = replace(settings, model=model.strip())
    for name in dict.fromkeys((DEFAULT_API_KEY_ENV, settings.api_key_env)):
        key = environ.get(name)
        if key:
            settings = replace(settings, api_key=key.strip(), api_key_env=name)
            break
    if backend is not None and settings.backend is Backend.OPENAI and not settings.uses_model:
        log.warning(
            "ignoring SQUAWK_ANALYZER_BACKEND=openai: a base URL and a model are both needed; "
            "keeping the offline analyzer"
        )
        settings = replace(settings, backend=Backend.OFFLINE)
    return settings


def load_config(path: str | None, environ: Mapping[str, str] | None = None) -> Config:
    """The built-in policy, overlaid with the file at `path` (if any), then env vars."""
    config = Config(builtin_policy())
    if path:
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
    _check_analyzer(analyzer, path or "<policy>")
    return Config(apply_env(config.policy, environ), analyzer)


def load_policy(path: str | None, environ: Mapping[str, str] | None = None) -> Policy:
    """The built-in policy, overlaid with the file at `path` (if any), then env vars."""
    return load_config(path, environ).policy
