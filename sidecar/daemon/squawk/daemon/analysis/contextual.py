"""Layer 4, offline: re-resolve a failing parameter from its dependencies' results.

A currency step fails on "France"; the geocoding step it depends on
returned `{"country": "France", "currency": "EUR"}`. This module finds that
EUR: among the dependency results' values, the ones that satisfy the
failing parameter's schema, ranked by how close their key is to the
parameter's name (same > close > shares a word). The best rank must hold
exactly one distinct value. A value under an unrelated key counts only when
the schema is restrictive (enum, pattern, format or const), so a bare
`type: string` never pulls in an arbitrary string.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from . import budget, hints
from .heuristic import convert, show
from .schema import declared_types, problems, property_schema, required
from .similarity import name_closeness
from .types import AnalysisRequest, Json, Proposal, Source
from .values import distinct, leaves, same_json

__all__ = ["MAX_TARGETS", "failing_parameters", "propose"]

_MAX_LEAVES = 10_000
# Parameters re-resolved in one analysis (each reads every result), and
# units charged per result value tried as a candidate.
MAX_TARGETS = 8
_LEAF_UNITS = 100
_RESTRICTIVE = ("enum", "pattern", "format", "const")
_RANKS = {3: "the same name", 2: "a close name", 1: "a related name", 0: "the only value"}


def failing_parameters(
    params: Mapping[str, Json], schema: Mapping[str, Json], error_text: str
) -> list[str]:
    """Parameters to re-resolve: those breaking their schema, else those the error names.

    Missing required parameters always count. With neither, a request of
    one parameter blames that one.
    """
    broken = [n for n, v in params.items() if problems(v, property_schema(schema, n))]
    missing = [n for n in required(schema) if n not in params]
    if not broken:
        text = hints.readable(error_text)
        names = dict.fromkeys([*params, *missing])
        named = hints.mentions(text, params, names)
        broken = sorted(named, key=named.__getitem__)
    if not broken and not missing and len(params) == 1:
        broken = list(params)
    return list(dict.fromkeys([*broken, *missing]))


def _as_schema_type(value: Json, schema: Mapping[str, Json]) -> Json | None:
    if not problems(value, schema):
        return value
    for wanted in ("integer", "number", "boolean", "string"):
        if wanted in declared_types(schema):
            converted = convert(value, wanted)
            if converted is not None and not problems(converted, schema):
                return converted
    return None


def _resolve(
    name: str,
    current: Json,
    schema: Mapping[str, Json],
    results: Mapping[str, Mapping[str, Json]],
) -> tuple[Json, str] | str:
    """(value, where it came from), or why none was chosen."""
    found: list[tuple[int, Json, str]] = []
    every = ((step, leaf) for step in sorted(results) for leaf in leaves(dict(results[step])))
    for step, (path, key, raw) in itertools.islice(every, _MAX_LEAVES):
        if isinstance(raw, dict | list) and not declared_types(schema) & {"object", "array"}:
            continue
        if not budget.afford(_LEAF_UNITS):
            break  # the rest of the results are not read: fewer candidates, never a guess
        value = _as_schema_type(raw, schema)
        if value is None or same_json(value, current):
            continue
        found.append((name_closeness(name, key), value, f"step {step}'s {path}"))
    if not found:
        return f"no dependency result holds a value that satisfies {name}'s schema"
    best = max(rank for rank, _, _ in found)
    if best == 0 and not any(k in schema for k in _RESTRICTIVE):
        return f"no dependency result has a key named like {name}"
    top = [(value, where) for rank, value, where in found if rank == best]
    candidates = distinct((v for v, _ in top), limit=5)
    if len(candidates) > 1:
        shown = ", ".join(show(v) for v in candidates[:4])
        return f"the dependency results hold several candidates for {name} ({shown})"
    value, where = top[0]
    return value, f"{where}, {_RANKS[best]}"


def propose(
    request: AnalysisRequest, error_text: str, pending: Mapping[str, Json] | None = None
) -> Proposal:
    """Contextual re-resolution over `request` with `pending` changes already applied."""
    pending = pending or {}
    params = {**request.original_request, **pending}
    schema = request.parameter_schema
    if not request.dependency_results:
        return Proposal(Source.CONTEXTUAL, why_not="no dependency results were given")
    targets = [n for n in failing_parameters(params, schema, error_text) if n not in pending]
    if not targets:
        return Proposal(Source.CONTEXTUAL, why_not="no failing parameter could be identified")
    changes: dict[str, Json] = {}
    notes: dict[str, str] = {}
    why_not: list[str] = []
    if len(targets) > MAX_TARGETS:
        why_not.append(
            f"only the first {MAX_TARGETS} of {len(targets)} failing parameters are tried"
        )
    for name in targets[:MAX_TARGETS]:
        current = params.get(name)
        answer = _resolve(name, current, property_schema(schema, name), request.dependency_results)
        if isinstance(answer, str):
            why_not.append(answer)
            continue
        changes[name], where = answer
        before = show(current) if name in params else "(unset)"
        notes[name] = f"{name} {before} -> {show(changes[name])} (from {where})"
    if changes:
        return Proposal(Source.CONTEXTUAL, changes, notes)
    return Proposal(Source.CONTEXTUAL, why_not="; ".join(why_not))
