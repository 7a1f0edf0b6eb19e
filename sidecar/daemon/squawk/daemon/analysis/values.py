"""JSON value helpers shared by the guard, the analyzers and the gates.

Numbers arrive from a proto Struct as floats (2 becomes 2.0), so "the same
JSON value" treats 2 and 2.0 as equal but keeps booleans, numbers and
strings apart: "2" -> 2 and 1 -> true are real changes.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping

from .types import Json

__all__ = [
    "canonical",
    "distinct",
    "json_key",
    "kind",
    "leaves",
    "number_text",
    "path_get",
    "same_at",
    "same_json",
    "scalar_text",
]


def kind(value: Json) -> str:
    """The JSON type name: null, boolean, number, string, array or object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def same_json(a: Json, b: Json) -> bool:
    """JSON equality: 2 == 2.0, but "2" != 2 and true != 1."""
    ka, kb = kind(a), kind(b)
    if ka != kb:
        return False
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    return a == b


def number_text(value: int | float) -> str:
    """A number as JSON would print it: 2.0 -> "2", 2.5 -> "2.5"."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return str(value)


def scalar_text(value: Json) -> str | None:
    """The text form of a scalar ("true", "2", "PAR"); None for containers and null."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return number_text(value)
    if isinstance(value, str):
        return value
    return None


def canonical(value: Json) -> str:
    """A stable text form, for cache keys and for comparing candidates."""

    def finite(obj: object) -> object:
        if isinstance(obj, float) and obj.is_integer() and abs(obj) < 2**53:
            return int(obj)
        if isinstance(obj, float) and not math.isfinite(obj):
            return str(obj)
        if isinstance(obj, list):
            return [finite(v) for v in obj]
        if isinstance(obj, dict):
            return {k: finite(v) for k, v in obj.items()}
        return obj

    return json.dumps(finite(value), sort_keys=True, separators=(",", ":"))


JsonKey = tuple[str, object]


def json_key(value: Json) -> JsonKey:
    """A hashable key equal for two values exactly when `same_json` holds.

    Scalars are keyed directly (2 and 2.0 are one float; "2", 2 and true
    are three kinds), containers by their canonical text.
    """
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int | float):
        return ("number", float(value))
    if isinstance(value, str):
        return ("string", value)
    if value is None:
        return ("null", None)
    return ("json", canonical(value))


def distinct(values: Iterable[Json], limit: int | None = None) -> list[Json]:
    """`values` without repeats (by `same_json`), in order; at most `limit` of them.

    One key per value and a set, so N candidates cost N, not N x N.
    """
    seen: set[JsonKey] = set()
    out: list[Json] = []
    for value in values:
        key = json_key(value)
        if key not in seen:
            seen.add(key)
            out.append(value)
            if limit is not None and len(out) >= limit:
                break
    return out


def leaves(value: Json, path: str = "") -> Iterator[tuple[str, str, Json]]:
    """Every (path, last key, value) in a JSON tree, containers included."""
    if isinstance(value, dict):
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            yield sub, key, item
            yield from leaves(item, sub)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            sub = f"{path}[{i}]"
            last = path.rsplit(".", 1)[-1].split("[", 1)[0]
            yield sub, last, item
            yield from leaves(item, sub)


_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_MISSING = object()


def path_get(root: Mapping[str, Json], path: str) -> object:
    """The value at "a.b[0].c", or a private sentinel object when absent."""
    node: object = root
    for name, index in _STEP.findall(path):
        if name and isinstance(node, Mapping) and name in node:
            node = node[name]
        elif index and isinstance(node, list) and int(index) < len(node):
            node = node[int(index)]
        else:
            return _MISSING
    return node


def same_at(a: Mapping[str, Json], b: Mapping[str, Json], path: str) -> bool:
    """Whether `a` and `b` hold the same JSON value (or both nothing) at `path`."""
    left, right = path_get(a, path), path_get(b, path)
    if left is _MISSING or right is _MISSING:
        return left is right
    return same_json(left, right)  # type: ignore[arg-type]
