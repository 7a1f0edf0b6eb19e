"""SQUAWK_STEP_RETRY_* (and the guide's TRUVAG3_STEP_RETRY_*) overrides.

Forgiving, as in the executor guide: a bad value is logged as a warning
and the default is kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

from .backoff import parse_duration
from .profiles import Policy

__all__ = ["apply_env", "positive_duration", "positive_int"]

log = logging.getLogger(__name__)

_ENV_PREFIXES = ("SQUAWK_STEP_RETRY_", "TRUVAG3_STEP_RETRY_")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(f"{value} is below 1")
    return value


def positive_duration(text: str) -> timedelta:
    value = parse_duration(text)
    if value <= timedelta(0):
        raise ValueError("must be positive")
    return value


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
        ("INITIAL_DELAY", positive_duration, "a positive duration such as 500ms"),
        ("MAX_DELAY", positive_duration, "a positive duration such as 10s"),
        ("MAX_ATTEMPTS", positive_int, "an integer >= 1"),
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
