"""`squawk upstreams`: every page of a daemon's GetUpstreams, as a table.

The pod's columns come first; `--fleet` adds the fleet's view beside them
(the Redis store's last sync, as UpstreamState.fleet carries it), so a pod
whose own breaker is CLOSED while the fleet's refuses shows both. Rows are
sorted by profile and name; a name is caller data, shown escaped. CALLS and
FAILURES are the breaker's window, and while it is OPEN the outcomes that
opened it (the daemon keeps them for this); THROTTLED counts the outcomes
reported throttled since tracking began (a 429 or 529, a 503 with a
Retry-After, a refusing pushback: squawk.policy.outcome.is_throttled).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NamedTuple

from google.protobuf.duration_pb2 import Duration

from squawk.policy import redact
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

from .dial import open_channel

__all__ = [
    "COLUMNS",
    "NO_FLEET_VIEW",
    "Listing",
    "fetch_states",
    "list_upstreams",
    "read_upstreams",
    "row_cells",
    "upstream_table",
]

COLUMNS = (
    "PROFILE",
    "UPSTREAM",
    "BREAKER",
    "FOR",
    "CALLS",
    "FAILURES",
    "RETRIES",
    "COOL-DOWN",
    "PACE",
    "RATE",
    "QUEUE",
    "IN-FLIGHT",
    "PACED",
    "SHED",
    "THROTTLED",
)
# FleetState's fields, in its order. LEFT: the time until the fleet's breaker
# half-opens (OPEN) or its round restarts (HALF_OPEN); AGE: since the sync.
_FLEET_COLUMNS = (
    "FLEET",
    "LEFT",
    "F-CALLS",
    "F-FAILURES",
    "FAILING-PODS",
    "PROBES",
    "F-RETRIES",
    "F-COOL-DOWN",
    "SHARE",
    "PODS",
    "AGE",
)
_NO_FLEET_ROW = ("-",) * len(_FLEET_COLUMNS)
# The line `--fleet` prints when no row has a fleet view.
NO_FLEET_VIEW = (
    "(no fleet view: the daemon keeps its state in memory, or was not syncing these "
    "upstreams, quiet here for over 2 s; with the Redis store, asking reads them: "
    "list again in a moment)"
)

# Pages of GetUpstreams the table reads at most: ten times a full registry.
_MAX_PAGES = 100


def _seconds(d: Duration, digits: int = 1) -> str:
    return f"{d.ToTimedelta().total_seconds():.{digits}f}s"


def _breaker(state: pb.BreakerState.ValueType) -> str:
    return pb.BreakerState.Name(state).removeprefix("BREAKER_STATE_")


def _pace(s: pb.UpstreamState) -> tuple[str, str, str, str]:
    """The pace columns: its source, its rate (calls/s, and token units/s
    when it has one), the queue's delay, and the calls in flight (of the
    concurrency limit, when one was learned). "-" where there is none."""
    source = pb.PaceSource.Name(s.pace_source).removeprefix("PACE_SOURCE_").lower()
    rate = f"{s.rate:.3g}/s" if s.rate else "-"
    if s.token_rate:
        rate += f",{s.token_rate:.3g}tok/s"
    flight = f"{s.in_flight}/{s.concurrency_limit}" if s.concurrency_limit else str(s.in_flight)
    return source, rate, _seconds(s.queue_delay, 3), flight


def row_cells(s: pb.UpstreamState) -> tuple[str, ...]:
    """One upstream's cells under COLUMNS (the table's, and the status page's)."""
    return (
        s.profile,
        # A name is caller data: escaped, it cannot forge a row or steer the terminal.
        redact(repr(s.upstream)[1:-1]),
        _breaker(s.breaker_state),
        _seconds(s.breaker_state_age),
        str(s.window_calls),
        str(s.window_failures),
        f"{s.budget_balance:g}",
        _seconds(s.cool_down_left),
        *_pace(s),
        str(s.paced),
        str(s.shed),
        str(s.throttled),
    )


def _fleet(s: pb.UpstreamState) -> tuple[str, ...]:
    if not s.HasField("fleet"):
        return _NO_FLEET_ROW
    f = s.fleet
    return (
        _breaker(f.breaker_state),
        _seconds(f.breaker_retry_after) if f.HasField("breaker_retry_after") else "-",
        str(f.window_calls),
        str(f.window_failures),
        str(f.failing_pods),
        str(f.probes),
        str(f.retries_left),
        _seconds(f.cool_down_left),
        f"{f.pace_share:.3g}",
        str(f.pods),
        _seconds(f.age, 3),
    )


def upstream_table(states: Sequence[pb.UpstreamState], fleet: bool = False) -> str:
    """GetUpstreams as aligned columns; names are shown as the daemon holds
    them. `fleet`: the fleet's columns too ("-" on a row without a view)."""
    header = COLUMNS + _FLEET_COLUMNS if fleet else COLUMNS
    rows = [header] + [row_cells(s) + _fleet(s) if fleet else row_cells(s) for s in states]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def list_upstreams(args: argparse.Namespace) -> str:
    """The table of every tracked upstream, read once (read_upstreams)."""
    with open_channel(args) as channel:
        return read_upstreams(pb_grpc.PolicyServiceStub(channel), args)


class Listing(NamedTuple):
    """Every upstream GetUpstreams listed; whether it stopped at _MAX_PAGES;
    the newest event's number as its first page was built."""

    states: list[pb.UpstreamState]
    stopped: bool
    last_event: int


def fetch_states(
    stub: pb_grpc.PolicyServiceStub, profile: str = "", fleet: bool = False
) -> Listing:
    """Every page of GetUpstreams, at most _MAX_PAGES. Names tracked while
    it lists come on later pages: under a flood of new names the listing
    stops at a bound rather than chase them."""
    states: list[pb.UpstreamState] = []
    request = pb.GetUpstreamsRequest(profile=profile, include_fleet=fleet)
    last_event = -1
    for _ in range(_MAX_PAGES):
        reply = stub.GetUpstreams(request, timeout=10)
        states.extend(reply.upstreams)
        if last_event < 0:
            last_event = reply.last_event
        if not reply.next_page_token:
            return Listing(states, False, last_event)
        request.page_token = reply.next_page_token
    return Listing(states, True, last_event)


def read_upstreams(stub: pb_grpc.PolicyServiceStub, args: argparse.Namespace) -> str:
    """Every page of GetUpstreams, sorted by profile and name for the table.
    With `args.fleet` the fleet's columns are added when any row has a view;
    when none has, the pod's table and NO_FLEET_VIEW under it."""
    states, stopped, _ = fetch_states(stub, args.profile, args.fleet)
    more = (
        f"\n(stopped after {_MAX_PAGES} pages; more upstreams are being tracked)" if stopped else ""
    )
    states.sort(key=lambda s: (s.profile, s.upstream))
    viewed = any(s.HasField("fleet") for s in states)
    if args.fleet and not viewed:
        more += "\n" + NO_FLEET_VIEW
    return upstream_table(states, fleet=viewed) + more
