"""`squawk events`: the pod's event history (GetEvents), a line an event.

Each line is the event's time (UTC), number, kind, profile and upstream,
the change, when the state it entered ends by itself, and its cause:

    2026-12-07T10:55:01.123Z #12 breaker default flaky CLOSED -> OPEN
      (until 10:55:31.123Z): 3 of 4 calls in the window failed (75%): ...

`--json` prints each as one line of JSON instead (GetEvents' Event). With
`--follow` it goes on reading every second from where it stopped, until
Ctrl-C, as `tail -f`; a failed read prints its error and the follow goes on.
Names are caller data, shown escaped, so none can forge a line.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TextIO

import grpc
from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp

from squawk.policy import redact
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

from .dial import hint, open_channel

__all__ = ["FOLLOW_EVERY_S", "event_cells", "event_line", "list_events", "when"]

FOLLOW_EVERY_S = 1.0
# Pages read at most in one go: the history holds 4,096 events, 9 pages.
_MAX_PAGES = 20


def when(t: Timestamp, date: bool = True) -> str:
    """A timestamp as the CLI shows it: UTC, to the millisecond."""
    at = datetime.fromtimestamp(t.ToNanoseconds() / 1e9, UTC)
    text = at.strftime("%Y-%m-%dT%H:%M:%S.%f" if date else "%H:%M:%S.%f")
    return text[:-3] + "Z"


def event_cells(e: pb.Event) -> tuple[str, str, str, str, str, str, str]:
    """(time, number, kind, profile, upstream, change, cause) of one event,
    each shown as `squawk events` and the status page show it."""
    kind = pb.EventKind.Name(e.kind).removeprefix("EVENT_KIND_").lower()
    # A name is caller data: escaped, it cannot forge a line or steer the terminal.
    name = redact(repr(e.upstream)[1:-1])
    change = f"{e.before} -> {e.after}" if e.before else e.after
    if e.HasField("until"):
        change += f" (until {when(e.until, date=False)})"
    return when(e.time), f"#{e.number}", kind, e.profile, name, change, e.cause


def event_line(e: pb.Event) -> str:
    """One event as `squawk events` prints it."""
    *head, cause = event_cells(e)
    return " ".join(head) + (f": {cause}" if cause else "")


def _read(
    stub: pb_grpc.PolicyServiceStub, args: argparse.Namespace, after: int, out: TextIO
) -> int:
    """Print every event past `after`; the number to go on after."""
    for _ in range(_MAX_PAGES):
        request = pb.GetEventsRequest(
            after=after, profile=args.profile, upstream=args.upstream, page_size=500
        )
        reply: pb.GetEventsResponse = stub.GetEvents(request, timeout=10)
        if reply.lost:
            out.write(f"({reply.lost} earlier events are no longer held)\n")
        for event in reply.events:
            if args.json:
                out.write(json_format.MessageToJson(event, indent=None) + "\n")
            else:
                out.write(event_line(event) + "\n")
        out.flush()
        if reply.next_after == after:
            break
        after = reply.next_after
    return after


def list_events(
    args: argparse.Namespace,
    out: TextIO,
    err: TextIO,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Print the history once, or (`args.follow`) until interrupted; the exit code."""
    with open_channel(args) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)
        try:
            after = _read(stub, args, 0, out)
            while args.follow:
                sleep(FOLLOW_EVERY_S)
                try:
                    after = _read(stub, args, after, out)
                except grpc.RpcError as exc:
                    # The daemon restarted (its numbers start over) or is away:
                    # say so, and read from the start of whatever answers next.
                    err.write(f"squawk: {exc.code().name}: {exc.details()}{hint(args, exc)}\n")
                    err.flush()
                    if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                        after = 0
        except KeyboardInterrupt:
            # Ctrl-C is how a follow ends; when it is not following, it is
            # still the reader's choice, not an error of ours.
            return 0
    return 0
