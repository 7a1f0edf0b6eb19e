"""Reading an upstream error text: which parameters it blames, what it suggests.

Everything here is pattern matching over text the upstream wrote, so every
reader is conservative: a hint counts only when it is quoted or ends its
clause ("use PAR", "did you mean 'AAPL'?"), and a parameter counts as named
only when its name or its current value appears as a whole word. JSON error
bodies (FastAPI's `detail`, `{"errors": [...]}`) are flattened to one line
per object first, so each field's message stays next to its name.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass

from .dates import format_named_in
from .mentions import mentions

__all__ = [
    "MAX_ERROR_CHARS",
    "Hint",
    "Sentences",
    "hints",
    "mentions",
    "readable",
    "wanted_type",
]

# How much of an error text is read: its start is where upstreams say what is wrong.
MAX_ERROR_CHARS = 16_384
_QUOTED = (
    r"(?:'(?P<q1>[^'\n]{1,64})'"
    r'|"(?P<q2>[^"\n]{1,64})"'
    r"|`(?P<q3>[^`\n]{1,64})`"
    r"|“(?P<q4>[^”\n]{1,64})”)"
)
# An unquoted suggestion must look like a code (has a capital, digit or _-./)
# and end its clause, so "use a valid code" and "use ISO codes" are no hints.
_BARE = (
    r"(?P<bare>[A-Za-z0-9](?:[\w./:+-]{0,62}\w)?)(?=\s*(?:$|[,;!?)\]\n]|\.(?:\s|$)|instead\b|or\b))"
)
_SINGLE = re.compile(
    rf"""(?ix)
    (?:did\s+you\s+mean|perhaps\s+you\s+meant|you\s+may\s+have\s+meant
      |(?:please\s+)?use|try|suggestion|suggested\s+value|closest\s+match)
    \s*:?\s*(?:{_QUOTED}|{_BARE})
    """
)
# "must be X" names a value only when quoted: "must be positive" is a rule.
_MUST_BE = re.compile(rf"(?i)(?:should|must)\s+be\s*:?\s*{_QUOTED}")
# "did you mean 'A' or 'B'": a second value makes the suggestion ambiguous.
_ALTERNATIVE = re.compile(rf"\s*(?:,|\bor\b)\s*(?:{_QUOTED}|{_BARE})")
_LIST = re.compile(
    r"""(?ix)
    (?:(?:(?:expected|must\s+be|should\s+be|is\s+not|use)\s+)?one\s+of(?:\s+the\s+following)?
      |(?:valid|allowed|supported|accepted|possible)\s+(?:values|options|choices|codes)(?:\s+are)?
      |(?:allowed|enum|choices|options)(?=\s*:))
    \s*:?\s*(?P<list>\[[^\]\n]{1,2000}\]|\([^)\n]{1,2000}\)|\{[^}\n]{1,2000}\}|[^.;\n]{1,2000})
    """
)
_ITEM_SPLIT = re.compile(r"\s*(?:,|\||/|\bor\b)\s*")
_TYPE = re.compile(
    r"(?i)(?:expected|must\s+be|should\s+be|is\s+not\s+of\s+type|not\s+a\s+valid|invalid)"
    r"\s+(?:an?\s+)?['\"]?(?P<t>integer|int|number|numeric|float|double|decimal|boolean|bool"
    r"|string|text)s?\b"
)
_TYPE_NAMES = {
    "integer": "integer",
    "int": "integer",
    "number": "number",
    "numeric": "number",
    "float": "number",
    "double": "number",
    "decimal": "number",
    "boolean": "boolean",
    "bool": "boolean",
    "string": "string",
    "text": "string",
}
_SENTENCE_END = re.compile(r"\n|[.;!?](?=\s|$)")


@dataclass(frozen=True, slots=True)
class Hint:
    """Values the error suggests or allows, and where the phrase starts.

    A list hint ("expected one of a, b, c") offers choices to match against;
    a suggestion ("did you mean 'a'") with more than one value is ambiguous.
    """

    values: tuple[str, ...]
    start: int
    is_list: bool


def _flatten(node: object, lines: list[str]) -> str | None:
    if isinstance(node, dict):
        parts = []
        for key, value in node.items():
            text = _flatten(value, lines)
            if text is not None:
                parts.append(f"{key}: {text}")
        if parts:
            lines.append(", ".join(parts))
        return None
    if isinstance(node, list):
        scalars = [_flatten(v, lines) for v in node]
        shown = [s for s in scalars if s is not None]
        return "[" + ", ".join(shown) + "]" if shown else None
    return None if node is None else str(node)


def readable(error_text: str) -> str:
    """The error as lines of text; a JSON body becomes one line per object."""
    text = error_text[:MAX_ERROR_CHARS]
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        lines: list[str] = []
        try:
            top = _flatten(json.loads(stripped), lines)
        except (ValueError, RecursionError):
            return text  # not JSON, or nested too deep to be an error body
        if top is not None:
            lines.append(top)
        return "\n".join(lines)
    return text


class Sentences:
    """Sentence bounds of one text, found once and looked up by position."""

    def __init__(self, text: str) -> None:
        self._ends = [m.end() for m in _SENTENCE_END.finditer(text)] + [len(text)]

    def around(self, position: int) -> tuple[int, int]:
        """The [start, end) of the sentence holding `position`."""
        i = bisect.bisect_right(self._ends, position)
        i = min(i, len(self._ends) - 1)
        return (self._ends[i - 1] if i else 0), self._ends[i]


def _items(raw: str) -> tuple[str, ...]:
    raw = raw.strip().strip("[](){}").strip()
    out = []
    for part in _ITEM_SPLIT.split(raw):
        item = part.strip().strip("'\"`“”").strip()
        if item and len(item) <= 64:
            out.append(item)
    return tuple(dict.fromkeys(out))


def _value(m: re.Match[str]) -> str | None:
    groups = m.groupdict()
    quoted = (groups["q1"], groups["q2"], groups["q3"], groups["q4"])
    return next((g for g in quoted if g is not None), None) or groups.get("bare")


# Whitespace runs are folded before matching: the patterns above let
# several `\s*` meet, and on a long run of spaces a backtracking engine
# tries every way to split it between them.
_BLANKS = re.compile(r"[^\S\n]+")
_LINE_BREAKS = re.compile(r" ?\n[\s]*")


def _folded(text: str) -> str:
    return _LINE_BREAKS.sub("\n", _BLANKS.sub(" ", text))


def hints(text: str) -> list[Hint]:
    """Every suggestion and every list of allowed values the text offers."""
    text = _folded(text)
    out: list[Hint] = []
    listed: list[range] = []
    for m in _LIST.finditer(text):
        allowed = _items(m["list"])
        if len(allowed) >= 2:
            out.append(Hint(allowed, m.start(), is_list=True))
            listed.append(range(m.start(), m.end()))
    found = [*_SINGLE.finditer(text), *_MUST_BE.finditer(text)]
    for m in sorted(found, key=lambda m: m.start()):
        value = _value(m)
        if value is None or any(m.start() in r for r in listed) or format_named_in(value):
            continue
        if m.groupdict().get("bare") is not None and not re.search(r"[A-Z0-9_./:+-]", value):
            continue  # "use lowercase" is advice, not a value
        values = [value]
        end = m.end()
        while (alt := _ALTERNATIVE.match(text, end)) is not None and len(values) < 10:
            other = _value(alt)
            if other is not None:
                values.append(other)
            end = alt.end()
        out.append(Hint(tuple(dict.fromkeys(values)), m.start(), is_list=False))
    return out


def wanted_type(text: str) -> dict[int, str]:
    """Position -> JSON type name for every "expected integer"-style phrase."""
    return {m.start(): _TYPE_NAMES[m["t"].lower()] for m in _TYPE.finditer(text)}
