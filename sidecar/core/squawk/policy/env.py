"""SQUAWK_STEP_RETRY_* (and the guide's TRUVAG3_STEP_RETRY_*) overrides.

Forgiving, as in the executor guide: a bad value is logged as a warning
and the default is kept.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

from .backoff import format_duration, parse_duration
from .limits import MAX_POLICY_DURATION
from .profiles import Policy

__all__ = [
    "Malformed",
    "apply_env",
    "check_policy_duration",
    "integer",
    "positive_duration",
    "positive_int",
]

log = logging.getLogger(__name__)

_ENV_PREFIXES = ("SQUAWK_STEP_RETRY_", "TRUVAG3_STEP_RETRY_")
_INTEGER = re.compile(r"[+-]?[0-9]+")


class Malformed(ValueError):
    """The text is not of the expected kind at all (a word for a number).

    Raised instead of Python's own wording ("invalid literal for int()"):
    the caller's message says what was expected, and quotes the text.
    """


def integer(text: str) -> int:
    """ASCII digits with an optional sign: not `3.0`, not YAML's `true`."""
    if not _INTEGER.fullmatch(text.strip()):
        raise Malformed(text)
    return int(text)


def positive_int(text: str) -> int:
    value = integer(text)
    if value < 1:
        raise ValueError(f"{value} is below 1")
    return value


def check_policy_duration(value: timedelta) -> timedelta:
    """`value`, or ValueError when it is over MAX_POLICY_DURATION."""
    if value > MAX_POLICY_DURATION:
        raise ValueError(
            f"{format_duration(value)} is over the limit of {format_duration(MAX_POLICY_DURATION)}"
        )
    return value


def positive_duration(text: str) -> timedelta:
    value = parse_duration(text)
    if value <= timedelta(0):
        raise ValueError("must be positive")
    return check_policy_duration(value)


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
    delays_set = []
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
        if suffix == "MAX_ATTEMPTS":
            profile = replace(profile, max_attempts=value)
            continue
        delays_set.append(f"{name}={raw.strip()}")
        if suffix == "INITIAL_DELAY":
            backoff = replace(backoff, initial=value)
        else:
            backoff = replace(backoff, max=value)
    if backoff.max < backoff.initial:
        kept = profile.backoff
        log.warning(
            "ignoring %s: the max delay %s would be below the initial delay %s; "
            "keeping initial delay %s, max delay %s",
            " and ".join(delays_set),
            format_duration(backoff.max),
            format_duration(backoff.initial),
            format_duration(kept.initial),
            format_duration(kept.max),
        )
        backoff = kept
    return policy.with_profile(replace(profile, backoff=backoff))
