"""SQUAWK_STEP_RETRY_* (and the guide's TRUVAG3_STEP_RETRY_*) overrides.

Forgiving, as in the executor guide: a bad value is kept out, with a
warning, and the default is kept. The core logs nothing: `apply_env`
returns the warnings, and its caller (the daemon's config loader, the
Python client) logs them.

`OVERRIDES` is the one list of these variables: the daemon's settings table
(squawk.daemon.settings) and its configuration reference are made from it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any, NamedTuple

from .backoff import format_duration, parse_duration
from .limits import MAX_POLICY_DURATION
from .profiles import Policy

__all__ = [
    "ENV_PREFIXES",
    "OVERRIDES",
    "Malformed",
    "Override",
    "apply_env",
    "check_policy_duration",
    "integer",
    "positive_duration",
    "positive_int",
]

# The SQUAWK_ name wins when both are set; TRUVAG3_ is the executor guide's.
ENV_PREFIXES = ("SQUAWK_STEP_RETRY_", "TRUVAG3_STEP_RETRY_")
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


class Override(NamedTuple):
    """One SQUAWK_STEP_RETRY_<suffix> variable."""

    suffix: str
    parse: Callable[[str], Any]
    # What a value must be, as the warning about a bad one says it.
    expected: str
    # The "default" profile's field it overrides, as the policy file names it.
    file_key: str


OVERRIDES = (
    Override(
        "INITIAL_DELAY",
        positive_duration,
        "a positive duration such as 500ms",
        "profiles.default.backoff.initial_delay",
    ),
    Override(
        "MAX_DELAY",
        positive_duration,
        "a positive duration such as 10s",
        "profiles.default.backoff.max_delay",
    ),
    Override("MAX_ATTEMPTS", positive_int, "an integer >= 1", "profiles.default.max_attempts"),
)


def _env(environ: Mapping[str, str], suffix: str) -> tuple[str, str] | None:
    for prefix in ENV_PREFIXES:
        value = environ.get(prefix + suffix)
        if value is not None:
            return prefix + suffix, value
    return None


def apply_env(policy: Policy, environ: Mapping[str, str]) -> tuple[Policy, tuple[str, ...]]:
    """Apply SQUAWK_STEP_RETRY_* (or TRUVAG3_STEP_RETRY_*) to the "default"
    profile: the policy, and a warning for each value kept out."""
    profile = policy.profile("default")
    backoff = profile.backoff
    warnings: list[str] = []
    delays_set = []
    for suffix, parse, what, _ in OVERRIDES:
        found = _env(environ, suffix)
        if found is None:
            continue
        name, raw = found
        try:
            value = parse(raw)
        except ValueError:
            warnings.append(f"ignoring {name}={raw!r}: expected {what}; keeping the default")
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
        warnings.append(
            f"ignoring {' and '.join(delays_set)}: the max delay {format_duration(backoff.max)} "
            f"would be below the initial delay {format_duration(backoff.initial)}; "
            f"keeping initial delay {format_duration(kept.initial)}, "
            f"max delay {format_duration(kept.max)}"
        )
        backoff = kept
    return policy.with_profile(replace(profile, backoff=backoff)), tuple(warnings)
