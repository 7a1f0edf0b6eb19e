"""The status page: `squawk upstreams` and the latest events as one HTML
page on the metrics port (GET /status), for a person with a browser.

Server-rendered, with no script and nothing loaded from elsewhere (its
style is inline): it works where the pod's network reaches nothing else. It
asks the browser to load it again every REFRESH_S seconds. Every cell is
the same text the CLI prints (squawk.daemon.upstream_table,
squawk.daemon.event_list: names redacted and escaped there), HTML-escaped
here, so a name cannot add markup. Bounded: at most MAX_ROWS upstreams
(a line says how many more) and the EVENTS latest events.

`/status?decision=ID` puts above them why a step was refused: the
decision a runner's failure named, as `squawk explain ID` prints it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime
from urllib.parse import parse_qs

from squawk.policy import PolicyInputError
from squawk.policy.limits import check_chars
from squawk.policy.text import shown_text
from squawk.v1 import policy_pb2 as pb

from ...event_list import event_cells
from ...explain import explanation_text
from ...upstream_table import COLUMNS, row_cells
from .decisions_kept import MAX_ID_CHARS

__all__ = ["EVENTS", "MAX_QUERY_CHARS", "MAX_ROWS", "REFRESH_S", "decision_asked", "render"]

# ?decision=ID at its longest, with room to spare.
MAX_QUERY_CHARS = 256

# A person reads it; every 5 s keeps what it costs the daemon under 0.5 %
# of its CPU at 1,000 calls/s (bench/views.py).
REFRESH_S = 5
MAX_ROWS = 200
EVENTS = 50

_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}"
    "table{border-collapse:collapse;margin-bottom:1.5em;font-size:0.9em}"
    "th,td{border:1px solid #ccc;padding:0.25em 0.5em;text-align:left;vertical-align:top}"
    "th{background:#f3f3f3}"
    "tr.OPEN td{background:#fde2e2}tr.HALF_OPEN td{background:#fff4d6}"
    "p.note{color:#666}"
)
_EVENT_COLUMNS = ("TIME", "#", "KIND", "PROFILE", "UPSTREAM", "CHANGE", "CAUSE")


_MARKUP = frozenset("<>&\"'")


def _text(cell: str) -> str:
    # Most cells are numbers and plain names: escaped only when they need it.
    return html.escape(cell) if not _MARKUP.isdisjoint(cell) else cell


def _row(cells: Sequence[str], tag: str = "td", css: str = "") -> str:
    inner = "".join(f"<{tag}>{_text(cell)}</{tag}>" for cell in cells)
    return f'<tr class="{css}">{inner}</tr>' if css else f"<tr>{inner}</tr>"


def decision_asked(query: str) -> str:
    """The decision id /status's query asks about ("" for none);
    PolicyInputError naming a bad, unknown or repeated field."""
    if not query:
        return ""
    if len(query) > MAX_QUERY_CHARS:
        raise PolicyInputError("query", f"must be at most {MAX_QUERY_CHARS} characters")
    try:
        fields = parse_qs(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise PolicyInputError("query", "is not a query string of name=value pairs") from None
    if set(fields) != {"decision"}:
        raise PolicyInputError("query", "has one field, decision (a refusal's decision_id)")
    values = fields["decision"]
    if len(values) != 1 or not values[0]:
        raise PolicyInputError("decision", "must be given once, a refusal's decision_id")
    check_chars("decision", values[0], MAX_ID_CHARS)
    if not (values[0].isascii() and values[0].isprintable()):
        # Every id the daemon gives is a short printable token.
        raise PolicyInputError("decision", "must be printable ASCII, a refusal's decision_id")
    return values[0]


def _decision(asked: str, explained: pb.ExplainDecisionResponse | None) -> str:
    if not asked:
        return ""
    if explained is None:
        return (
            f'<h2>Decision</h2><p class="note">{html.escape(shown_text(asked, MAX_ID_CHARS))} '
            "is not kept: the daemon keeps its latest refusals only, and a restarted daemon "
            "none of the last one's.</p>"
        )
    return f"<h2>Decision</h2><pre>{html.escape(explanation_text(explained))}</pre>"


def render(
    upstreams: Sequence[pb.UpstreamState],
    more: int,
    events: Sequence[pb.Event],
    now: float,
    asked: str = "",
    explained: pb.ExplainDecisionResponse | None = None,
) -> bytes:
    """The page: the decision `asked` about when one was (`explained`:
    None when it is not kept), then `upstreams` (the first MAX_ROWS, `more`
    left out), then `events`, newest first; `now`: wall seconds, for its
    heading."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    rows = [
        _row(cells, css=cells[2])
        for cells in sorted(map(row_cells, upstreams), key=lambda c: (c[0], c[1]))
    ]
    left_out = (
        f'<p class="note">{more} more upstreams are tracked: '
        "<code>squawk upstreams</code> lists them all.</p>"
        if more
        else ""
    )
    none = "" if rows else '<p class="note">No upstream is tracked yet.</p>'
    shown = [_row(event_cells(e)) for e in reversed(events)]
    quiet = "" if shown else '<p class="note">Nothing has changed yet.</p>'
    page = (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="{REFRESH_S}">'
        "<title>Squawk status</title>"
        f"<style>{_STYLE}</style></head><body>"
        f'<h1>Squawk status</h1><p class="note">{stamp}, every {REFRESH_S} s</p>'
        f"{_decision(asked, explained)}"
        "<h2>Upstreams</h2>"
        f"<table><thead>{_row(COLUMNS, 'th')}</thead><tbody>{''.join(rows)}</tbody></table>"
        f"{none}{left_out}"
        f"<h2>Latest events</h2>"
        f"<table><thead>{_row(_EVENT_COLUMNS, 'th')}</thead><tbody>{''.join(shown)}</tbody></table>"
        f"{quiet}</body></html>\n"
    )
    return page.encode()
