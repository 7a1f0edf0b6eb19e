"""Reading the YAML nodes of the policy file: every error names the field's path and line.

The file is composed with bounds, so that what a 1 MiB file can make the
parser do is bounded too: at most MAX_DEPTH levels of nesting (the policy's
own shape needs six; PyYAML's composer recurses, and 5,000 `[` would
exhaust Python's stack) and MAX_NODES nodes, an alias counting the nodes it
stands for each time it is used (so ten lines of anchors cannot stand for a
billion nodes). Every scalar is bounded by `scalar`: integers at most
MAX_POLICY_INT, durations at most MAX_POLICY_DURATION (the ranges of ratios
and factors are their fields' own).
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import TypeVar

import yaml

from squawk.policy.env import (
    Malformed,
    check_policy_duration,
    integer,
    positive_duration,
    positive_int,
)
from squawk.policy.text import MAX_QUOTED_CHARS, quoted, shown_text

__all__ = [
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_POLICY_INT",
    "ConfigError",
    "at_line",
    "boolean",
    "choice",
    "close_to",
    "compose",
    "did_you_mean",
    "factor",
    "integer",
    "mapping",
    "natural",
    "number",
    "one_of",
    "positive_duration",
    "positive_int",
    "scalar",
    "shown_name",
    "status",
    "where",
]

T = TypeVar("T")
E = TypeVar("E", bound=enum.Enum)


MAX_DEPTH = 32
MAX_NODES = 50_000
# Every integer field fits a protobuf int32, as the clients read them.
MAX_POLICY_INT = 2**31 - 1


class ConfigError(ValueError):
    """The policy file is wrong; the message names the field and line."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's composer, counting depth and nodes as it goes."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0
        self._nodes = 0
        self._sizes: dict[str, int] = {}  # anchor -> the nodes it stands for

    def _count(self, nodes: int, event: yaml.Event) -> None:
        self._nodes += nodes
        if self._nodes > MAX_NODES:
            raise ConfigError(
                f"more than {MAX_NODES} YAML nodes by line {_line(event)} "
                "(an alias counts its nodes each time it is used)"
            )

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            # An anchor used inside itself is not finished yet: it counts one.
            self._count(self._sizes.get(str(event.anchor), 1), event)
            return super().compose_node(parent, index)
        if self._depth >= MAX_DEPTH:
            raise ConfigError(f"nested deeper than {MAX_DEPTH} levels at line {_line(event)}")
        before = self._nodes
        self._count(1, event)
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._sizes[str(anchor)] = self._nodes - before
        return node


def _line(event: yaml.Event) -> int:
    return event.start_mark.line + 1 if event.start_mark is not None else 1


def compose(text: str) -> yaml.Node | None:
    """The document's root node (None when the text holds none), within the
    bounds above; yaml.YAMLError when it is not YAML, ConfigError past a bound."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def where(node: yaml.Node, path: str) -> str:
    return at_line(path, node.start_mark.line + 1)


def at_line(path: str, line: int | None) -> str:
    return path if line is None else f"{path} (line {line})"


def shown_name(name: str) -> str:
    """A key of the file as a path in a message shows it: bounded and redacted
    (a key pasted where a field belongs must not reach a CI log whole)."""
    return shown_text(name, MAX_QUOTED_CHARS)


# How alike (difflib's ratio, 0..1, of the lower-cased names) a name must be
# to a known one to be taken for its misspelling: `defualt` and `default` are
# 0.86, `elm` and `llm` 0.67, `fast` and `default` 0.55. difflib's own
# default (0.6) would take `elm` for `llm` and `rate` for `ratio`.
_CLOSE = 0.75


def close_to(name: str, known: Iterable[str]) -> str | None:
    """The known name that `name` is most likely a misspelling of, if any
    (`LLM` is one of `llm`).

    difflib rejects a name of a very different length by the lengths alone,
    before comparing any characters, so a long key costs no more than a short one."""
    by_lower = {k.lower(): k for k in sorted(known)}
    matches = difflib.get_close_matches(name.lower(), by_lower, n=1, cutoff=_CLOSE)
    return by_lower[matches[0]] if matches else None


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """ " (did you mean 'x'?)" when `name` looks like a misspelling of `x`, else "".
    Only a known name is quoted back, never the file's own text."""
    match = close_to(name, known)
    return "" if match is None else f" (did you mean {match!r}?)"


def mapping(node: yaml.Node, path: str, allowed: set[str]) -> dict[str, yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{where(node, path)}: expected a mapping")
    out: dict[str, yaml.Node] = {}
    for key, value in node.value:
        name = str(key.value)
        if allowed and name not in allowed:
            raise ConfigError(
                f"{where(key, f'{path}.{shown_name(name)}')}: unknown field"
                f"{did_you_mean(name, allowed)}; expected one of " + ", ".join(sorted(allowed))
            )
        if name in out:
            raise ConfigError(f"{where(key, f'{path}.{shown_name(name)}')}: field given twice")
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
        return _bounded(convert(text))
    except Malformed:
        raise ConfigError(f"{where(node, path)}: expected {what}, got {quoted(text)}") from None
    except ValueError as exc:
        raise ConfigError(f"{where(node, path)}: expected {what}: {exc}") from None
    except ArithmeticError:  # an overflow in a converter: too large to be anything
        raise ConfigError(f"{where(node, path)}: expected {what}: too large") from None


def _bounded(value: T) -> T:
    """`value`, or ValueError when a number or duration is past the policy's bounds
    (the one place for them, whichever field the value is for)."""
    if isinstance(value, timedelta):
        check_policy_duration(value)
    elif isinstance(value, int) and abs(value) > MAX_POLICY_INT:
        raise ValueError(f"{quoted(str(value))} is over the limit of {MAX_POLICY_INT}")
    return value


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
