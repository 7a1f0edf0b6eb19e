"""Secret redaction: the one place that knows what a secret looks like.

Used for Classify's redacted_message, for every log line and span attribute
that carries upstream text, and for every prompt sent to a model. Each
pattern is linear-time (no nested quantifiers), so a multi-megabyte message
is scanned in bounded time.

Redaction runs on every decision that carries text, so it is built for the
common case, a message with no secret in it: each rule first checks, with a
plain substring test, for a word every match of its pattern must contain,
and skips its regex scan (1-15 us each on a short message) when there is
none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["REDACTED", "redact"]

REDACTED = "[REDACTED]"

# name=value, name: value, "name": "value" for names that hold secrets. Every
# alternative starts with a literal letter (see _ASSIGNMENT's lookahead).
_SECRET_NAMES = (
    r"api[_-]?key|apikey|x-api-key|access[_-]?key|secret[_-]?key|client[_-]?secret|secret"
    r"|access[_-]?token|refresh[_-]?token|id[_-]?token|auth[_-]?token|token"
    r"|password|passwd|pwd|private[_-]?key|session[_-]?id|signature|sig|key"
)
# The lookahead is implied by the rest of the pattern, but spelled out it lets
# the regex engine reject most positions with one character test (about twice
# as fast): under IGNORECASE, `re` derives no such prefix from the names.
_NAME_STARTS = "".join(sorted({name[0] for name in _SECRET_NAMES.split("|")}))
_ASSIGNMENT = re.compile(
    rf"""(?ix)
    (?=["'{_NAME_STARTS}])
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
# The literal start of each alternative above, lower-cased.
_SHAPE_STARTS = (
    *("sk-", "pk-", "rk-"),
    *("ghp_", "gho_", "ghs_", "ghu_", "github_pat_"),
    *("xox", "akia", "aiza", "eyj"),
)


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str]
    replacement: str
    # Lower-case words every match contains: at least one word of each group.
    # A text without them cannot match, and `in` is far cheaper than a scan.
    needs: tuple[tuple[str, ...], ...]


# Applied in this order, each to the previous one's output.
_RULES = (
    _Rule(_URL_CREDENTIALS, rf"\1{REDACTED}@", (("://",), ("@",))),
    _Rule(_AUTH_SCHEME, rf"\1\2{REDACTED}", (("bearer", "basic", "token", "digest"),)),
    _Rule(
        _ASSIGNMENT,
        rf"\g<name>\g<sep>\g<quote>{REDACTED}",
        # Every name in _SECRET_NAMES contains one of these.
        (("key", "secret", "token", "passw", "pwd", "sig", "session"),),
    ),
    _Rule(_TOKEN_SHAPES, REDACTED, (_SHAPE_STARTS,)),
)


def _may_match(folded: str, needs: tuple[tuple[str, ...], ...]) -> bool:
    for words in needs:
        for word in words:
            if word in folded:
                break
        else:
            return False
    return True


def redact(text: str) -> str:
    """Return `text` with every recognised secret replaced by [REDACTED]."""
    if not text:
        return text
    # Under IGNORECASE, `re` matches a few non-ASCII letters to ASCII ones
    # (the Kelvin sign to k, the long s to s) that str.lower() does not fold
    # the same way, so only ASCII text may skip a rule on a word test.
    ascii_only = text.isascii()
    folded = text.lower()
    for rule in _RULES:
        if ascii_only and not _may_match(folded, rule.needs):
            continue
        text = rule.pattern.sub(rule.replacement, text)
        folded = text.lower()
    return text
