"""Layer 3, offline: fix what the request, the schema and the error text prove.

Four repairs, each only when the answer is unambiguous:

1. a value that is an enum member but for case, spacing, one or two slips
   of spelling, or an unambiguous abbreviation ("eur" -> "EUR", "relevence"
   -> "relevance", "PARIS" -> "PAR" when PAR is the only member it starts with);
2. the error's own hint: "did you mean 'AAPL'", "use PAR", "expected one of
   metric, imperial" (matched against the current value as in 1);
3. a number or boolean sent as the wrong JSON type ("2" -> 2, 2 -> "2",
   "true" -> true), when the schema or the error names the wanted type and
   the conversion loses nothing;
4. a date or time in another format, when the schema (format or pattern)
   or the error ("YYYY-MM-DD", "ISO 8601") names the wanted one and the
   value reads one way only (03/04/2025 is never guessed).

Each candidate must satisfy the parameter's schema strictly; two repairs
that disagree about one parameter cancel out. The gates run afterwards all
the same: this module proposes, it does not approve.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Mapping

from squawk.policy.text import shown_text

from . import budget, dates, hints, patterns
from .schema import declared_types, enum_values, in_enum, problems, property_schema, type_matches
from .similarity import nearest
from .types import AnalysisRequest, Json, Proposal, Source
from .values import distinct, kind, number_text, same_json, scalar_text

__all__ = ["MAX_HINTS", "MAX_SLIP_CHARS", "convert", "propose"]

_INTEGER = re.compile(r"[+-]?\d{1,15}(?:\.0+)?")
_NUMBER = re.compile(r"[+-]?(?:\d{1,15}(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,3})?")
_TYPE_ORDER = ("integer", "number", "boolean", "string")
# A value longer than this has no slip of case or spacing worth fixing;
# reading one of a megabyte (folding, re-spacing) held the GIL for 60 ms.
MAX_SLIP_CHARS = 1_024
# Suggestions read from one error text, and units charged per parameter a
# suggestion is tried on: 2,000 hints against 2,000 named parameters took
# 12 s before both were bounded.
MAX_HINTS = 32
_TARGET_UNITS = 500
_FORMAT_WORDS = re.compile(r"(?i)\b(?:format|date[- ]?time|datetime|date|time|iso|rfc)\b")
_MAX_SHOWN = 40


def show(value: Json) -> str:
    """A value for a reason sentence: quoted strings (redacted), bare numbers, short."""
    if isinstance(value, str):
        return repr(shown_text(value, _MAX_SHOWN))
    text = scalar_text(value)
    return "null" if value is None else text if text is not None else kind(value)


def convert(value: Json, wanted: str) -> Json | None:
    """`value` as JSON type `wanted` when nothing is lost, else None."""
    if isinstance(value, str):
        text = value.strip()
        if wanted == "integer" and _INTEGER.fullmatch(text):
            return int(float(text))
        if wanted == "number" and _NUMBER.fullmatch(text):
            number = float(text)
            return int(number) if number.is_integer() and "." not in text else number
        if wanted == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
    elif isinstance(value, bool):
        if wanted == "string":
            return "true" if value else "false"
    elif isinstance(value, int | float) and wanted == "string":
        return number_text(value)
    return None


class _Context:
    """The request and error, read once and shared by the repairs."""

    def __init__(self, request: AnalysisRequest, error_text: str) -> None:
        self.params = request.original_request
        self.schema = request.parameter_schema
        self.text = hints.readable(error_text)
        names = dict.fromkeys([*self.params, *_declared(self.schema)])
        self.named = hints.mentions(self.text, self.params, names)
        self._by_spot = sorted((spot, name) for name, spot in self.named.items())
        self.sentences = hints.Sentences(self.text)

    def named_between(self, start: int, end: int) -> list[str]:
        """The parameters first named in text[start:end], in order."""
        low = bisect.bisect_left(self._by_spot, (start, ""))
        high = bisect.bisect_left(self._by_spot, (end, ""))
        return [name for _, name in self._by_spot[low:high]]

    def sentence(self, name: str) -> str:
        """The error sentence that names `name`, or "" when none does."""
        spot = self.named.get(name)
        if spot is None:
            return ""
        start, end = self.sentences.around(spot)
        return self.text[start:end]


# Many parameters can share one long sentence; read each sentence once.
_wanted_type = functools.lru_cache(maxsize=64)(hints.wanted_type)
_format_named = functools.lru_cache(maxsize=64)(dates.format_named_in)


def _declared(schema: Mapping[str, Json]) -> list[str]:
    found = schema.get("properties")
    return list(found) if isinstance(found, dict) else []


def _fits(value: Json, schema: Mapping[str, Json]) -> bool:
    return not problems(value, schema)


def _typed(text: str, schema: Mapping[str, Json]) -> Json:
    """A hint's text as the parameter's declared type ("2" -> 2 for an integer)."""
    for wanted in _TYPE_ORDER:
        if wanted in declared_types(schema):
            converted = convert(text, wanted)
            if converted is not None:
                return converted
    return text


def _by_type(ctx: _Context, name: str, value: Json, schema: Mapping[str, Json]) -> list[Json]:
    types = declared_types(schema)
    named = _wanted_type(ctx.sentence(name))
    if not types and named:
        types = frozenset(named.values())
    if not types or type_matches(value, types):
        return []
    for wanted in _TYPE_ORDER:
        if wanted in types:
            converted = convert(value, wanted)
            if converted is not None:
                return [converted]
    return []


def _by_enum(value: Json, schema: Mapping[str, Json]) -> list[Json]:
    allowed = enum_values(schema)
    text = scalar_text(value)
    if allowed is None or text is None or len(text) > MAX_SLIP_CHARS or in_enum(value, allowed):
        return []
    found = nearest(text, allowed)
    return [] if found is None else [found[0]]


def _by_case(value: Json, schema: Mapping[str, Json]) -> list[Json]:
    """A code the pattern rejects only for case or stray spaces ("par " for ^[A-Z]{3}$)."""
    if not isinstance(value, str) or len(value) > MAX_SLIP_CHARS or "pattern" not in schema:
        return []
    if _fits(value, schema):
        return []
    squeezed = " ".join(value.split())
    for candidate in (squeezed, squeezed.upper(), squeezed.lower()):
        if candidate != value and _fits(candidate, schema):
            return [candidate]
    return []


def _by_date(
    ctx: _Context, name: str, value: Json, schema: Mapping[str, Json], notes: list[str]
) -> list[Json]:
    if not isinstance(value, str):
        return []
    wanted: list[str] = []
    named = _format_named(ctx.sentence(name))
    if named is not None:
        wanted.append(named)
    fmt = schema.get("format")
    # The gates accept "2026-03-15 14:30" as a date-time; an upstream that
    # names the field and a date/time problem wants the canonical form.
    if (
        isinstance(fmt, str)
        and fmt in dates.SCHEMA_FORMAT_RENDER
        and (not _fits(value, schema) or _FORMAT_WORDS.search(ctx.sentence(name)))
    ):
        wanted.append(dates.SCHEMA_FORMAT_RENDER[fmt])
    if not wanted and "pattern" in schema and not _fits(value, schema):
        wanted += [dates.ISO, "%Y-%m-%d", "%d/%m/%Y", "%H:%M", "%Y%m%d"]
    if not wanted:
        return []
    parsed = dates.parse(value)
    if parsed is None:
        notes.append(f"{name} {show(value)} is not a date or time that reads only one way")
        return []
    rendered = {dates.render(parsed, f) for f in wanted} - {None, value}
    return [r for r in rendered if r is not None and _fits(r, schema)]


def _by_hint(ctx: _Context, notes: list[str]) -> dict[str, list[Json]]:
    out: dict[str, list[Json]] = {}
    found_hints = hints.hints(ctx.text)
    if len(found_hints) > MAX_HINTS:
        notes.append(f"the error makes more than {MAX_HINTS} suggestions; only the first are read")
    for hint in found_hints[:MAX_HINTS]:
        start, end = ctx.sentences.around(hint.start)
        near = ctx.named_between(start, end)
        # A hint binds only to a parameter the error names (by name or value):
        # "use ADMIN" in an injected sentence names nothing and changes nothing.
        targets = near or list(ctx.named)
        if not hint.is_list and len(hint.values) > 1:
            shown = ", ".join(repr(v) for v in hint.values[:4])
            notes.append(f"the error suggests several values ({shown}) and none is chosen")
            continue
        fits: dict[str, Json] = {}
        for name in targets:
            if len(fits) > 1 or not budget.afford(_TARGET_UNITS):
                break  # already ambiguous, or out of budget: nothing more to learn
            schema = property_schema(ctx.schema, name)
            current = ctx.params.get(name)
            if hint.is_list:
                options = [_typed(v, schema) for v in hint.values]
                found = nearest(scalar_text(current) or "", options)
                if found is None:
                    shown = ", ".join(hint.values[:6])
                    notes.append(f"{name} {show(current)} is not close to any of {shown}")
                    continue
                candidate = found[0]
            else:
                candidate = _typed(hint.values[0], schema)
            fresh = name not in ctx.params or not same_json(candidate, current)
            if fresh and _fits(candidate, schema):
                fits[name] = candidate
        if len(fits) == 1:
            name, candidate = fits.popitem()
            out.setdefault(name, []).append(candidate)
        elif len(fits) > 1:
            notes.append(f"the error's hint fits several parameters ({', '.join(sorted(fits))}, …)")
    return out


def propose(request: AnalysisRequest, error_text: str) -> Proposal:
    """The offline analyzer's proposal for one failed call (pure, no network)."""
    ctx = _Context(request, error_text)
    notes: list[str] = []
    candidates = _by_hint(ctx, notes)
    for name, value in ctx.params.items():
        schema = property_schema(ctx.schema, name)
        found = candidates.setdefault(name, [])
        pattern = schema.get("pattern")
        unchecked = patterns.unverifiable(pattern) if isinstance(pattern, str) else None
        if unchecked is not None:
            notes.append(f"{name}'s pattern {unchecked.value}, so no value for it can be checked")
            continue
        found += _by_type(ctx, name, value, schema)
        found += _by_enum(value, schema)
        found += _by_case(value, schema)
        found += _by_date(ctx, name, value, schema, notes)
    changes: dict[str, Json] = {}
    why: dict[str, str] = {}
    for name, found in candidates.items():
        options = distinct(found, limit=2)
        if len(options) > 1:
            notes.append(f"{name} has several possible corrections and none is chosen")
        elif options:
            changes[name] = options[0]
            before = show(ctx.params[name]) if name in ctx.params else "(unset)"
            why[name] = f"{name} {before} -> {show(options[0])}"
    if changes:
        return Proposal(Source.HEURISTIC, changes, why)
    if not notes:
        notes.append(
            "nothing in the request, the schema or the error text points to a safe correction"
        )
    return Proposal(Source.HEURISTIC, why_not="; ".join(dict.fromkeys(notes)))
