"""The table: one line per row, one row's rounds together."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Row", "render_table", "trace_label"]

Row = dict[str, Any]

_COLUMNS = (
    ("target", "target", 12, "s"),
    ("rpc", "rpc", 30, "s"),
    ("trace", "trace", 5, "s"),
    ("mode", "mode", 10, "s"),
    ("round", "round", 5, "d"),
    ("calls_per_s", "calls/s", 8, ".0f"),
    ("decisions_per_s", "dec/s", 8, ".0f"),
    ("p50_ms", "p50 ms", 7, ".3f"),
    ("p99_ms", "p99 ms", 7, ".3f"),
    ("p999_ms", "p99.9 ms", 8, ".3f"),
    ("cpu_s_per_1k", "CPU s/1k", 8, ".3f"),
    # The dispatch row's (dispatch.py): the RPCs one dispatch sent the daemon.
    ("rpcs_per_dispatch", "RPC/d", 5, ".2f"),
    ("rss_mb", "RSS MB", 6, ".1f"),
    ("lag_p99_ms", "lag p99", 7, "g"),
    ("lag_max_ms", "lag max", 7, "g"),
    ("local_share", "local", 6, ".1%"),
    ("spans_per_call", "spans", 5, ".2f"),
)


def trace_label(sampling: float | None) -> str:
    """off, or the share of calls traced: 100%, 10%."""
    return "off" if sampling is None else f"{sampling:.0%}"


def _cell(value: Any, width: int, fmt: str) -> str:
    if value is None:
        text = "-"
    elif isinstance(value, str):
        text = value
    else:
        text = format(value, fmt)
    return text.rjust(width) if fmt != "s" else text.ljust(width)


def render_table(rows: Sequence[Row]) -> str:
    head = " ".join(_cell(title, width, "s") for _, title, width, _ in _COLUMNS) + "  status"
    lines = [head, "-" * len(head)]
    for row in rows:
        shown = row | {"trace": trace_label(row.get("sampling"))}
        cells = " ".join(_cell(shown.get(key), w, fmt) for key, _, w, fmt in _COLUMNS)
        # One line per row; the JSON keeps the whole status (log tails included).
        status = " | ".join(line.strip() for line in row["status"].splitlines() if line.strip())
        lines.append(f"{cells}  {status[:200]}")
    return "\n".join(lines)
