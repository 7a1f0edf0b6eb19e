"""`squawk upstreams --watch`: the table again every N seconds, until Ctrl-C.

On a terminal each refresh redraws the screen (as watch(1) does); into a
pipe or a file the output is append-only and plain, with no escape codes:
each refresh is a line with its time, the table and an empty line, flushed
at once, so `| tee` or a log collector sees every refresh as it comes.
`--count` stops after that many refreshes (for a script, or a test).

One channel serves every refresh; gRPC reconnects it when the daemon
restarts. A refresh that fails prints its error (stderr) in place of the
table and the watch goes on: a daemon restarting is what an operator may
be watching for. The exit code is the last refresh's.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TextIO

import grpc

from squawk.policy.text import quoted
from squawk.v1 import policy_pb2_grpc as pb_grpc

from .dial import hint, open_channel
from .upstream_table import read_upstreams

__all__ = ["MAX_COUNT", "MAX_INTERVAL", "MIN_INTERVAL", "count", "interval", "watch"]

# --watch's bounds, in seconds: faster than a tenth is a load on the daemon
# for nothing a person can read; slower than an hour is not watching.
MIN_INTERVAL = 0.1
MAX_INTERVAL = 3600.0
MAX_COUNT = 1_000_000
# A terminal's "cursor home, clear screen" (ECMA-48 CUP and ED).
_CLEAR = "\x1b[H\x1b[2J"


def interval(text: str) -> float:
    """--watch's value: seconds from MIN_INTERVAL to MAX_INTERVAL."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not MIN_INTERVAL <= value <= MAX_INTERVAL:  # NaN included
        raise argparse.ArgumentTypeError(
            f"must be seconds from {MIN_INTERVAL:g} to {MAX_INTERVAL:g}, got {quoted(text)}"
        )
    return value


def count(text: str) -> int:
    """--count's value: a whole number of refreshes, 1 to MAX_COUNT."""
    if not (len(text) <= 7 and text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_COUNT):
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 1 to {MAX_COUNT:,}, got {quoted(text)}"
        )
    return int(text)


def watch(
    args: argparse.Namespace,
    out: TextIO,
    err: TextIO,
    *,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> int:
    """Print the table every `args.watch` seconds, `args.count` times (None:
    until Ctrl-C); the exit code of the last refresh (0, or 1 or 2 as a
    single listing's error). Ctrl-C ends it with the code so far."""
    terminal = out.isatty()
    code, done = 0, 0
    try:
        with open_channel(args) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            while True:
                stamp = now().strftime("%Y-%m-%d %H:%M:%S UTC")
                heading = f"every {args.watch:g}s, {stamp}"
                try:
                    table, code = read_upstreams(stub, args), 0
                except grpc.RpcError as exc:
                    table = f"(no listing: {exc.code().name})"
                    code = 2 if exc.code() == grpc.StatusCode.INVALID_ARGUMENT else 1
                    print(f"squawk: {exc.code().name}: {exc.details()}{hint(args, exc)}", file=err)
                if terminal:
                    out.write(f"{_CLEAR}{heading} (Ctrl-C to stop)\n\n{table}\n")
                else:
                    out.write(f"# {heading}\n{table}\n\n")
                out.flush()
                done += 1
                if args.count is not None and done >= args.count:
                    return code
                sleep(args.watch)
    except KeyboardInterrupt:
        return code
