"""The decision log: one JSON line per decision (--decision-log).

The fields are the span's and the metrics' (fields.py), already shown
(bounded, secrets redacted) by the Observer, plus the time, the RPC and the
trace's ids.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import IO

from .fields import Field
from .spans import SpanRecord

__all__ = ["LOG_SLICE", "write_line"]

# A batch's decision-log lines written between two yields to the event loop.
LOG_SLICE = 256
# What JSON leaves raw of the control characters and line breaks: it escapes
# the C0 controls (\x00-\x1f) but not DEL (\x7f), the C1 controls
# (\x80-\x9f, NEL \x85 a line break of str.splitlines()) or U+2028/U+2029
# (JavaScript's line breaks). A caller's name holding one would reach a
# terminal raw, or start a line of its own; escaped, each reads as the C0
# ones do.
_RAW = ["\x7f", *map(chr, range(0x80, 0xA0)), "\u2028", "\u2029"]
_ESCAPES = str.maketrans({c: f"\\u{ord(c):04x}" for c in _RAW})


def write_line(out: IO[str], rpc: str, fields: Mapping[str, Field], span: SpanRecord) -> None:
    """One decision's line, with its trace's ids when the call has a span."""
    ctx = span.get_span_context()
    line = {"ts": time.time(), "rpc": rpc, **fields}
    if ctx.is_valid:
        line["trace_id"] = f"{ctx.trace_id:032x}"
        line["span_id"] = f"{ctx.span_id:016x}"
    # UTF-8, not \u escapes: a 4-byte character escaped is 12 bytes,
    # and two names of 256 such would pass 6 KiB.
    text = json.dumps(line, separators=(",", ":"), ensure_ascii=False)
    if not text.isascii() or "\x7f" in text:
        text = text.translate(_ESCAPES)
    out.write(text + "\n")
