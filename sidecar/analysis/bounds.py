"""Every bound on what a caller or a model hands the analyzers, in one table.

The daemon runs every call on one event loop, so the bounds are chosen for
two things at once: real tool calls fit with room to spare (a schema of a
few hundred properties with long enums, dependency results of thousands of
values), and the most expensive request that fits still costs tens of
milliseconds of CPU, spent on the analysis worker thread rather than the
loop (see `worker`). `wire` enforces them on AnalyzeError and
CheckDispatch requests, answering INVALID_ARGUMENT with the field's path;
`json_problem` applies the same value limits to a model's answer, which is
hostile input too.

Structs (original_request, parameter_schema, dependency_results,
CheckDispatch's parameters and parameter_schema) are counted together per
request: MAX_VALUES values and MAX_CHARS characters of strings and keys.
"""

from __future__ import annotations

import math

from ..policy import PolicyInputError

__all__ = [
    "MAX_CHARS",
    "MAX_DEPENDENCIES",
    "MAX_DEPTH",
    "MAX_ITEMS",
    "MAX_KEY_CHARS",
    "MAX_PROTECTED",
    "MAX_PROTECTED_CHARS",
    "MAX_RETRIES",
    "MAX_STRING_CHARS",
    "MAX_TEXT_CHARS",
    "MAX_VALUES",
    "check_count",
    "json_problem",
]

# Nesting: a value inside more than this many objects or arrays is refused.
# (protobuf's own recursion limit of 100 messages allows about 32 levels
# of nested Structs, and a few more of lists.)
MAX_DEPTH = 32
# Every value (object, array, string, number, boolean, null) in one request.
MAX_VALUES = 20_000
# Every character of every string and key in one request's Structs.
MAX_CHARS = 2 << 20
# One object's keys, or one array's items.
MAX_ITEMS = 10_000
MAX_KEY_CHARS = 1_024
MAX_STRING_CHARS = 1 << 20
# AnalyzeError's plain text fields (error_response has its own limit: the
# policy file's max_body_bytes, 1 MiB by default).
MAX_TEXT_CHARS = {
    "user_query": 16_384,
    "capability_name": 256,
    "capability_description": 16_384,
    "step_id": 256,
}
MAX_PROTECTED = 256
MAX_PROTECTED_CHARS = 1_024
MAX_DEPENDENCIES = 64
# validation_retries_used, max_validation_retries, semantic_retries_used,
# max_semantic_retries: each 0..MAX_RETRIES.
MAX_RETRIES = 1_000


def check_count(field: str, count: int, limit: int, what: str = "entries") -> None:
    if count > limit:
        raise PolicyInputError(field, f"{count} {what} is over the limit of {limit}")


def json_problem(value: object, max_values: int = MAX_VALUES) -> str | None:
    """Why `value` (from json.loads) breaks the value limits above, or None.

    Also refuses what a Struct could never carry: a number that is not
    finite (json.loads reads 1e999 as infinity) and a string that is not
    valid Unicode (a lone surrogate from a \\ud800 escape). Iterative, so no
    depth of nesting can overflow the stack here.
    """
    stack: list[tuple[object, int]] = [(value, 0)]
    seen = chars = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > max_values:
            return f"more than {max_values} values"
        if depth > MAX_DEPTH:
            return f"nested more than {MAX_DEPTH} levels deep"
        if isinstance(node, str):
            chars += len(node)
            if len(node) > MAX_STRING_CHARS or not _unicode(node):
                return "a string that is too long or not valid Unicode"
        elif isinstance(node, float) and not math.isfinite(node):
            return "a number that is not finite"
        elif isinstance(node, list):
            if len(node) > MAX_ITEMS:
                return f"an array of more than {MAX_ITEMS} items"
            stack += [(item, depth + 1) for item in node]
        elif isinstance(node, dict):
            if len(node) > MAX_ITEMS:
                return f"an object of more than {MAX_ITEMS} keys"
            for key, item in node.items():
                chars += len(key)
                if len(key) > MAX_KEY_CHARS or not _unicode(key):
                    return "a key that is too long or not valid Unicode"
                stack.append((item, depth + 1))
        if chars > MAX_CHARS:
            return f"more than {MAX_CHARS} characters"
    return None


def _unicode(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
