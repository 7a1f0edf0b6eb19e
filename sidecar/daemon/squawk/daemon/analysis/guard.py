"""CheckDispatch: refuse parameters the upstream would certainly reject.

Four rules, and only these:

- unresolved_reference: a string still holds a template placeholder
  (`{{step-1.city}}`, `${steps.geo.city}`), anywhere in the tree;
- required: an object lacks a key its schema lists in `required`;
- enum: a scalar is not among its schema's `enum` values;
- shape: a container where the schema declares another shape (an object
  where an array is declared, a string where an object is declared, ...).

At most MAX_VIOLATIONS are reported (the first ones, in the order below).

This is deliberately not a JSON Schema validator. It keeps what upstreams
commonly accept: scalar coercion ("3" for an integer, 3 for a string, and
"3" matching an enum member 3), explicit null (never a shape or enum
violation), and every keyword it does not know (custom ones included). A
key that is present with a null value satisfies `required`. Stricter checks
(patterns, bounds, formats) belong to the upstream; the analyzer's gates
apply them to suggested values only (see `schema.problems`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from squawk.policy.text import shown_text

from . import budget
from .schema import declared_types, enum_values, properties, required
from .types import Json, Violation
from .values import kind, scalar_text

__all__ = ["MAX_VIOLATIONS", "RULES", "check_dispatch"]

RULES = ("unresolved_reference", "required", "enum", "shape")
MAX_VIOLATIONS = 100

# One bounded run per "{{" keeps the scan linear in the value's length
# (at most ~256 steps of backtracking per brace); `{{ }}` with nothing
# inside is not a reference.
_REFERENCE = re.compile(r"\{\{\s*[^{}\s][^{}]{0,256}\}\}|\$\{[^{}]{1,256}\}")
_FAMILY = {
    "object": "object",
    "array": "array",
    "string": "scalar",
    "number": "scalar",
    "integer": "scalar",
    "boolean": "scalar",
}
_MAX_SHOWN = 60


def _show(value: Json) -> str:
    text = scalar_text(value)
    if isinstance(value, str):
        return repr(shown_text(value, _MAX_SHOWN))
    return text or kind(value)


def _enum_member(value: Json, allowed: list[Json]) -> bool:
    """A scalar is a member when its text is a member's: "3" matches 3 (coercion).

    One set lookup, the set built once per call: a list of N items against
    an enum of E members costs N + E.
    """
    text = scalar_text(value)
    if text is None:
        return False
    texts = budget.memo(
        allowed, "enum texts", lambda: frozenset(map(scalar_text, allowed)) - {None}
    )
    return text in texts


def _check(value: Json, schema: Mapping[str, Json], path: str, out: list[Violation]) -> None:
    if len(out) >= MAX_VIOLATIONS:
        return
    where = path or "parameters"
    if isinstance(value, str):
        found = _REFERENCE.search(value)
        if found is not None:
            out.append(
                Violation(
                    where,
                    "unresolved_reference",
                    f"{where} still holds the placeholder {_show(found.group(0))}; "
                    "resolve it before dispatch.",
                )
            )
    if value is None:
        return  # explicit null is the caller's choice; the upstream decides
    families = {_FAMILY[t] for t in declared_types(schema) if t in _FAMILY}
    mine = _FAMILY.get(kind(value), "scalar")
    if families and mine not in families:
        wanted = " or ".join(sorted(t for t in declared_types(schema) if t != "null"))
        out.append(
            Violation(where, "shape", f"{where} is {kind(value)} but the schema declares {wanted}.")
        )
        return  # nothing below a wrong shape can be read against the schema
    allowed = enum_values(schema)
    if allowed is not None and mine == "scalar" and not _enum_member(value, allowed):
        options = budget.memo(
            allowed,
            "enum shown",
            lambda: ", ".join(map(_show, allowed[:10])) + (", …" if len(allowed) > 10 else ""),
        )
        out.append(
            Violation(
                where,
                "enum",
                f"{where} is {_show(value)}, which is not one of the declared values: {options}.",
            )
        )
    if isinstance(value, dict):
        declared = properties(schema)
        for key in required(schema):
            if len(out) >= MAX_VIOLATIONS:
                return
            if key not in value:
                sub = f"{path}.{key}" if path else key
                out.append(Violation(sub, "required", f"{sub} is required but missing."))
        # Sorted: a Struct's keys come in no particular order, the answer must.
        for key in sorted(value):
            _check(value[key], declared.get(key, {}), f"{path}.{key}" if path else key, out)
    elif isinstance(value, list):
        items = schema.get("items")
        for i, item in enumerate(value):
            _check(item, items if isinstance(items, dict) else {}, f"{path}[{i}]", out)


def check_dispatch(
    parameters: Mapping[str, Json], schema: Mapping[str, Json]
) -> tuple[Violation, ...]:
    """Every rule `parameters` breaks under `schema`; () means dispatch is fine.

    Violations come depth-first with keys in sorted order, missing required
    keys first at each level, so the same input always answers the same way.
    """
    out: list[Violation] = []
    with budget.within_one():  # CheckDispatch's own: one call's memo of enum sets
        _check(dict(parameters), schema, "", out)
    return tuple(out[:MAX_VIOLATIONS])
