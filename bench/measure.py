"""One row: a running server under one workload in one mode, and what it cost.

A server is started on its first row and kept until its last (run.py), so
the rounds find it warm. Every row checks the server's answer before and
after its load (workloads.py), reads the server's CPU and RSS from /proc
at the window's edges (drive.py), and, for the daemon, its event-loop lag
and how many answers read the Redis store from its own metrics (loop_lag.py,
store.py).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import store
from .dispatch import FELL_BACK_LIMIT, run_executors
from .drive import Load, Mode, probe, run_load, wait_serving, write_payloads
from .loop_lag import lag_fields, scrape
from .plan import Step
from .procs import Proc, Processes, free_port
from .report import Row, render_table
from .targets import ROOT, Server, command
from .workloads import Workload

__all__ = ["Live", "measure", "spans_dropped", "start", "status"]

# The share of the expected spans that must reach Jaeger; fewer, and the
# daemon dropped spans (its export queue was full), which flatters tracing.
SPANS_KEPT = 0.9
# How far below its mean a sampled span count may fall by chance, in
# standard deviations of the binomial count (chance goes further in about
# 1 row in 740).
SPANS_NOISE_SD = 3.0
# What a gRPC server answers when it sheds load: C-core cancels calls once
# too many wait unrequested (grpc.server.max_pending_requests, 1000).
SHED_CODES = {"Canceled", "ResourceExhausted", "DeadlineExceeded"}


@dataclass(frozen=True)
class Live:
    """A started server, or why it could not start."""

    server: Server
    proc: Proc
    address: str
    metrics_url: str | None
    idle_rss_mb: float | None
    broken: str | None = None


def start(procs: Processes, server: Server, cpus: str | None, first: Workload) -> Live:
    """Start `server` and wait until it answers `first`'s request."""
    address, metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    argv = command(server.argv, address, metrics)
    url = f"http://{metrics}/metrics" if server.has_metrics else None
    proc = procs.start(server.name, argv, server.env, cpus, cwd=ROOT)
    try:
        wait_serving(proc, address, first)
    except RuntimeError as exc:
        return Live(server, proc, address, url, None, str(exc))
    # Before any load: what the server costs just for being there.
    return Live(server, proc, address, url, round(proc.rss_mb(), 1))


def spans_dropped(spans: float, calls: int, sampling: float) -> bool:
    """Whether fewer spans arrived than sampling `sampling` of `calls` explains.

    Each sampled call makes one span. With sampling below 1 the count is
    binomial, so only a count clearly below its mean is a loss.
    """
    noise = SPANS_NOISE_SD * math.sqrt(calls * sampling * (1 - sampling))
    return spans < SPANS_KEPT * sampling * calls - noise


def status(result: dict[str, Any], mode: Mode, dropped: float | None) -> str:
    """ok, overloaded or failed; `dropped` is the spans per call when spans were lost."""
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
    if dropped is not None:
        return f"ok, but spans dropped ({dropped:.3f} per call)"
    return "ok"


def _row(step: Step, **fields: Any) -> Row:
    server, workload, mode = step.server, step.workload, step.mode
    return {
        "target": server.target,
        "rpc": workload.rpc,
        "tracing": server.tracing,
        "sampling": server.sampling,
        "mode": mode.name,
        "rate": mode.rate,
        "round": step.round,
        "items_per_call": workload.items,
        **fields,
    }


def _measured(
    procs: Processes,
    live: Live,
    step: Step,
    load: Load,
    payloads: Path,
    spans: Callable[[], float] | None,
) -> Row:
    workload, sampling = step.workload, step.server.sampling
    texts: dict[str, str | None] = {}
    url = live.metrics_url

    def at_mark(mark: str) -> None:
        if url is not None:
            texts[mark] = scrape(url)

    drive = run_executors if workload.executors else run_load
    out = drive(
        procs,
        live.proc,
        live.address,
        workload,
        step.mode,
        load,
        payloads,
        counter=spans,
        on_mark=at_mark,
    )
    r = out.result
    calls, answered = int(r["calls"]), int(r["answered"])
    per_call = round(out.counted / answered, 3) if spans and answered else None
    dropped = (
        per_call is not None
        and sampling is not None
        and spans_dropped(out.counted, answered, sampling)
    )
    decides = "DecideRetry" in workload.method
    state = store.state_fields(texts.get("measure-start"), texts.get("measure-end"))
    measured = status(r, step.mode, per_call if dropped else None)
    if step.server.fleet:
        measured = store.status(measured, calls, state["fleet_answers"], state["local_answers"])
    fell_back = r.get("fell_back_share")
    if measured == "ok" and fell_back is not None and fell_back > FELL_BACK_LIMIT:
        failed = ", ".join(f"{k} {v}" for k, v in sorted(r["rpcs_failed"].items()))
        measured = f"ok, but {fell_back:.1%} of Squawk calls fell back ({failed})"
    return _row(
        step,
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
        **lag_fields(texts.get("measure-start"), texts.get("measure-end")),
        **state,
        spans_per_call=per_call,
        # The dispatch row's own (dispatch.py): absent from the others.
        **_dispatch_fields(r),
        status=measured,
    )


def _dispatch_fields(result: dict[str, Any]) -> dict[str, Any]:
    if "rpcs_per_dispatch" not in result:
        return {}
    calls = result["calls"]
    per = result["rpcs_per_dispatch"]
    return {
        "rpcs_per_dispatch": None if per is None else round(per, 3),
        "rpcs_per_dispatch_by_method": {
            k: round(v / calls, 3) for k, v in sorted(result["rpcs"].items()) if calls
        },
        "rpcs_failed": result["rpcs_failed"],
        "fell_back_share": result["fell_back_share"],
        "executors": result["conns"],
        "executor_cpu_ms_per_dispatch": _rounded(result["executor_cpu_ms_per_dispatch"]),
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def measure(
    procs: Processes,
    live: Live,
    step: Step,
    load: Load,
    tmp: Path,
    spans: Callable[[], float] | None,
) -> Row:
    """One row; a failure fails the row, never the run."""
    if live.broken is not None:
        row = _row(step, status=f"failed: {live.broken}")
    else:
        row = _checked(procs, live, step, load, tmp, spans)
    row["idle_rss_mb"] = live.idle_rss_mb
    print(_progress(row), file=sys.stderr, flush=True)
    return row


def _checked(
    procs: Processes,
    live: Live,
    step: Step,
    load: Load,
    tmp: Path,
    spans: Callable[[], float] | None,
) -> Row:
    workload = step.workload
    problem = _probe(live, workload)
    if problem is not None:
        return _row(step, status=f"failed: probe {problem}")
    payloads = write_payloads(workload, tmp, f"payload-{step.rank}")
    try:
        row = _measured(procs, live, step, load, payloads, spans)
    except RuntimeError as exc:
        return _row(step, status=f"failed: {exc}")
    # The load may have moved the upstream state to other answers (an open
    # breaker): then the row timed those.
    problem = _probe(live, workload)
    if problem is not None:
        row["status"] = f"failed: after the load, {problem}"
    return row


def _probe(live: Live, workload: Workload) -> str | None:
    if not live.proc.alive():
        return f"server exited; its log ends: {live.proc.tail(5)}"
    return probe(live.address, workload)


def _progress(row: Row) -> str:
    return render_table([row]).splitlines()[-1]
