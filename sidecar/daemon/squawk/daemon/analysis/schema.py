"""Reading a capability's parameter schema, and checking a new value against it.

Schemas come from callers and may be partial or odd, so every reader
tolerates a keyword of the wrong type by ignoring it. `problems` is strict
and used only for values an analyzer proposes: a suggestion must satisfy
every keyword Squawk understands (type, enum, const, pattern, lengths,
bounds, formats date/date-time/time, items, properties, required,
additionalProperties: false, anyOf/oneOf/allOf). It is still not a full
JSON Schema validator: $ref, if/then/else, dependencies and the like are
ignored, which only ever makes it accept less than a real validator would
reject, never more than the keywords above allow.

Patterns run on RE2 (see `patterns`); one that cannot be checked is a
problem (UNCHECKED), never a pass.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import budget, patterns
from .dates import conforms_format
from .types import Json
from .values import json_key, kind, same_json, scalar_text

__all__ = [
    "UNCHECKED",
    "declared_types",
    "enum_values",
    "in_enum",
    "problems",
    "properties",
    "property_schema",
    "required",
]

# Every problem about a value that could not be checked says this: a
# pattern RE2 cannot run, or a check past the analysis's CPU budget.
UNCHECKED = "cannot be checked"
# Units charged per nested check (an item, a property, an anyOf branch):
# a value of N nodes against a schema of M can cost N x M checks.
_NESTED_UNITS = 20
_MAX_SHOWN_PATTERN = 100

Schema = Mapping[str, Json]

_NO_SCHEMA: Schema = {}
_NO_SCHEMA_MAP: Mapping[str, Schema] = {}


def properties(schema: Schema) -> Mapping[str, Schema]:
    """The declared properties that are schemas; built once per schema per analysis.

    Once, because every parameter's schema is looked up here: rebuilding it
    per lookup made a request of N parameters cost N x N.
    """
    found = schema.get("properties")
    if not isinstance(found, dict):
        return _NO_SCHEMA_MAP
    return budget.memo(
        found, "properties", lambda: {k: v for k, v in found.items() if isinstance(v, dict)}
    )


def property_schema(schema: Schema, key: str) -> Schema:
    """The schema of top-level parameter `key`; {} when not declared."""
    return properties(schema).get(key, _NO_SCHEMA)


def declared_types(schema: Schema) -> frozenset[str]:
    """The JSON types the schema allows; empty = any. OpenAPI nullable adds null."""
    raw = schema.get("type")
    names = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    types = {t for t in names if isinstance(t, str)}
    if types and schema.get("nullable") is True:
        types.add("null")
    return frozenset(types)


def enum_values(schema: Schema) -> list[Json] | None:
    found = schema.get("enum")
    return found if isinstance(found, list) else None


def required(schema: Schema) -> list[str]:
    found = schema.get("required")
    return [k for k in found if isinstance(k, str)] if isinstance(found, list) else []


def in_enum(value: Json, allowed: list[Json]) -> bool:
    """Whether `value` is the same JSON value as a member of `allowed` (see `same_json`).

    One set lookup per value: the members' canonical forms are built once
    per analysis, so checking N values against an enum of E members costs
    N + E, not N x E.
    """
    members = budget.memo(allowed, "enum members", lambda: frozenset(map(json_key, allowed)))
    return json_key(value) in members


def _pattern_problem(value: str, schema: Schema) -> str | None:
    """Why `value` fails the schema's `pattern` (unanchored search), or None when it passes."""
    raw = schema.get("pattern")
    if not isinstance(raw, str):
        return None  # absent, or not a string: ignored like any odd keyword
    verdict = patterns.search(raw, value)
    if verdict is patterns.Verdict.MATCH:
        return None
    shown = raw if len(raw) <= _MAX_SHOWN_PATTERN else raw[: _MAX_SHOWN_PATTERN - 1] + "…"
    if verdict is patterns.Verdict.NO_MATCH:
        return f"does not match the pattern {shown}"
    return f"{UNCHECKED} against the pattern {shown}, which {verdict.value}"


def type_matches(value: Json, types: frozenset[str]) -> bool:
    if not types:
        return True
    seen = kind(value)
    if seen in types:
        return True
    return (
        "integer" in types
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and float(value).is_integer()
    )


def _number(schema: Schema, name: str) -> float | None:
    raw = schema.get(name)
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return float(raw)
    return None


def _bounds(value: float, schema: Schema) -> list[str]:
    out = []
    low, high = _number(schema, "minimum"), _number(schema, "maximum")
    xlow, xhigh = _number(schema, "exclusiveMinimum"), _number(schema, "exclusiveMaximum")
    # Draft 4 spelled exclusivity as a boolean beside minimum/maximum.
    if schema.get("exclusiveMinimum") is True:
        xlow, low = low, None
    if schema.get("exclusiveMaximum") is True:
        xhigh, high = high, None
    if low is not None and value < low:
        out.append(f"is below the minimum {scalar_text(low)}")
    if high is not None and value > high:
        out.append(f"is above the maximum {scalar_text(high)}")
    if xlow is not None and value <= xlow:
        out.append(f"must be above {scalar_text(xlow)}")
    if xhigh is not None and value >= xhigh:
        out.append(f"must be below {scalar_text(xhigh)}")
    return out


def _string(value: str, schema: Schema) -> list[str]:
    out = []
    broken = _pattern_problem(value, schema)
    if broken is not None:
        out.append(broken)
    low, high = _number(schema, "minLength"), _number(schema, "maxLength")
    if low is not None and len(value) < low:
        out.append(f"is shorter than {scalar_text(low)} characters")
    if high is not None and len(value) > high:
        out.append(f"is longer than {scalar_text(high)} characters")
    fmt = schema.get("format")
    if isinstance(fmt, str) and not conforms_format(value, fmt):
        out.append(f"is not a valid {fmt}")
    return out


def _container(value: Json, schema: Schema, path: str) -> list[str]:
    out = []
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                out += _nested(item, items, f"{path}[{i}]")
        low, high = _number(schema, "minItems"), _number(schema, "maxItems")
        if low is not None and len(value) < low:
            out.append(f"{path or 'value'} has fewer than {scalar_text(low)} items")
        if high is not None and len(value) > high:
            out.append(f"{path or 'value'} has more than {scalar_text(high)} items")
    elif isinstance(value, dict):
        listed = required(schema)
        if listed and not budget.afford(len(listed)):
            return [f"{path or 'value'} {UNCHECKED} within this analysis's CPU budget"]
        declared = properties(schema)
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            if key in declared:
                out += _nested(item, declared[key], sub)
            elif schema.get("additionalProperties") is False:
                out.append(f"{sub} is not a declared property")
        out += [
            f"{path + '.' if path else ''}{key} is required" for key in listed if key not in value
        ]
    return out


def _nested(value: Json, schema: Schema, path: str) -> list[str]:
    if not budget.afford(_NESTED_UNITS):
        return [f"{path or 'value'} {UNCHECKED} within this analysis's CPU budget"]
    return _problems(value, schema, path)


def problems(value: Json, schema: Schema, path: str = "") -> list[str]:
    """Why `value` does not satisfy `schema` (strictly), or [] when it does.

    A value that cannot be checked (see UNCHECKED) has a problem saying so.
    """
    with budget.within_one():
        return _problems(value, schema, path)


def _problems(value: Json, schema: Schema, path: str) -> list[str]:
    where = path or "value"
    types = declared_types(schema)
    if not type_matches(value, types):
        return [f"{where} must be {' or '.join(sorted(types))}, not {kind(value)}"]
    out: list[str] = []
    allowed = enum_values(schema)
    if allowed is not None and not in_enum(value, allowed):
        out.append(f"{where} is not one of the declared enum values")
    if "const" in schema and not same_json(value, schema["const"]):
        out.append(f"{where} is not the declared constant")
    if isinstance(value, str):
        out += [f"{where} {p}" for p in _string(value, schema)]
    elif isinstance(value, int | float) and not isinstance(value, bool):
        out += [f"{where} {p}" for p in _bounds(float(value), schema)]
    out += _container(value, schema, path)
    for word in ("anyOf", "oneOf"):
        branches = schema.get(word)
        if isinstance(branches, list):
            subs = [b for b in branches if isinstance(b, dict)]
            unchecked: list[str] = []
            for branch in subs:
                found = _nested(value, branch, path)
                if not found:
                    break
                unchecked += [p for p in found if UNCHECKED in p]
            else:
                if subs:
                    out.append(f"{where} matches none of the {word} alternatives")
                    out += unchecked[:1]
    branches = schema.get("allOf")
    if isinstance(branches, list):
        for b in branches:
            if isinstance(b, dict):
                out += _nested(value, b, path)
    return out
