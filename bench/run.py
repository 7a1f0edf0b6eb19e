"""`make bench`: Squawk and two echo floors under the same Go load generator.

Starts, on loopback: Squawk with its built-in policy (tracing off, and on at
100 % sampling into a local Jaeger), the bare grpc.aio echo server (the floor
for a Python gRPC daemon) and the bare grpc-go echo server (the floor for any
gRPC daemon here). Drives each RPC in a closed loop at saturation and in an
open loop at fixed rates, prints one table and writes it as JSON (one object
per target, RPC, tracing and mode), plus a summary with the goals.

On a machine with 2+ CPUs the server is pinned to CPU 0 and the load
generator and Jaeger to the others (taskset), so the server gets one whole
core, as a single-threaded Python daemon would use, and the generator never
steals it. Without taskset the table says "not pinned": the generator then
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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from .core import measure as measure_core
from .core import render as render_core
from .drive import Load, Mode, probe, run_load, wait_serving, write_payloads
from .procs import Proc, Processes, free_port
from .report import goals, render_goals, render_table
from .targets import ROOT, SQUAWK, Jaeger, Server, servers
from .workloads import Workload, squawk_workloads

Row = dict[str, Any]
# Below this many spans per traced call, the daemon dropped spans (its
# export queue was full), and the tracing-on row flatters tracing.
SPANS_PER_CALL_OK = 0.9
# What a gRPC server answers when it sheds load: C-core cancels calls once
# too many wait unrequested (grpc.server.max_pending_requests, 1000).
SHED_CODES = {"Canceled", "ResourceExhausted", "DeadlineExceeded"}


def modes(workload: Workload, rates: Sequence[float]) -> list[Mode]:
    return [Mode(), *(Mode(rate) for rate in rates if workload.open_loop)]


def _row(server: Server, workload: Workload, mode: Mode, **fields: Any) -> Row:
    return {
        "target": server.target,
        "rpc": workload.rpc,
        "tracing": server.tracing,
        "mode": mode.name,
        "rate": mode.rate,
        "items_per_call": workload.items,
        **fields,
    }


def _status(result: dict[str, Any], mode: Mode, spans_per_call: float | None) -> str:
    calls, errors, codes = int(result["calls"]), int(result["errors"]), result["codes"]
    behind = mode.rate is not None and (
        result["missed"] or result["calls_per_s"] < 0.95 * mode.rate or errors
    )
    if behind and calls and set(codes) <= SHED_CODES:
        # Offered more than it can answer, the server sheds load: a
        # measurement (where saturation is), not a failure of the harness.
        shed = f", {errors} shed ({', '.join(sorted(codes))})" if errors else ""
        return f"overloaded: answered {result['calls_per_s'] / mode.rate:.0%} of offered{shed}"
    if errors or not calls:
        why = "; ".join(f"{c}: {m}" for c, m in result.get("messages", {}).items())
        return f"failed: {errors} errors {codes} ({why}), {calls} calls"
    if spans_per_call is not None and spans_per_call < SPANS_PER_CALL_OK:
        return f"ok, but spans dropped ({spans_per_call:.2f} per call)"
    return "ok"


def measure_row(
    procs: Processes,
    proc: Proc,
    address: str,
    server: Server,
    workload: Workload,
    mode: Mode,
    load: Load,
    payloads: list[Path],
    spans: Callable[[], float] | None,
) -> Row:
    out = run_load(procs, proc, address, workload, mode, load, payloads, counter=spans)
    r = out.result
    calls = int(r["calls"])
    answered = int(r["answered"])
    spans_per_call = round(out.counted / answered, 3) if spans and answered else None
    decides = "DecideRetry" in workload.method
    return _row(
        server,
        workload,
        mode,
        concurrency=r.get("concurrency"),
        conns=r["conns"],
        window_s=round(r["window_s"], 3),
        calls=calls,
        errors=r["errors"],
        missed=r["missed"],
        calls_per_s=round(r["calls_per_s"], 1),
        decisions_per_s=round(r["calls_per_s"] * workload.items, 1) if decides else None,
        p50_ms=round(r["p50_ms"], 4),
        p90_ms=round(r["p90_ms"], 4),
        p99_ms=round(r["p99_ms"], 4),
        p999_ms=round(r["p999_ms"], 4),
        max_ms=round(r["max_ms"], 4),
        cpu_s_per_1k=round(out.cpu_s / calls * 1000, 4) if calls else None,
        rss_mb=round(out.peak_rss_mb, 1),
        spans_per_call=spans_per_call,
        status=_status(r, mode, spans_per_call),
    )


def _selected(only: str, name: str) -> bool:
    return not only or any(part.strip() in name for part in only.split(",") if part.strip())


def bench_server(
    procs: Processes,
    server: Server,
    args: argparse.Namespace,
    load: Load,
    tmp: Path,
    jaeger: Jaeger | None,
) -> Iterator[Row]:
    """Yield one row per workload and mode; a failure fails rows, never the run."""
    wanted = [w for w in server.workloads if _selected(args.only, f"{server.name} {w.rpc}")]
    if not wanted:
        return
    address = f"127.0.0.1:{free_port()}"
    argv = [a.replace("{listen}", address) for a in server.argv]
    spans = jaeger.accepted_spans if jaeger and server.tracing else None
    proc = procs.start(server.name, argv, server.env, args.server_cpus, cwd=ROOT)
    try:
        wait_serving(proc, address, wanted[0])
        # Before any load: what the daemon costs just for being there.
        idle = round(proc.rss_mb(), 1)
        for i, workload in enumerate(wanted):
            payloads = write_payloads(workload, tmp, f"payload-{server.target}-{i}")
            problem = probe(address, workload)
            for mode in modes(workload, args.rates):
                if problem is None and proc.alive():
                    try:
                        row = measure_row(
                            procs, proc, address, server, workload, mode, load, payloads, spans
                        )
                    except RuntimeError as exc:
                        row = _row(server, workload, mode, status=f"failed: {exc}")
                    # The load may have moved the upstream state to other
                    # answers (an open breaker): then the row timed those.
                    problem = probe(address, workload)
                    if problem is not None and not row["status"].startswith("failed"):
                        row["status"] = f"failed: after the load, {problem}"
                else:
                    why = problem or f"server exited; its log ends: {proc.tail(5)}"
                    row = _row(server, workload, mode, status=f"failed: probe {why}")
                row["idle_rss_mb"] = idle
                print(render_table([row]).splitlines()[-1], file=sys.stderr, flush=True)
                yield row
    except RuntimeError as exc:
        for workload in wanted:
            for mode in modes(workload, args.rates):
                yield _row(server, workload, mode, status=f"failed: {exc}")
    finally:
        procs.stop(proc)


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
    p.add_argument("--rates", default="1000,5000", help="open-loop calls/s, comma-separated")
    p.add_argument("--concurrency", type=int, default=32, help="closed-loop calls in flight")
    p.add_argument("--conns", type=int, default=2, help="HTTP/2 connections per row")
    p.add_argument("--batch-size", type=int, default=100, help="decisions per DecideRetryBatch")
    p.add_argument(
        "--only",
        default="",
        help="comma-separated; run only rows whose 'TARGET-tracing-on|off RPC' contains one",
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
        "the +upstream rows need its --policy bench/policy.yaml",
    )
    args = p.parse_args(argv)
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
            f"server on CPU {args.server_cpus}, load generator and Jaeger on CPU {args.load_cpus}"
        )
    return args


def run_rows(args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    squawk = shlex.split(args.squawk_cmd) if args.squawk_cmd else SQUAWK
    load = Load(
        args.loadgen, args.seconds, args.warmup, args.concurrency, args.conns, args.load_cpus
    )
    with tempfile.TemporaryDirectory(prefix="squawk-bench-") as tmp, Processes(Path(tmp)) as procs:
        jaeger = Jaeger(procs, args.jaeger, args.load_cpus) if args.jaeger else None
        otlp = jaeger.otlp_port if jaeger else None
        targets = servers(squawk, args.echo_go, squawk_workloads(args.batch_size), otlp)
        for server in targets:
            rows.extend(bench_server(procs, server, args, load, Path(tmp), jaeger))
    return rows


def summary(args: argparse.Namespace, date: str, rows: list[Row], core: list[Any]) -> str:
    """Write the summary file; return the text printed under the table."""
    idle = next(
        (r["idle_rss_mb"] for r in rows if r["target"] == "squawk" and "idle_rss_mb" in r), None
    )
    core_us = {c.case: c.us_per_decision for c in core if c.layer == "core"}
    rate = f"{args.rates[0]:g}/s" if args.rates else None
    found = goals(rows, core_us, idle, rate)
    idle_by_server = {
        f"{r['target']} tracing {'on' if r['tracing'] else 'off'}": r["idle_rss_mb"]
        for r in rows
        if "idle_rss_mb" in r
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
            "batch_size": args.batch_size,
            "idle_rss_mb": idle_by_server,
            "core": [asdict(c) for c in core],
            "goals": [asdict(g) | {"met": g.met} for g in found],
        },
    )
    return "\n\n".join(
        [
            "idle RSS MB: " + ", ".join(f"{k} {v}" for k, v in idle_by_server.items()),
            "core micro-benchmark (in-process, best of 5):\n" + render_core(core),
            "goals (ratios from this run):\n" + render_goals(found),
        ]
    )


def _on_sigterm(signum: int, frame: object) -> NoReturn:
    # SystemExit unwinds the `with Processes(...)`, which stops every child.
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    date = datetime.now(UTC).isoformat(timespec="seconds")
    print(f"squawk bench {date}: {_machine()}; {args.pinning}", file=sys.stderr, flush=True)
    core = measure_core(args.core_min_time)
    rows = run_rows(args)
    for r in rows:
        r["date"] = date
    _write(args.out, rows)
    notes = summary(args, date, rows, core)
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
