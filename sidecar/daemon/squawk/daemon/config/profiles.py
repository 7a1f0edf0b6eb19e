"""The `profiles:` part of the policy file (the upstream settings: upstreams.py here)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any, TypeVar

import yaml

from squawk.policy import (
    BackoffConfig,
    Jitter,
    Policy,
    PolicyInputError,
    Profile,
    builtin_profile,
    parse_duration,
)
from squawk.policy.text import quoted

from ._yaml import (
    ConfigError,
    choice,
    close_to,
    did_you_mean,
    factor,
    mapping,
    natural,
    one_of,
    positive_duration,
    positive_int,
    scalar,
    shown_name,
    status,
    where,
)
from .upstreams import UPSTREAM_FIELDS, parse_upstream_settings

__all__ = ["parse_profiles"]

_BACKOFF_FIELDS = {"initial_delay", "max_delay", "factor", "jitter"}

_RULE_FIELDS = {
    "max_attempts",
    "max_validation_retries",
    "max_retry_wait",
    "retryable_statuses",
    "backoff",
}

_PROFILE_FIELDS = _RULE_FIELDS | UPSTREAM_FIELDS | {"base", "capabilities", "upstreams"}


# (YAML field, attribute, parser, what the error says is expected): one row
# per scalar field, so each field's rule is written once.
_Scalar = tuple[str, str, Callable[[str], Any], str]
_BACKOFF_SCALARS: tuple[_Scalar, ...] = (
    ("initial_delay", "initial", positive_duration, "a positive duration"),
    ("max_delay", "max", positive_duration, "a positive duration"),
    ("factor", "factor", factor, "a number >= 1"),
    ("jitter", "jitter", choice(Jitter), one_of(Jitter)),
)
_RULE_SCALARS: tuple[_Scalar, ...] = (
    ("max_attempts", "max_attempts", positive_int, "an integer >= 1"),
    ("max_validation_retries", "max_validation_retries", natural, "an integer >= 0"),
    # The bounds are the core's (Profile refuses one out of them).
    ("max_retry_wait", "max_retry_wait", parse_duration, "a duration such as 5m"),
)

T = TypeVar("T", BackoffConfig, Profile)


def _apply(value: T, fields: Mapping[str, yaml.Node], path: str, scalars: tuple[_Scalar, ...]) -> T:
    updates = {
        attribute: scalar(fields[name], f"{path}.{name}", parse, what)
        for name, attribute, parse, what in scalars
        if name in fields
    }
    return replace(value, **updates) if updates else value


def _backoff(node: yaml.Node, path: str, base: BackoffConfig) -> BackoffConfig:
    fields = mapping(node, path, _BACKOFF_FIELDS)
    cfg = _apply(base, fields, path, _BACKOFF_SCALARS)
    if cfg.max < cfg.initial:
        raise ConfigError(f"{where(node, path)}: max_delay is shorter than initial_delay")
    return cfg


def _rules(
    fields: Mapping[str, yaml.Node], path: str, profile: Profile, warnings: list[str]
) -> Profile:
    try:
        profile = _apply(profile, fields, path, _RULE_SCALARS)
    except PolicyInputError as exc:
        at = where(fields[exc.field], f"{path}.{exc.field}")
        raise ConfigError(f"{at}: {exc.message}") from None
    if "retryable_statuses" in fields:
        node = fields["retryable_statuses"]
        at = f"{path}.retryable_statuses"
        if not isinstance(node, yaml.SequenceNode):
            raise ConfigError(f"{where(node, at)}: expected a list of HTTP statuses")
        added = set()
        for i, item in enumerate(node.value):
            code = scalar(item, f"{at}[{i}]", status, "an HTTP status (100..599)")
            # decide() checks the terminal set before the transient one, so such
            # an entry never takes effect. A warning, not an error: the file
            # works as it is, and refusing it would stop a daemon over a no-op.
            if code in profile.terminal_statuses:
                warnings.append(
                    f"{where(item, at)}: {code} is a terminal status in this profile, "
                    "so it is never retried"
                )
            added.add(code)
        # Additive only: a profile can never drop a status from its base set.
        profile = replace(profile, transient_statuses=profile.transient_statuses | added)
    if "backoff" in fields:
        profile = replace(
            profile, backoff=_backoff(fields["backoff"], f"{path}.backoff", profile.backoff)
        )
    return profile


def _profile(
    name: str, node: yaml.Node, path: str, known: Mapping[str, Profile], warnings: list[str]
) -> Profile:
    fields = mapping(node, path, _PROFILE_FIELDS)
    if "base" in fields:
        base = scalar(fields["base"], f"{path}.base", str, "'default' or 'llm'")
        if base not in ("default", "llm"):
            raise ConfigError(
                f"{where(fields['base'], f'{path}.base')}: "
                f"expected 'default' or 'llm', got {quoted(base)}"
                f"{did_you_mean(base, ('default', 'llm'))}"
            )
        profile = builtin_profile(base, name)
    elif name in known:
        profile = known[name]
    else:
        profile = builtin_profile("default", name)
    profile = _rules(fields, path, profile, warnings)
    # Before the capabilities, which inherit the profile's upstream settings
    # (the state itself is kept per profile, not per capability).
    profile = parse_upstream_settings(fields, path, profile)
    if "capabilities" in fields:
        caps = mapping(fields["capabilities"], f"{path}.capabilities", set())
        overrides = {}
        for cap, cap_node in caps.items():
            cap_path = f"{path}.capabilities.{cap}"
            overrides[cap] = _rules(
                mapping(cap_node, cap_path, _RULE_FIELDS),
                cap_path,
                replace(profile, name=f"{name}/{cap}"),
                warnings,
            )
        profile = replace(profile, capabilities=MappingProxyType(overrides))
    return profile


def _misspelt(key: yaml.Node, node: yaml.Node, known: set[str]) -> str | None:
    """A warning when a new profile's name looks like a misspelling of a
    profile the policy already has (`defualt:` for `default:`), else None.

    A warning, not an error: a new profile is valid, and its name is the
    writer's to choose. A profile with a `base:` is plainly meant to be
    new (`llm2: {base: llm}`), so it is not warned about."""
    name = str(key.value)
    if name in known:
        return None
    if isinstance(node, yaml.MappingNode) and any(k.value == "base" for k, _ in node.value):
        return None
    match = close_to(name, known)
    if match is None:
        return None
    return (
        f"{where(key, f'profiles.{shown_name(name)}')}: a new profile, based on default "
        f"(did you mean {match!r}?); the profile {match!r} is left as it was"
    )


def parse_profiles(node: yaml.Node, policy: Policy, warnings: list[str]) -> Policy:
    """`policy` with the file's profiles; appends to `warnings` what the
    file says that can never take effect, and each new profile whose name
    looks like a misspelling of one the policy had before the file."""
    known = set(policy.profiles)
    mapping(node, "profiles", set())  # refuses a non-mapping, and a name given twice
    # The nodes, not mapping()'s dict: a warning names the key's own line.
    for key, profile_node in node.value:
        name = str(key.value)
        if (warning := _misspelt(key, profile_node, known)) is not None:
            warnings.append(warning)
        policy = policy.with_profile(
            _profile(name, profile_node, f"profiles.{name}", policy.profiles, warnings)
        )
    return policy
