"""A caller's schema `pattern`, run on RE2 and never on a backtracking engine.

JSON Schema patterns are ECMA-262 regular expressions, and they come from
callers. Python's `re` backtracks: `^(a+)+$` against 27 characters held
the event loop for 9 s. RE2 runs what schemas use (classes, anchors,
alternation, counted repetition, Unicode classes) in time linear in the
text, so that is the only engine a caller's pattern ever reaches.

Some patterns cannot be checked that way, and are *unverifiable*:

- RE2 cannot run them: backreferences, lookahead and lookbehind, `\\Z`,
  and other features without a linear-time algorithm;
- the pattern is over MAX_PATTERN_CHARS characters, or compiles to a
  program over RE2's MAX_MEMORY bound;
- checking one more value would overrun the analysis's CPU budget (see
  `budget`): the cost charged is (text bytes + 1) x program size, RE2's
  worst case when its DFA gives way to the NFA.

An unverifiable pattern is never taken as matched: no value proposed for a
parameter it governs can pass the gates, and the gates' reason says the
pattern could not be checked. The alternative, letting such a pattern
pass, would let a model's value through unchecked; refusing the request
would fail a call the offline analyzer may still fix another way.

One translation makes RE2 read more ECMA-262: `\\uXXXX` becomes
`\\x{XXXX}`. RE2 logs its own parse errors to stderr through absl;
`log_errors=False` keeps them out of the daemon's log.
"""

from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass
from typing import Any

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

from . import budget

__all__ = ["MAX_MEMORY", "MAX_PATTERN_CHARS", "Verdict", "search", "unverifiable"]

MAX_PATTERN_CHARS = 1_000
MAX_MEMORY = 1 << 20
# Units charged per compiled instruction when a pattern is first used in an
# analysis: compiling costs about 0.2-1.5 us per instruction. A failed
# compilation (over MAX_MEMORY) costs up to ~7 ms, whatever its length.
_COMPILE_UNITS = 100
_FAILED_COMPILE_UNITS = 700_000


class Verdict(enum.Enum):
    """A pattern's answer for one text; every value but MATCH and NO_MATCH is unverifiable."""

    MATCH = "matches"
    NO_MATCH = "does not match"
    UNSUPPORTED = (
        "uses a feature RE2 cannot run in linear time (a backreference or lookaround, for example)"
    )
    TOO_LONG = f"is over {MAX_PATTERN_CHARS} characters"
    TOO_LARGE = f"compiles to more than {MAX_MEMORY >> 20} MiB"
    OVER_BUDGET = "would cost more than this analysis's CPU budget"

    @property
    def checked(self) -> bool:
        return self in (Verdict.MATCH, Verdict.NO_MATCH)


# ECMA-262's \uXXXX, when the backslash is not itself escaped.
_ECMA_UNICODE = re.compile(r"(?<!\\)((?:\\\\)*)\\u([0-9A-Fa-f]{4})")


def _options() -> Any:
    options = re2.Options()
    options.max_mem = MAX_MEMORY
    options.log_errors = False
    options.never_capture = True  # only "does it match" is asked
    return options


_OPTIONS = _options()


@dataclass(frozen=True, slots=True)
class _Program:
    regexp: Any
    # RE2::ProgramSize(), the instruction count its costs scale with (the
    # Python wrapper keeps the RE2 object in `_regexp`).
    size: int

    def matches(self, data: bytes) -> bool:
        return self.regexp.search(data) is not None


@functools.lru_cache(maxsize=32)
def _compiled(pattern: str) -> _Program | Verdict:
    # At most 32 programs of at most MAX_MEMORY each are kept.
    translated = _ECMA_UNICODE.sub(r"\1\\x{\2}", pattern)
    try:
        regexp = re2.compile(translated, _OPTIONS)
    except re2.error as exc:
        too_large = "too large" in str(exc) or "too big" in str(exc)
        return Verdict.TOO_LARGE if too_large else Verdict.UNSUPPORTED
    return _Program(regexp, int(regexp._regexp.ProgramSize()))


def _program(pattern: str) -> _Program | Verdict:
    """The compiled pattern, its compilation charged once per analysis."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return Verdict.TOO_LONG
    paid = budget.current()
    if paid is not None and pattern in paid.seen:
        return _compiled(pattern)
    # Charged the same whether or not another call compiled it already, so
    # one request always spends the same.
    if not budget.afford(len(pattern) * _COMPILE_UNITS):
        return Verdict.OVER_BUDGET
    compiled = _compiled(pattern)
    if isinstance(compiled, Verdict):
        cost = _FAILED_COMPILE_UNITS if compiled is Verdict.TOO_LARGE else 0
    else:
        cost = compiled.size * _COMPILE_UNITS
    if not budget.afford(cost):
        return Verdict.OVER_BUDGET
    if paid is not None:
        paid.seen.add(pattern)
    return compiled


def search(pattern: str, text: str) -> Verdict:
    """Whether `pattern` matches anywhere in `text` (JSON Schema: unanchored), if checkable."""
    compiled = _program(pattern)
    if isinstance(compiled, Verdict):
        return compiled
    # Strings from protobuf or strict JSON are valid UTF-8; "replace" only
    # guards against a lone surrogate from elsewhere.
    data = text.encode("utf-8", "replace")
    if not budget.afford((len(data) + 1) * compiled.size):
        return Verdict.OVER_BUDGET
    return Verdict.MATCH if compiled.matches(data) else Verdict.NO_MATCH


def unverifiable(pattern: str) -> Verdict | None:
    """Why no text can be checked against `pattern` in this analysis, or None when it can."""
    compiled = _program(pattern)
    return compiled if isinstance(compiled, Verdict) else None
