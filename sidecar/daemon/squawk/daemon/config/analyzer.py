"""The `analyzer:` part of the policy file and its SQUAWK_ANALYZER_* overrides."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar
from urllib.parse import urlsplit

import yaml

from squawk.policy.backoff import parse_duration

from ..analysis.settings import DEFAULT_API_KEY_ENV, AnalyzerSettings, Backend
from ..settings import ANALYZER_BACKEND, ANALYZER_BASE_URL, ANALYZER_MODEL
from ._yaml import (
    ConfigError,
    boolean,
    choice,
    mapping,
    natural,
    one_of,
    positive_duration,
    positive_int,
    scalar,
    where,
)
from .needs import Need

__all__ = ["analyzer_needs", "apply_analyzer_env", "parse_analyzer"]

log = logging.getLogger(__name__)

_BACKEND, _BASE_URL, _MODEL = (
    s.variable for s in (ANALYZER_BACKEND, ANALYZER_BASE_URL, ANALYZER_MODEL)
)

T = TypeVar("T")

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


def parse_analyzer(node: yaml.Node) -> tuple[AnalyzerSettings, str]:
    """The analyzer section, and the API key the file itself gives ("" if none)."""
    path = "analyzer"
    fields = mapping(node, path, _ANALYZER_FIELDS)

    def get(name: str, parse: Callable[[str], T], what: str) -> T | None:
        if name not in fields:
            return None
        return scalar(fields[name], f"{path}.{name}", parse, what)

    settings = AnalyzerSettings()
    backend = get("backend", choice(Backend), one_of(Backend))
    updates: dict[str, Any] = {
        "backend": backend,
        "base_url": get("base_url", _base_url, "an http(s) URL such as https://api.openai.com/v1"),
        "model": get("model", str, "a model name"),
        "api_key_env": get("api_key_env", str, "an environment variable name"),
        "timeout": get("timeout", positive_duration, "a positive duration such as 10s"),
        "deadline": get("deadline", positive_duration, "a positive duration such as 30s"),
        "cache_ttl": get("cache_ttl", parse_duration, "a duration such as 60s (0s = off)"),
        "cache_size": get("cache_size", natural, "an integer >= 0"),
        "max_tokens": get("max_tokens", positive_int, "an integer >= 1"),
        "json_mode": get("json_mode", boolean, "true or false"),
    }
    settings = replace(settings, **{k: v for k, v in updates.items() if v is not None})
    if settings.deadline < settings.timeout:
        raise ConfigError(f"{where(node, path)}: deadline is shorter than timeout")
    return settings, get("api_key", str, "a string") or ""


def analyzer_needs(settings: AnalyzerSettings) -> list[Need]:
    if settings.backend is not Backend.OPENAI:
        return []
    return [
        Need(f"analyzer.{name}", setting.variable, "analyzer.backend", "openai")
        for setting, name in ((ANALYZER_BASE_URL, "base_url"), (ANALYZER_MODEL, "model"))
        if not getattr(settings, name)
    ]


def apply_analyzer_env(settings: AnalyzerSettings, environ: Mapping[str, str]) -> AnalyzerSettings:
    """Apply SQUAWK_ANALYZER_{BACKEND,BASE_URL,MODEL,API_KEY} over the file's settings.

    The API key is SQUAWK_ANALYZER_API_KEY, else the variable the file names
    in api_key_env, else the file's own api_key. A bad value is logged (by
    name, never the key) and ignored, like every other environment override.
    """
    backend = environ.get(_BACKEND)
    if backend is not None:
        try:
            settings = replace(settings, backend=Backend(backend.strip().lower()))
        except ValueError:
            log.warning("ignoring %s=%r: expected %s", _BACKEND, backend, one_of(Backend))
    base_url = environ.get(_BASE_URL)
    if base_url is not None:
        try:
            settings = replace(settings, base_url=_base_url(base_url.strip()))
        except ValueError as exc:
            log.warning("ignoring %s: %s", _BASE_URL, exc)
    model = environ.get(_MODEL)
    if model is not None and model.strip():
        settings = replace(settings, model=model.strip())
    for name in dict.fromkeys((DEFAULT_API_KEY_ENV, settings.api_key_env)):
        key = environ.get(name)
        if key:
            settings = replace(settings, api_key=key.strip(), api_key_env=name)
            break
    if backend is not None and settings.backend is Backend.OPENAI and not settings.uses_model:
        log.warning(
            "ignoring %s=openai: a base URL and a model are both needed; "
            "keeping the offline analyzer",
            _BACKEND,
        )
        settings = replace(settings, backend=Backend.OFFLINE)
    return settings
