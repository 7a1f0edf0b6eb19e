"""Loading the policy: built-in profiles, then the policy file, then env vars.

The file is YAML. Every error names the field's path and line, and stops the
daemon (exit code 2). An entry that can never take effect is a warning,
with its path and line too: `Config.warnings`, which check-policy prints and
the daemon logs at start and on reload. Environment overrides are forgiving
instead: a bad value is logged as a warning (here, for the core's overlay,
which returns its warnings rather than log them) and the default is kept.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import yaml

from squawk.policy import Policy, builtin_policy
from squawk.policy.env import apply_env

from ..analysis.settings import AnalyzerSettings
from ._yaml import ConfigError, compose, mapping, positive_int, scalar
from .analyzer import analyzer_needs, apply_analyzer_env, parse_analyzer
from .needs import Need
from .policy_file import MAX_POLICY_BYTES, read_policy_file
from .profiles import parse_profiles
from .state import StateSettings, apply_state_env, parse_state, state_needs

__all__ = [
    "MAX_POLICY_BYTES",
    "Config",
    "ConfigError",
    "Need",
    "StateSettings",
    "apply_analyzer_env",
    "apply_env",
    "load_config",
    "load_policy",
    "needs",
    "parse_config",
    "parse_policy",
    "read_policy_file",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the policy file configures: the policy, and the analyzer apart from it.

    The analyzer's settings are kept out of Policy so the pure core never
    sees analysis (or network) types.
    """

    policy: Policy
    analyzer: AnalyzerSettings = field(default_factory=AnalyzerSettings)
    state: StateSettings = field(default_factory=StateSettings)
    # The file's line of each field of the analyzer: and state: sections, for
    # the messages of a Need (which are given after the file is parsed).
    lines: Mapping[str, int] = field(default_factory=dict)
    # What the file says that can never take effect, each naming the file,
    # the field and its line; the file works all the same.
    warnings: tuple[str, ...] = ()
    # The file held no YAML document (nothing, or only comments and blank
    # lines): the built-in policy. A reload refuses it (server/lifecycle/reload.py).
    empty: bool = False


def _positive(fields: Mapping[str, yaml.Node], name: str) -> int:
    return scalar(fields[name], name, positive_int, "an integer >= 1")


def parse_policy(text: str, source: str | None = None) -> Policy:
    return parse_config(text, source).policy


def parse_config(text: str, source: str | None = None) -> Config:
    """The policy file's policy and analyzer settings (the file's API key
    included). Every error starts with `source`, the file's name, if given."""
    try:
        config = _parse_config(text)
    except ConfigError as exc:
        if source is None:
            raise
        raise ConfigError(f"{source}: {exc}") from None
    if source is None:
        return config
    return replace(config, warnings=tuple(f"{source}: {w}" for w in config.warnings))


def _parse_config(text: str) -> Config:
    try:
        root = compose(text)
    except yaml.YAMLError as exc:
        raise ConfigError(_not_yaml(exc, text)) from None
    policy = builtin_policy()
    if root is None:
        return Config(policy, empty=True)
    fields = mapping(
        root, "policy", {"profiles", "max_body_bytes", "max_upstreams", "analyzer", "state"}
    )
    if "max_body_bytes" in fields:
        policy = replace(policy, max_body_bytes=_positive(fields, "max_body_bytes"))
    if "max_upstreams" in fields:
        policy = replace(policy, max_upstreams=_positive(fields, "max_upstreams"))
    warnings: list[str] = []
    if "profiles" in fields:
        policy = parse_profiles(fields["profiles"], policy, warnings)
    analyzer = AnalyzerSettings()
    if "analyzer" in fields:
        analyzer, key = parse_analyzer(fields["analyzer"])
        analyzer = replace(analyzer, api_key=key)
    state = parse_state(fields["state"]) if "state" in fields else StateSettings()
    lines = {
        f"{section}.{key.value}": value.start_mark.line + 1
        for section in ("analyzer", "state")
        if section in fields
        for key, value in fields[section].value
    }
    return Config(policy, analyzer, state, lines, tuple(warnings))


def _not_yaml(exc: yaml.YAMLError, text: str) -> str:
    """The parser's problem and place, without its name for the text
    ("<unicode string>") and its excerpt, which span lines."""
    if isinstance(exc, yaml.MarkedYAMLError) and (mark := exc.problem_mark or exc.context_mark):
        line, column = mark.line + 1, mark.column + 1
        # The context alone is half a sentence for some problems ("but found
        # another document"); it comes first in the parser's own message too.
        problem = ", ".join(part for part in (exc.context, exc.problem) if part)
    elif isinstance(exc, yaml.reader.ReaderError):
        before = text[: exc.position]
        line, column = before.count("\n") + 1, len(before) - before.rfind("\n")
        problem = f"character #x{exc.character:04x}: {exc.reason}"
    else:
        return "not valid YAML"
    return f"not valid YAML at line {line}, column {column}: {problem}"


def needs(config: Config) -> list[Need]:
    """What the daemon needs and `config` lacks: for a file read alone, what
    the environment must give at start."""
    return [*analyzer_needs(config.analyzer), *state_needs(config.state)]


def load_config(
    path: str | None, environ: Mapping[str, str] | None = None, text: str | None = None
) -> Config:
    """The built-in policy, overlaid with the file at `path` (if any), then env
    vars, as the daemon runs it. `text`: the file's contents, when the caller
    has read them already."""
    config = Config(builtin_policy())
    if path:
        if text is None:
            text = read_policy_file(path)[1]
        config = parse_config(text, path)
    environ = os.environ if environ is None else environ
    policy, warnings = apply_env(config.policy, environ)
    for warning in warnings:
        log.warning("%s", warning)
    config = Config(
        policy,
        apply_analyzer_env(config.analyzer, environ),
        apply_state_env(config.state, environ),
        config.lines,
        config.warnings,
        config.empty,
    )
    unmet = needs(config)
    if unmet:
        raise ConfigError(f"{path or '<policy>'}: {unmet[0].error(config.lines)}")
    return config


def load_policy(path: str | None, environ: Mapping[str, str] | None = None) -> Policy:
    """The built-in policy, overlaid with the file at `path` (if any), then env vars."""
    return load_config(path, environ).policy
