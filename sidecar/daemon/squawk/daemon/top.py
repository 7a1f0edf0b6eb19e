"""`squawk top`: every upstream's state and what it does per second, with
the latest events underneath, refreshed every second (issue 36).

Each refresh reads GetUpstreams (every page), and the events since the
last one (GetEvents) only when GetUpstreams' last_event says there are
any: one RPC a refresh while nothing happens. The per-second columns are
the counters' change since the previous refresh over the time between
them: ADMITTED/S (calls admitted), PACED/S (Admits given a wait), SHED/S
(refused UPSTREAM_SATURATED), THROTTLED/S (outcomes reported throttled),
NEAR/S (answers whose headers said 80 % or more of a quota is used); "-"
on a row's first refresh. OK/2MIN and 429/2MIN are sparklines of the
successes and the throttles over the last two minutes, ten seconds a
character, from what this view read (dots before it began). Rows
with trouble come first (a breaker not CLOSED, a cool-down, a shed, a
throttle or a near-limit answer since the last refresh), then by the sort
key.

On a terminal each refresh redraws the screen, and keys act at once: `s`
moves to the next sort key (name, shed, throttled, paced), `f` shows only
the rows with trouble or every row, `q` quits. Into a pipe or a file the
output is plain and append-only, a refresh a block, as `squawk upstreams
--watch`. A refresh that fails shows its error in place of the table and
the view goes on. Names are shown as the CLI shows them (redacted and
escaped).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import sys
import termios
import time
import tty
from collections import deque
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import NamedTuple, TextIO

import grpc

from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

from .dial import hint, open_channel
from .event_list import event_line
from .upstream_table import fetch_states, row_cells

__all__ = ["EVENTS_SHOWN", "SORTS", "SPARK_S", "Frame", "Rates", "frame", "sparkline", "top"]

EVENTS_SHOWN = 8
SORTS = ("name", "shed", "throttled", "paced")
# The sparklines' span: SPARK_BINS characters of SPARK_S / SPARK_BINS each.
SPARK_S = 120.0
SPARK_BINS = 12
_BLOCKS = "▁▂▃▄▅▆▇█"
_NO_READING = "·"  # a stretch before the view's first reading: not a space, so cells stay one word
_CLEAR = "\x1b[H\x1b[2J"
_COLUMNS = (
    "PROFILE",
    "UPSTREAM",
    "BREAKER",
    "FOR",
    "COOL-DOWN",
    "PACE",
    "RATE",
    "QUEUE",
    "IN-FLIGHT",
    "RETRIES",
    "ADMITTED/S",
    "PACED/S",
    "SHED/S",
    "THROTTLED/S",
    "NEAR/S",
    "OK/2MIN",
    "429/2MIN",
)


class Rates(NamedTuple):
    paced: float | None
    shed: float | None
    throttled: float | None
    near_limit: float | None = None
    admitted: float | None = None


class Last(NamedTuple):
    """A row's counters as last read, and when; and (when, succeeded,
    throttled) about once a second over the last SPARK_S, oldest first."""

    paced: int
    shed: int
    throttled: int
    near_limit: int
    admitted: int
    at: float
    history: tuple[tuple[float, int, int], ...] = ()


Seen = dict[tuple[str, str], Last]


class Frame(NamedTuple):
    """One refresh's text, and the counters it read for the next one."""

    text: str
    seen: Seen


def _rates(s: pb.UpstreamState, seen: Seen, now: float) -> Rates:
    before = seen.get((s.profile, s.upstream))
    if before is None or now <= before.at:
        return Rates(None, None, None)
    dt = now - before.at
    return Rates(
        max(0, s.paced - before.paced) / dt,
        max(0, s.shed - before.shed) / dt,
        max(0, s.throttled - before.throttled) / dt,
        max(0, s.near_limit - before.near_limit) / dt,
        max(0, s.admitted - before.admitted) / dt,
    )


def _history(
    s: pb.UpstreamState, last: Last | None, now: float
) -> tuple[tuple[float, int, int], ...]:
    """The row's samples with this refresh's: over SPARK_S, about a second
    apart (a refresh within the second of the one before replaces it)."""
    kept = tuple(h for h in (last.history if last else ()) if now - h[0] <= SPARK_S)
    if len(kept) > 1 and now - kept[-2][0] < 1.0:
        kept = kept[:-1]
    return (*kept, (now, s.succeeded, s.throttled))


def sparkline(history: tuple[tuple[float, int, int], ...], now: float, field: int) -> str:
    """SPARK_BINS characters for the last SPARK_S: each what the counter
    `field` (1: succeeded, 2: throttled) grew by in its stretch, scaled to
    the largest; a dot where the view has no reading from before it."""
    width = SPARK_S / SPARK_BINS
    counts: list[int | None] = []
    for i in range(SPARK_BINS):
        start, end = now - SPARK_S + i * width, now - SPARK_S + (i + 1) * width
        before = [int(h[field]) for h in history if h[0] <= start + 1e-9]
        upto = [int(h[field]) for h in history if h[0] <= end + 1e-9]
        counts.append(upto[-1] - before[-1] if before and upto else None)
    most = max((c for c in counts if c is not None), default=0)
    return "".join(
        _NO_READING if c is None else _BLOCKS[(len(_BLOCKS) - 1) * c // most if most else 0]
        for c in counts
    )


def _troubled(s: pb.UpstreamState, r: Rates) -> bool:
    return (
        s.breaker_state != pb.BREAKER_STATE_CLOSED
        or s.cool_down_left.ToNanoseconds() > 0
        or bool(r.shed)
        or bool(r.throttled)
        or bool(r.near_limit)
    )


def _per_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def frame(
    states: list[pb.UpstreamState],
    events: list[pb.Event],
    seen: Seen,
    now: float,
    sort: str = "name",
    troubled_only: bool = False,
) -> Frame:
    """The table of `states` with their rates since `seen`, and `events`
    (the latest, oldest first) underneath."""
    rows = []
    histories = {}
    for s in states:
        key = (s.profile, s.upstream)
        r = _rates(s, seen, now)
        histories[key] = history = _history(s, seen.get(key), now)
        if troubled_only and not _troubled(s, r):
            continue
        cells = row_cells(s)
        # row_cells' order: profile, name, breaker, for, calls, failures,
        # retries, cool-down, pace, rate, queue, in-flight, paced, shed, throttled.
        shown = (*cells[0:4], cells[7], *cells[8:12], cells[6])
        order = {"shed": r.shed, "throttled": r.throttled, "paced": r.paced}.get(sort)
        rows.append(
            (
                (not _troubled(s, r), -(order or 0.0), s.profile, s.upstream),
                (
                    *shown,
                    _per_s(r.admitted),
                    _per_s(r.paced),
                    _per_s(r.shed),
                    _per_s(r.throttled),
                    _per_s(r.near_limit),
                    sparkline(history, now, 1),
                    sparkline(history, now, 2),
                ),
            )
        )
    rows.sort(key=lambda row: row[0])
    table = [_COLUMNS, *(cells for _, cells in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(_COLUMNS))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in table
    ]
    if troubled_only and not rows:
        lines.append("(no upstream in trouble: f shows every one)")
    lines += ["", "LATEST EVENTS", *(event_line(e) for e in events)]
    if not events:
        lines.append("(none yet)")
    seen = {
        key: Last(s.paced, s.shed, s.throttled, s.near_limit, s.admitted, now, histories[key])
        for s in states
        if (key := (s.profile, s.upstream))
    }
    return Frame("\n".join(lines), seen)


@contextlib.contextmanager
def _keys(terminal: bool) -> Iterator[Callable[[float], str]]:
    """A function that waits up to its seconds for a key and returns it
    ("" for none); on a terminal in cbreak mode, restored on the way out."""
    fd = sys.stdin.fileno() if terminal else -1
    if fd < 0 or not os.isatty(fd):

        def wait(seconds: float) -> str:
            time.sleep(seconds)
            return ""

        yield wait
        return
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def read(seconds: float) -> str:
        ready, _, _ = select.select([fd], [], [], seconds)
        return os.read(fd, 1).decode(errors="replace") if ready else ""

    try:
        yield read
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def top(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Refresh every `args.interval` seconds, `args.count` times (None:
    until q or Ctrl-C); the exit code of the last refresh."""
    terminal = out.isatty()
    sort, troubled_only = args.sort, False
    events: deque[pb.Event] = deque(maxlen=EVENTS_SHOWN)
    seen: Seen = {}
    after, code, done = 0, 0, 0
    try:
        with open_channel(args) as channel, _keys(terminal) as key:
            stub = pb_grpc.PolicyServiceStub(channel)
            while True:
                try:
                    states, _, last = fetch_states(stub, args.profile)
                    if last != after:
                        if last < after:  # the daemon restarted
                            events.clear()
                            after = 0
                        page = stub.GetEvents(
                            pb.GetEventsRequest(after=after, profile=args.profile, page_size=500),
                            timeout=10,
                        )
                        events.extend(page.events)
                        after = page.next_after
                    now = time.monotonic()
                    shown = frame(states, list(events), seen, now, sort, troubled_only)
                    text, seen, code = shown.text, shown.seen, 0
                except grpc.RpcError as exc:
                    text = f"(no view: {exc.code().name})"
                    code = 2 if exc.code() == grpc.StatusCode.INVALID_ARGUMENT else 1
                    if exc.code() == grpc.StatusCode.INVALID_ARGUMENT and after:
                        after = 0  # numbers from a daemon since restarted
                    print(f"squawk: {exc.code().name}: {exc.details()}{hint(args, exc)}", file=err)
                stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
                heading = f"every {args.interval:g}s, {stamp}, sorted by {sort}"
                if terminal:
                    keys = "s: sort, f: " + ("every row" if troubled_only else "trouble only")
                    out.write(f"{_CLEAR}{heading} ({keys}, q: quit)\n\n{text}\n")
                else:
                    out.write(f"# {heading}\n{text}\n\n")
                out.flush()
                done += 1
                if args.count is not None and done >= args.count:
                    return code
                pressed = key(args.interval)
                if pressed == "q":
                    return code
                if pressed == "s":
                    sort = SORTS[(SORTS.index(sort) + 1) % len(SORTS)]
                elif pressed == "f":
                    troubled_only = not troubled_only
    except KeyboardInterrupt:
        return code
