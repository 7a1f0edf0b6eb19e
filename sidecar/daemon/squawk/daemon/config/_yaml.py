"""YAML node helpers: every error names the field's path and line."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TypeVar

import yaml

from squawk.policy.env import Malformed, integer, positive_duration, positive_int
from squawk.policy.text import quoted

__all__ = [
    "ConfigError",
    "at_line",
    "boolean",
    "choice",
    "factor",
    "integer",
    "mapping",
    "natural",
    "number",
    "one_of",
    "positive_duration",
    "positive_int",
    "scalar",
    "status",
    "where",
]

T = TypeVar("T")
E = TypeVar("E", bound=enum.Enum)


class ConfigError(ValueError):
    """The policy file is wrong; the message names the field and line."""


def where(node: yaml.Node, path: str) -> str:
    return at_line(path, node.start_mark.line + 1)


def at_line(path: str, line: int | None) -> str:
    return path if line is None else f"{path} (line {line})"


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
    """`convert` applied to the node's text. A converter raises Malformed for
    text of the wrong kind (quoted back, clipped and redacted: a key pasted
    into the wrong field must not reach a CI log), or ValueError with the
    reason in the project's words (`0 is below 1`)."""
    if not isinstance(node, yaml.ScalarNode):
        raise ConfigError(f"{where(node, path)}: expected {what}")
    text = str(node.value)
    try:
        return convert(text)
    except Malformed:
        raise ConfigError(f"{where(node, path)}: expected {what}, got {quoted(text)}") from None
    except ValueError as exc:
        raise ConfigError(f"{where(node, path)}: expected {what}: {exc}") from None


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise Malformed(text) from None


def choice(kind: type[E]) -> Callable[[str], E]:
    """A converter to one of `kind`'s values, named as the file writes them."""

    def convert(text: str) -> E:
        try:
            return kind(text)
        except ValueError:
            raise Malformed(text) from None

    return convert


def one_of(kind: type[enum.Enum]) -> str:
    """`kind`'s values as a message lists them: "none, sine, full or decorrelated"."""
    *others, last = (str(member.value) for member in kind)
    return f"{', '.join(others)} or {last}" if others else last


def natural(text: str) -> int:
    value = integer(text)
    if value < 0:
        raise ValueError(f"{value} is negative")
    return value


def factor(text: str) -> float:
    value = number(text)
    if not value >= 1.0:
        raise ValueError("must be >= 1")
    return value


def status(text: str) -> int:
    value = integer(text)
    if not 100 <= value <= 599:
        raise ValueError(f"{value} is not an HTTP status")
    return value


def boolean(text: str) -> bool:
    if text.lower() in ("true", "yes", "on"):
        return True
    if text.lower() in ("false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean")
