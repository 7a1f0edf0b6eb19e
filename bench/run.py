"""`make bench`: Squawk and two echo floors under the same Go load generator.

Starts, on loopback: Squawk with its built-in policy and its metrics on
(tracing off, and on at 100 % and at 10 % sampling into a local Jaeger),
Squawk with its upstream state on a local Redis server (tracing off), the
bare grpc.aio echo server (the floor for a Python gRPC daemon) and the bare
grpc-go echo server (the floor for any gRPC daemon here). Drives each RPC in
a closed loop at saturation and in an open loop at fixed rates. The rows
the goals divide, and those the Redis store's cost is read from, run in
--rounds interleaved rounds (plan.py), the others once after them. Prints
one table and writes it as JSON (one object per target, RPC, tracing, mode
and round), plus a summary with the goals, each ratio's median over the
rounds and its spread, and what the Redis store adds to a decision.

On a machine with 2+ CPUs the server is pinned to CPU 0 and the load
generator, Jaeger and Redis to the others (taskset), so the server gets one
whole core, as a single-threaded Python daemon would use, and the generator
never steals it. Without taskset the table says "not pinned": the generator then
competes with the server for CPU.

Exit status: 0 when every row ran, 1 when any row failed to run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from .core import measure as measure_core
from .core import render as render_core
from .drive import Load
from .goals import goals, render_goals
from .measure import Live, measure, start
from .plan import Step, plan
from .procs import Processes
from .report import Row, render_table, trace_label
from .rounds import MAX_SPREAD
from .store import Redis
from .store_cost import render_store_costs, store_costs
from .targets import SQUAWK, Jaeger, servers
from .workloads import STORE_RATE, squawk_workloads


def run_steps(
    procs: Processes,
    steps: Sequence[Step],
    cpus: str | None,
    load: Load,
    tmp: Path,
    jaeger: Jaeger | None,
) -> Iterator[tuple[Step, Row]]:
    """Measure each step; start a server on its first step, stop it after its last."""
    last = {step.server.name: i for i, step in enumerate(steps)}
    live: dict[str, Live] = {}
    for i, step in enumerate(steps):
        name = step.server.name
        if name not in live:
            live[name] = start(procs, step.server, cpus, step.workload)
        spans = jaeger.accepted_spans if jaeger and step.server.tracing else None
        yield step, measure(procs, live[name], step, load, tmp, spans)
        if last[name] == i:
            procs.stop(live.pop(name).proc)


def _write(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # *.tmp: ignored by git, so an interrupted write leaves nothing to commit.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)


def _machine() -> str:
    model = platform.processor() or "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{os.cpu_count()} x {model}, Python {platform.python_version()}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0, help="measurement window per row")
    p.add_argument("--warmup", type=float, help="load before each window (default: 20 %%, 0.5-2 s)")
    p.add_argument(
        "--rates",
        default="1000,5000",
        help="open-loop calls/s, comma-separated; the first is measured in every round",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved rounds of the rows the goals divide (default 3); the others run once",
    )
    p.add_argument(
        "--store-rate",
        type=float,
        default=STORE_RATE,
        help="calls/s of the +store rows, on the memory and the Redis store (default %(default)g)",
    )
    p.add_argument("--concurrency", type=int, default=32, help="closed-loop calls in flight")
    p.add_argument("--conns", type=int, default=2, help="HTTP/2 connections per row")
    p.add_argument("--batch-size", type=int, default=100, help="decisions per DecideRetryBatch")
    p.add_argument(
        "--only",
        default="",
        help="comma-separated; run only rows whose 'TARGET-tracing-off|100%%|10%% RPC' "
        "contains one",
    )
    p.add_argument("--loadgen", type=Path, required=True)
    p.add_argument("--echo-go", type=Path, required=True)
    p.add_argument("--jaeger", type=Path, help="Jaeger binary; without it, no tracing-on rows")
    p.add_argument("--out", type=Path, required=True, help="rows, as a JSON array")
    p.add_argument("--summary", type=Path, required=True, help="settings, core and goals (JSON)")
    p.add_argument("--core-min-time", type=float, default=0.2, help="seconds per core repeat")
    p.add_argument("--no-pin", action="store_true", help="do not pin with taskset")
    p.add_argument(
        "--squawk-cmd",
        help="run this instead of `squawk serve` ({listen} = the address), to measure a variant; "
        "the +upstream and +store rows need its --policy bench/policy.yaml, and the lag and "
        "local columns its --metrics-listen {metrics}",
    )
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    args.rates = [float(r) for r in args.rates.split(",") if r.strip()]
    if args.warmup is None:
        args.warmup = min(2.0, max(0.5, args.seconds / 5))
    cpus = os.cpu_count() or 1
    pin = not args.no_pin and cpus >= 2
    args.server_cpus = "0" if pin else None
    args.load_cpus = (f"1-{cpus - 1}" if cpus > 2 else "1") if pin else None
    if args.server_cpus is None:
        args.pinning = "not pinned: the load generator competes with the server for CPU"
    else:
        args.pinning = (
            f"server on CPU {args.server_cpus}, load generator, Jaeger and Redis on CPU "
            f"{args.load_cpus}"
        )
    return args


def run_rows(args: argparse.Namespace) -> tuple[list[Row], str | None]:
    """Every row, in table order: one row's rounds together; and the Redis
    server's version, when a row needed it."""
    squawk = shlex.split(args.squawk_cmd) if args.squawk_cmd else SQUAWK
    load = Load(
        args.loadgen, args.seconds, args.warmup, args.concurrency, args.conns, args.load_cpus
    )
    with tempfile.TemporaryDirectory(prefix="squawk-bench-") as tmp, Processes(Path(tmp)) as procs:
        jaeger = Jaeger(procs, args.jaeger, args.load_cpus) if args.jaeger else None
        otlp = jaeger.otlp_port if jaeger else None
        redis = Redis()
        workloads = squawk_workloads(args.batch_size)
        targets = servers(squawk, args.echo_go, workloads, otlp, redis.url, args.store_rate)
        steps = plan(targets, args.rates, args.rounds, args.only)
        # Like Jaeger, before any row: a Redis that cannot start stops the run.
        needed = any(step.server.fleet for step in steps)
        version = redis.start(procs, args.load_cpus) if needed else None
        done = list(run_steps(procs, steps, args.server_cpus, load, Path(tmp), jaeger))
    done.sort(key=lambda measured: (measured[0].rank, measured[0].round or 0))
    return [row for _, row in done], version


def summary(
    args: argparse.Namespace, date: str, rows: list[Row], core: list[Any], redis: str | None
) -> str:
    """Write the summary file; return the text printed under the table."""
    idle = next(
        (
            r["idle_rss_mb"]
            for r in rows
            if r["target"] == "squawk" and r["sampling"] is None and r.get("idle_rss_mb")
        ),
        None,
    )
    core_us = {c.case: c.us_per_decision for c in core if c.layer == "core"}
    rate = f"{args.rates[0]:g}/s" if args.rates else None
    found = goals(rows, core_us, idle, rate)
    costs = store_costs(rows, f"{args.store_rate:g}/s")
    idle_by_server = {
        f"{r['target']} tracing {trace_label(r['sampling'])}": r["idle_rss_mb"]
        for r in rows
        if r.get("idle_rss_mb") is not None
    }
    _write(
        args.summary,
        {
            "date": date,
            "machine": _machine(),
            "pinning": args.pinning,
            "seconds": args.seconds,
            "warmup_s": args.warmup,
            "concurrency": args.concurrency,
            "conns": args.conns,
            "rates": args.rates,
            "store_rate": args.store_rate,
            "rounds": args.rounds,
            "max_spread": MAX_SPREAD,
            "batch_size": args.batch_size,
            "idle_rss_mb": idle_by_server,
            "core": [asdict(c) for c in core],
            "goals": [g.as_json() for g in found],
            "redis_server": redis,
            "store": [c.as_json() for c in costs],
        },
    )
    rounds = f"{args.rounds} {'round' if args.rounds == 1 else 'rounds'}"
    notes = [
        "idle RSS MB: " + ", ".join(f"{k} {v}" for k, v in idle_by_server.items()),
        "core micro-benchmark (in-process, best of 5):\n" + render_core(core),
        f"goals (each ratio per round, from the rows of that round; judged on the "
        f"median over {rounds}):\n" + render_goals(found),
    ]
    if costs:
        notes.append(
            f"Redis store vs memory store ({redis}; per round, the squawk-redis row minus, "
            f"and divided by, the squawk row; median over {rounds}, and their range):\n"
            + render_store_costs(costs)
        )
    return "\n\n".join(notes)


def _on_sigterm(signum: int, frame: object) -> NoReturn:
    # SystemExit unwinds the `with Processes(...)`, which stops every child.
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    date = datetime.now(UTC).isoformat(timespec="seconds")
    print(f"squawk bench {date}: {_machine()}; {args.pinning}", file=sys.stderr, flush=True)
    core = measure_core(args.core_min_time)
    rows, redis = run_rows(args)
    for r in rows:
        r["date"] = date
    _write(args.out, rows)
    notes = summary(args, date, rows, core, redis)
    print(
        f"\nsquawk bench {date} on {_machine()}\n{args.pinning}; {args.seconds:g} s per row "
        f"after {args.warmup:g} s warm-up; saturation = closed loop, {args.concurrency} calls "
        f"in flight on {args.conns} connections; N/s = open loop at N calls/s"
    )
    print(render_table(rows))
    print(f"\n{notes}\n\nrows: {args.out}\nsummary: {args.summary}")
    failed = [r for r in rows if r["status"].startswith("failed")]
    if failed or not rows:
        print(f"\n{len(failed)} of {len(rows)} row(s) failed to run", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
