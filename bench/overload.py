"""`make bench-overload`: does the daemon answer, or shed, when its own
callers outnumber what it can serve?

One daemon (the bench policy) and, for each N of --callers, N callers per
RPC in closed loops at once: Admit, ReportOutcome (100 outcomes a report)
and DecideRetry (the distinct corpus), each call with the clients' default
50 ms deadline, as the hostile audit of issue 34 drove it; beside them a
health check every 20 ms. The callers behave as executors with the
clients do: each call passes the clients' throttle (docs/clients/README.md,
"Client-side throttling"; the Go client's), and a caller told "not
decided" goes on with its step on the fallback, so it asks again no sooner
than its call's deadline after it began. For each N, per RPC: the calls
decided in time per second (answered OK before the deadline), the calls
answered "not decided" (RESOURCE_EXHAUSTED: shed by the daemon, or not sent
by the client's throttle), the calls that got no answer before their
deadline (DEADLINE_EXCEEDED, or CANCELLED, at the caller); and the health
checks' p99. Beside them, the same callers without the throttle, on a
fresh daemon: the run's baseline. Issue 34's goals: decided in time per
second never below 80 % of its peak over N; at least 99 % of calls answered
(decided or not) before the deadline; health p99 <= 100 ms.

Beside each N, the same callers drive the Python echo floor
(bench/echo_server.py: a bare grpc.aio server with the daemon's options
that returns the request's bytes, on the same payloads): what any Python
gRPC server answers in time under that load, the ceiling of the daemon's.

It reports; a missed goal is not an error. Exit status 1 only when a run
fails to run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2

from .corpus import corpus
from .echo_server import ECHO_METHOD
from .procs import Processes, free_port
from .targets import ROOT, SQUAWK, clean_env, command
from .workloads import SERVICE, UPSTREAMS, admit_request, report_request

__all__ = ["RPCS", "main", "measure"]

DEADLINE_MS = 50  # the clients' default call deadline
OUTCOMES = 100  # per ReportOutcome, as the audit sent them
HEALTH_EVERY_S = 0.02
# The RPCs driven together, each with its payloads.
RPCS = ("Admit", "ReportOutcome", "DecideRetry")


def _payloads() -> dict[str, tuple[bytes, ...]]:
    return {
        "Admit": tuple(admit_request(u).SerializeToString() for u in UPSTREAMS),
        "ReportOutcome": tuple(
            report_request(i, OUTCOMES).SerializeToString() for i in range(len(UPSTREAMS))
        ),
        "DecideRetry": corpus(),
    }


def _health_check(channel: grpc.Channel) -> grpc.UnaryUnaryMultiCallable[Any, Any]:
    return channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )


class _Health(threading.Thread):
    """Health checks every HEALTH_EVERY_S, each with a 1 s deadline: their
    latencies (ms; a failed check counts as its full deadline)."""

    def __init__(self, address: str) -> None:
        super().__init__(daemon=True)
        self._address = address
        self._done = threading.Event()
        self.latencies: list[float] = []

    def run(self) -> None:
        with grpc.insecure_channel(self._address) as channel:
            check = _health_check(channel)
            while not self._done.is_set():
                start = time.perf_counter()
                try:
                    check(health_pb2.HealthCheckRequest(), timeout=1.0)
                    self.latencies.append((time.perf_counter() - start) * 1e3)
                except grpc.RpcError:
                    self.latencies.append(1e3)
                self._done.wait(HEALTH_EVERY_S)

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=5)


def measure(
    loadgen: Path,
    address: str,
    files: dict[str, Path],
    callers: int,
    seconds: float,
    *,
    floor: bool = False,
    throttled: bool = True,
) -> dict[str, Any]:
    """One N: the three loops at once and the health checks beside them;
    `floor`: against the echo floor (every loop on its Echo method, no
    health checks: it serves none); `throttled`: each call through the
    clients' throttle (the Go client's), as every client sends them."""
    gens: dict[str, subprocess.Popen[str]] = {}
    for rpc in RPCS:
        gens[rpc] = subprocess.Popen(
            [
                str(loadgen),
                f"-target={address}",
                f"-method={ECHO_METHOD if floor else SERVICE + rpc}",
                f"-payloads={files[rpc]}",
                "-mode=closed",
                f"-concurrency={callers}",
                "-conns=2",
                "-warmup=1s",
                f"-duration={seconds}s",
                f"-timeout={DEADLINE_MS}ms",
                "-rest",
                *(["-throttle"] if throttled else []),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    health = _Health(address)
    if not floor:
        health.start()
    rows: dict[str, Any] = {}
    try:
        for rpc, gen in gens.items():
            out, err = gen.communicate(timeout=seconds + 60)
            if gen.returncode != 0:
                raise RuntimeError(f"loadgen {rpc} exited {gen.returncode}: {err[-800:]}")
            result = json.loads(next(x for x in out.splitlines() if x.startswith("{")))
            window = result["window_s"] or seconds
            codes: dict[str, int] = result["codes"]
            decided = result["calls"]
            # Go's names of the codes: a shed is the daemon's "not decided",
            # NotSent the client's own (its throttle); any other failure
            # (DeadlineExceeded, Canceled) is no answer.
            shed = codes.get("ResourceExhausted", 0)
            not_sent = codes.get("NotSent", 0)
            late = result["errors"] - shed - not_sent
            total = decided + result["errors"]
            rows[rpc] = {
                "decided_per_s": decided / window,
                "shed_per_s": shed / window,
                "not_sent_per_s": not_sent / window,
                "answered_share": (decided + shed + not_sent) / total if total else None,
                "late_share": late / total if total else None,
                "codes": codes,
                "p99_ms": result["p99_ms"],
            }
    finally:
        for gen in gens.values():
            if gen.poll() is None:
                gen.kill()
                gen.wait()
        if not floor:
            health.stop()
    latencies = sorted(health.latencies)
    return {
        "callers": callers,
        "rpcs": rows,
        "decided_per_s": sum(r["decided_per_s"] for r in rows.values()),
        "answered_share": statistics.fmean(
            r["answered_share"] for r in rows.values() if r["answered_share"] is not None
        ),
        "health_p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        if latencies
        else None,
    }


def render(rows: list[dict[str, Any]]) -> str:
    peak = max((r["decided_per_s"] for r in rows), default=0.0)
    lines = [
        "callers/RPC  decided/s  of peak  answered  not sent/s  health p99 ms"
        + "  unthrottled decided/s  unthrottled answered"
        + "  floor answered/s  floor answered  "
        + "  ".join(f"{rpc} decided/s shed/s late" for rpc in RPCS)
    ]
    for r in rows:
        per = "  ".join(
            f"{r['rpcs'][rpc]['decided_per_s']:.0f} {r['rpcs'][rpc]['shed_per_s']:.0f}"
            f" {100 * (r['rpcs'][rpc]['late_share'] or 0):.1f}%"
            for rpc in RPCS
        )
        not_sent = sum(f["not_sent_per_s"] for f in r["rpcs"].values())
        bare = r["unthrottled"]
        lines.append(
            f"{r['callers']:11}  {r['decided_per_s']:9.0f}  {r['decided_per_s'] / peak:7.0%}"
            f"  {r['answered_share']:8.1%}  {not_sent:10.0f}  {r['health_p99_ms']:13.1f}"
            f"  {bare['decided_per_s']:21.0f}  {bare['answered_share']:20.1%}"
            f"  {r['floor']['decided_per_s']:16.0f}  {r['floor']['answered_share']:14.1%}  {per}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.overload", description=__doc__)
    ap.add_argument("--loadgen", type=Path, required=True)
    ap.add_argument("--callers", default="8,24,64,192", help="callers per RPC, comma-separated")
    ap.add_argument("--seconds", type=float, default=5.0, help="measurement window per N")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/overload.json")
    args = ap.parse_args(argv)
    payloads = _payloads()
    rows: list[dict[str, Any]] = []
    started = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="squawk-overload-") as tmp:
        files = {}
        for rpc, items in payloads.items():
            path = Path(tmp) / f"{rpc}.bin"
            path.write_bytes(b"".join(len(p).to_bytes(4, "big") + p for p in items))
            files[rpc] = path
        for n in (int(x) for x in args.callers.split(",")):
            # A fresh daemon per N: one N's backlog does not land on the next.
            with Processes(Path(tmp)) as procs:
                address = f"127.0.0.1:{free_port()}"
                argv_ = command(SQUAWK, address, f"127.0.0.1:{free_port()}")
                daemon = procs.start("squawk", argv_, clean_env(), cwd=ROOT)
                _wait_serving(address, daemon.alive)
                row = measure(args.loadgen, address, files, n, args.seconds)
            # The same callers without the throttle, the baseline of the run.
            with Processes(Path(tmp)) as procs:
                address = f"127.0.0.1:{free_port()}"
                argv_ = command(SQUAWK, address, f"127.0.0.1:{free_port()}")
                daemon = procs.start("squawk", argv_, clean_env(), cwd=ROOT)
                _wait_serving(address, daemon.alive)
                row["unthrottled"] = measure(
                    args.loadgen, address, files, n, args.seconds, throttled=False
                )
            with Processes(Path(tmp)) as procs:
                address = f"127.0.0.1:{free_port()}"
                echo = [sys.executable, "-m", "bench.echo_server", "--listen", address]
                floor = procs.start("echo-py", echo, clean_env(), cwd=ROOT)
                _wait_serving(address, floor.alive, ECHO_METHOD)
                row["floor"] = measure(
                    args.loadgen, address, files, n, args.seconds, floor=True, throttled=False
                )
            rows.append(row)
            print(render(rows).splitlines()[-1], flush=True)
    print(render(rows))
    report = {"date": started.isoformat(timespec="seconds"), "deadline_ms": DEADLINE_MS}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report | {"rows": rows}, indent=1) + "\n")
    return 0


def _wait_serving(
    address: str, alive: Callable[[], bool], method: str | None = None, timeout_s: float = 30.0
) -> None:
    """Until the server at `address` answers a health check (or, with
    `method`, a call of it with an empty body)."""
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(address) as channel:
        check: Callable[..., Any] = _health_check(channel)
        request: Any = health_pb2.HealthCheckRequest()
        if method is not None:
            check, request = channel.unary_unary(method), b""
        while time.monotonic() < deadline and alive():
            try:
                check(request, timeout=1.0)
                return
            except grpc.RpcError:
                time.sleep(0.05)
    raise RuntimeError(f"the daemon at {address} did not serve within {timeout_s:g} s")


if __name__ == "__main__":
    sys.exit(main())
