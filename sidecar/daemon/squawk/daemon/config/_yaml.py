"""YAML node helpers: every error names the field's path and line."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import yaml

from squawk.policy.env import positive_duration, positive_int

__all__ = [
    "ConfigError",
    "boolean",
    "factor",
    "mapping",
    "natural",
    "positive_duration",
    "positive_int",
    "scalar",
    "status",
    "where",
]

T = TypeVar("T")


class ConfigError(ValueError):
    """The policy file is wrong; the message names the field and line."""


def where(node: yaml.Node, path: str) -> str:
    return f"{path} (line {node.start_mark.line + 1})"


def mapping(node: yaml.Node, path: str, allowed: set[str]) -> dict[str, yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{where(node, path)}: expected a mapping")
    out: dict[str, yaml.Node] = {}
    for key, value in node.value:
        name = str(key.value)
        if allowed and name not in allowed:
            raise ConfigError(
                f"{where(key, f'{path}.{name}')}: unknown field; expected one of "
                + ", ".join(sorted(allowed))
            )
        if name in out:
            raise ConfigError(f"{where(key, f'{path}.{name}')}: field given twice")
        out[name] = value
    return out


def scalar(node: yaml.Node, path: str, convert: Callable[[str], T], what: str) -> T:
    if not isinstance(node, yaml.ScalarNode):
        raise ConfigError(f"{where(node, path)}: expected {what}")
    try:
        return convert(str(node.value))
    except ValueError as exc:
        raise ConfigError(f"{where(node, path)}: expected {what}: {exc}") from None


def natural(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"{value} is negative")
    return value


def factor(text: str) -> float:
    value = float(text)
    if not value >= 1.0:
        raise ValueError("must be >= 1")
    return value


def status(text: str) -> int:
    value = int(text)
    if not 100 <= value <= 599:
        raise ValueError(f"{value} is not an HTTP status")
    return value


def boolean(text: str) -> bool:
    if text.lower() in ("true", "yes", "on"):
        return True
    if text.lower() in ("false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean")
