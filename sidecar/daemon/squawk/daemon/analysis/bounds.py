"""Every bound on what a caller or a model hands the analyzers, in one table.

The daemon runs every call on one event loop, so the bounds are chosen for
two things at once: real tool calls fit with room to spare (a schema of a
few hundred properties with long enums, dependency results of thousands of
values), and the most expensive request that fits still costs tens of
milliseconds of CPU, spent on the analysis worker thread rather than the
loop (see `worker`). `wire` enforces them on the Structs of
AnalyzeError and CheckDispatch requests as it reads them, and `validate`
on AnalyzeError's plain fields (for in-process callers too), each refusal
an INVALID_ARGUMENT that starts with the field's path; `json_problem`
applies the same value limits to a model's answer, which is hostile input
too.

Structs (original_request, parameter_schema, dependency_results,
CheckDispatch's parameters and parameter_schema) are counted together per
request: MAX_VALUES values and MAX_CHARS characters of strings and keys.
"""

from __future__ import annotations

import math

from squawk.policy import PolicyInputError
from squawk.policy.classify import check_status
from squawk.policy.limits import MAX_NAME_CHARS
from squawk.policy.profiles import DEFAULT_MAX_BODY_BYTES

from .types import AnalysisRequest

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
    "validate",
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
    "capability_name": MAX_NAME_CHARS,
    "capability_description": 16_384,
    "step_id": MAX_NAME_CHARS,
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


def validate(request: AnalysisRequest, max_error_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
    """Raise PolicyInputError naming the first field AnalyzeError cannot accept.

    The plain fields' bounds; the Structs' are enforced as `wire` reads them.
    """
    check_status(request.http_status)
    for name in ("validation_retries_used", "semantic_retries_used"):
        used = getattr(request, name)
        if not 0 <= used <= MAX_RETRIES:
            raise PolicyInputError(name, f"must be between 0 and {MAX_RETRIES}, got {used}")
    for name in ("max_validation_retries", "max_semantic_retries"):
        limit = getattr(request, name)
        if limit is not None and not 0 <= limit <= MAX_RETRIES:
            raise PolicyInputError(
                name, f"must be between 0 and {MAX_RETRIES} when set, got {limit}"
            )
    size = len(request.error_response.encode())
    if size > max_error_bytes:
        raise PolicyInputError(
            "error_response", f"{size} bytes is over the limit of {max_error_bytes} bytes"
        )
    for name, limit in MAX_TEXT_CHARS.items():
        length = len(getattr(request, name))
        if length > limit:
            raise PolicyInputError(name, f"{length} characters is over the limit of {limit}")
    check_count("protected_parameters", len(request.protected_parameters), MAX_PROTECTED)
    for path in request.protected_parameters:
        if not 0 < len(path) <= MAX_PROTECTED_CHARS:
            raise PolicyInputError(
                "protected_parameters",
                f"each name must be 1 to {MAX_PROTECTED_CHARS} characters, got {len(path)}",
            )
    check_count("dependency_results", len(request.dependency_results), MAX_DEPENDENCIES)
    step_limit = MAX_TEXT_CHARS["step_id"]
    for step in request.dependency_results:
        if len(step) > step_limit:
            raise PolicyInputError(
                "dependency_results",
                f"a step id of {len(step)} characters is over the limit of {step_limit}",
            )


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
