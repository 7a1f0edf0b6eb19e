"""What counts as a credential in a JSON value, asked of the one redaction rule.

`squawk.policy.redact` is the only place that knows what a secret looks
like. This module asks it two questions about JSON: is this key *named*
like a credential (`api_key`, `password`: would `name=...` be redacted?),
and is this string *shaped* like one (`sk-...`, a JWT, `Bearer ...`: does
redaction change it?). The gates refuse any change either answer touches,
the prompt withholds such values, and what an answer echoes back
(rejected proposals) passes `redacted`.
"""

from __future__ import annotations

import functools

from squawk.policy import REDACTED, redact

from .types import Json

__all__ = ["credential_in", "redacted", "secret_name"]


@functools.lru_cache(maxsize=1024)
def secret_name(name: str) -> bool:
    """Whether a key named `name` holds a credential, by the redaction rule's own list."""
    probe = f"{name}=probe-value"
    return redact(probe) != probe


def credential_in(value: Json) -> str | None:
    """What in `value` is a credential: a secret-shaped string or a credential-named key.

    None when nothing is. The walk is iterative: `value` is bounded in size
    and depth before it gets here, and a stack of its own cannot overflow.
    """
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if redact(node) != node:
                return "a value shaped like a secret (a key, token or password)"
        elif isinstance(node, list):
            stack += node
        elif isinstance(node, dict):
            for key, item in node.items():
                if redact(key) != key:
                    return "a key shaped like a secret"
                if secret_name(key):
                    return f"a key named like a credential ({key})"
                stack.append(item)
    return None


def redacted(value: Json, under_secret: bool = False) -> Json:
    """`value` with every secret-shaped string redacted and credential-named values withheld."""
    if isinstance(value, str):
        return REDACTED if under_secret else redact(value)
    if isinstance(value, list):
        return [redacted(v, under_secret) for v in value]
    if isinstance(value, dict):
        return {redact(k): redacted(v, under_secret or secret_name(k)) for k, v in value.items()}
    if under_secret and value is not None and not isinstance(value, bool):
        return REDACTED
    return value
