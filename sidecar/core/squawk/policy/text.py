"""The one boundary every caller string passes before it is shown anywhere.

A span attribute, a decision-log line, an error message, a metric label or
a model prompt may carry text a caller sent. `shown_text` makes such text
safe to show: bounded in length, valid UTF-8 (protobuf refuses to send a
lone surrogate, which a JSON body can smuggle in as an escape) and with
every recognised secret redacted. `quoted` is the form an error message
uses to echo a caller's value.

Clipping happens around redaction, never only before it: the text is first
cut to the limit plus a margin (so redaction's cost is bounded by the limit,
not by what the caller sent), redacted, and only then cut to the limit at
a token boundary, so a secret cut in half never leaves its first half
behind.
"""

from __future__ import annotations

import re

from .redact import redact

__all__ = ["ELLIPSIS", "MAX_QUOTED_CHARS", "quoted", "shown_text", "valid_utf8"]

ELLIPSIS = "…"
# How much of a caller's value an error message may quote.
MAX_QUOTED_CHARS = 64
# Longer than any secret shape redaction knows (PEM blocks aside, which are
# cut at a line anyway), so a secret that straddles the limit is still seen
# whole by redaction before the final cut.
_MARGIN = 4096

_SURROGATE = re.compile("[\ud800-\udfff]")
# A cut inside a word drops the word, back to one of these, up to this many
# characters: longer than any secret shape, short enough to stay cheap.
_WORD_ENDS = frozenset("\"'<>,;")
_MAX_DROPPED = 512


def valid_utf8(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD."""
    if text.isascii():
        return text
    return _SURROGATE.sub("\ufffd", text)


def _cut(text: str, limit: int) -> str:
    end = limit
    if not text[limit].isspace():
        # Cut inside a word: drop the partial word rather than show half of it.
        # (A loop, not a regex anchored at the end: `re` would try that
        # anchor from every position of the text.)
        stop = max(0, limit - _MAX_DROPPED)
        while end > stop and not text[end - 1].isspace() and text[end - 1] not in _WORD_ENDS:
            end -= 1
    return text[:end] + ELLIPSIS


def shown_text(text: str, limit: int) -> str:
    """`text` made safe to show: at most `limit` characters (plus an
    ellipsis), valid UTF-8, secrets redacted."""
    if len(text) > limit:
        text = text[: limit + _MARGIN]
    text = redact(valid_utf8(text))
    if len(text) > limit:
        text = _cut(text, limit)
    return text


def quoted(value: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """A caller's value as an error message quotes it: redacted, bounded, repr'd.

    Redaction runs before repr(): repr turns a newline into a backslash and
    an n, which would glue the next word to the one before it.
    """
    return repr(shown_text(value, limit))
