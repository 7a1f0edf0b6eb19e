"""Secret redaction: the one place that knows what a secret looks like.

Used for Classify's redacted_message, for every log line and span attribute
that carries upstream text, and for every prompt sent to a model. Each
pattern is linear-time (no nested quantifiers), so a multi-megabyte message
is scanned in bounded time.
"""

from __future__ import annotations

import re

__all__ = ["REDACTED", "redact"]

REDACTED = "[REDACTED]"

# name=value, name: value, "name": "value" for names that hold secrets.
_SECRET_NAMES = (
    r"api[_-]?key|apikey|x-api-key|access[_-]?key|secret[_-]?key|client[_-]?secret|secret"
    r"|access[_-]?token|refresh[_-]?token|id[_-]?token|auth[_-]?token|token"
    r"|password|passwd|pwd|private[_-]?key|session[_-]?id|signature|sig|key"
)
_ASSIGNMENT = re.compile(
    rf"""(?ix)
    (?P<name>["']?\b(?:{_SECRET_NAMES})\b["']?)
    (?P<sep>\s*[:=]\s*)
    (?P<quote>["']?)
    (?!\[REDACTED\])
    (?P<value>[^\s"'&,;}}<>]+)
    """
)
# Authorization schemes: "Bearer <token>", "Basic <b64>", "Token <t>".
_AUTH_SCHEME = re.compile(
    r"(?i)\b(bearer|basic|token|digest)(\s+)(?!\[REDACTED\])[A-Za-z0-9._~+/=-]{8,}"
)
# Credentials inside URLs: scheme://user:password@host.
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{1,15}://)[^/\s:@]+:[^/\s@]+@")
# Well-known token shapes that need no name in front of them.
_TOKEN_SHAPES = re.compile(
    r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}"  # OpenAI/Anthropic/Stripe style
    r"|\b(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{16,}"  # GitHub
    r"|\bxox[abposr]-[A-Za-z0-9-]{8,}"  # Slack
    r"|\bAKIA[0-9A-Z]{16}\b"  # AWS access key id
    r"|\bAIza[0-9A-Za-z_-]{30,}"  # Google API key
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"  # JWT
)


def redact(text: str) -> str:
    """Return `text` with every recognised secret replaced by [REDACTED]."""
    if not text:
        return text
    text = _URL_CREDENTIALS.sub(rf"\1{REDACTED}@", text)
    text = _AUTH_SCHEME.sub(rf"\1\2{REDACTED}", text)
    text = _ASSIGNMENT.sub(rf"\g<name>\g<sep>\g<quote>{REDACTED}", text)
    return _TOKEN_SHAPES.sub(REDACTED, text)
