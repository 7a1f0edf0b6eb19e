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
# The line breaks of str.splitlines() (and U+2028/U+2029, JavaScript's)
# that JSON leaves raw: it escapes the C0 controls (\v, \f, \x1c-\x1e) but
# not these, so a caller's name holding one would start a line of its own.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


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
    if not text.isascii():
        text = text.translate(_LINE_BREAKS)
    out.write(text + "\n")
