"""The gates: the one set of checks every suggestion passes, whoever made it.

A suggestion from the offline analyzer, the model or contextual
re-resolution is refused, key by key, when it

- names a parameter that is neither in the original request nor in the
  schema (an invented parameter);
- touches a protected parameter, or a protected path inside it
  ("rooms[0].type" protects that value, not the whole list);
- touches a credential: a parameter named like one (`api_key`), one whose
  current value is shaped like a secret, or a value that carries a
  secret-shaped string or a credential-named key anywhere inside it (see
  `credentials`). No analyzer, least of all a model, replaces a key;
- is no change: the same JSON value as before (2 and 2.0 are the same;
  "2" and 2 are not, because the upstream rejected the type);
- carries the redaction marker (the analyzer never saw the real value);
- breaks the parameter's schema (see `schema.problems`), or cannot be
  checked against it (a pattern RE2 cannot run), or is oversized.

What passes is then merged into the request and must pass CheckDispatch;
a change that leaves its own parameter failing the guard is refused too.
"""

from __future__ import annotations

from collections.abc import Mapping

from squawk.policy import REDACTED

from .credentials import credential_in, secret_name
from .guard import check_dispatch
from .schema import UNCHECKED, problems, properties, property_schema
from .types import AnalysisRequest, Json, Rejected, Violation
from .values import canonical, same_at, same_json

__all__ = [
    "CREDENTIAL_REFUSED",
    "MAX_CHANGES",
    "MAX_VALUE_CHARS",
    "check_changes",
    "check_result",
]

MAX_CHANGES = 64
MAX_VALUE_CHARS = 16_384
# Every refusal of a change to a credential starts with this.
CREDENTIAL_REFUSED = "credential change refused"


def _carries_marker(value: Json) -> bool:
    if isinstance(value, str):
        return REDACTED in value
    if isinstance(value, list):
        return any(_carries_marker(v) for v in value)
    if isinstance(value, dict):
        return any(_carries_marker(v) for v in value.values())
    return False


def _protected(name: str, value: Json, request: AnalysisRequest) -> str | None:
    before = request.original_request
    after = {**before, name: value}
    for path in sorted(request.protected_parameters):
        if path == name:
            return name
        if path.startswith((name + ".", name + "[")) and not same_at(before, after, path):
            return path
    return None


def _refusal(name: str, value: Json, request: AnalysisRequest) -> str | None:
    params, schema = request.original_request, request.parameter_schema
    if not name or (name not in params and name not in properties(schema)):
        return "unknown parameter: it is neither in the original request nor in the schema"
    hit = _protected(name, value, request)
    if hit is not None:
        return f"protected parameter: {hit} is approved or bound exactly and never rewritten"
    if secret_name(name):
        return _credential_refused(f"{name} is named like a credential")
    # Sizes before any scan, so no check below reads more than MAX_VALUE_CHARS.
    if len(canonical(value)) > MAX_VALUE_CHARS:
        return f"too large: over {MAX_VALUE_CHARS} characters of JSON"
    if name in params and len(canonical(params[name])) > MAX_VALUE_CHARS:
        return (
            f"too large: the current value is over {MAX_VALUE_CHARS} characters of JSON, "
            "too long to be checked for a credential"
        )
    if name in params and credential_in(params[name]) is not None:
        return _credential_refused(f"the current value of {name} holds a credential")
    found = credential_in(value)
    if found is not None:
        return _credential_refused(f"the proposed value holds {found}")
    if name in params and same_json(value, params[name]):
        return "no change: the proposed value is the same JSON value as the original"
    if _carries_marker(value):
        return "carries the redaction marker: the analyzer never saw the real value"
    broken = problems(value, property_schema(schema, name), name)
    unchecked = [p for p in broken if UNCHECKED in p]
    if unchecked:
        return "cannot be checked against the schema: " + unchecked[0]
    if broken:
        return "breaks the schema: " + "; ".join(broken[:3])
    return None


def _credential_refused(why: str) -> str:
    return f"{CREDENTIAL_REFUSED}: {why}; no analyzer sets or replaces a credential"


def check_changes(
    changes: Mapping[str, Json], request: AnalysisRequest, already: Mapping[str, Json]
) -> tuple[dict[str, Json], list[Rejected]]:
    """The key-by-key gates. Keys in `already` (earlier layers) are kept as they are."""
    accepted: dict[str, Json] = {}
    rejected: list[Rejected] = []
    for i, (name, value) in enumerate(changes.items()):
        if i >= MAX_CHANGES:
            rejected.append(Rejected(name, value, f"too many changes: over {MAX_CHANGES}"))
        elif name in already:
            if not same_json(value, already[name]):
                rejected.append(
                    Rejected(name, value, "conflicts with an earlier layer's accepted change")
                )
        else:
            why = _refusal(name, value, request)
            if why is None:
                accepted[name] = value
            else:
                rejected.append(Rejected(name, value, why))
    return accepted, rejected


def _root(path: str) -> str:
    return path.split(".", 1)[0].split("[", 1)[0]


def check_result(
    changes: Mapping[str, Json], request: AnalysisRequest
) -> tuple[dict[str, Json], list[Rejected], tuple[Violation, ...]]:
    """The guard on the merged request.

    Returns the changes that survive, those refused because the guard still
    fails on their own parameter, and the violations left on parameters no
    change touched (which no suggestion here can fix).
    """
    kept = dict(changes)
    rejected: list[Rejected] = []
    while True:
        merged = {**request.original_request, **kept}
        violations = check_dispatch(merged, request.parameter_schema)
        mine = [v for v in violations if _root(v.parameter) in kept]
        if not mine:
            return kept, rejected, violations
        for v in mine:
            name = _root(v.parameter)
            if name in kept:
                rejected.append(Rejected(name, kept.pop(name), f"fails CheckDispatch: {v.message}"))
