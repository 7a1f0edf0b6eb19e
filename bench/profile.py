"""`make bench-profile`: flame graphs of the daemon under the benchmark's load.

For each case below, the daemon runs as in `make bench` (same command,
policy, pinning, tracing into a local Jaeger) and the same Go load
generator drives it; py-spy samples the daemon's stacks for the load
generator's measurement window and writes an SVG flame graph. py-spy
reads the daemon's memory from outside with --nonblocking, so the daemon
is never paused, and runs on the load generator's CPU, so it does not
take the daemon's core. It needs ptrace permission over the daemon.

Usage: python -m bench.profile --loadgen L --jaeger J --py-spy P --out DIR
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from .dispatch import run_executors
from .drive import Load, Mode, probe, run_load, write_payloads
from .measure import Live, start, status
from .procs import Proc, Processes
from .targets import SQUAWK, Jaeger, Server, squawk_servers
from .workloads import DISPATCH, Workload, squawk_workloads

# Samples per second: enough for a 10 s window to resolve a 1 % frame well.
SAMPLE_HZ = 250


@dataclass(frozen=True)
class Case:
    stem: str  # the SVG's name, before the mode and tracing are added
    rpc: str  # a workload name prefix
    at_rate: bool  # at --rate (open loop), else at saturation
    sampling: float | None


CASES = (
    Case("decide", "DecideRetry transient", False, None),
    Case("decide", "DecideRetry transient", False, 1.0),
    Case("decide", "DecideRetry transient", True, 1.0),
    Case("analyze", "AnalyzeError offline", True, 1.0),
    Case("batch", "DecideRetryBatch", False, None),
    # Python executors through the runner, at the row's own rate (dispatch.py).
    Case("dispatch", DISPATCH, True, None),
)


def svg_name(case: Case, mode: Mode) -> str:
    """decide-saturation-off.svg, analyze-1000ps-on100.svg, ..."""
    rate = "saturation" if mode.rate is None else f"{mode.rate:g}ps"
    tracing = "off" if case.sampling is None else f"on{case.sampling * 100:g}"
    return f"{case.stem}-{rate}-{tracing}.svg"


def _can_attach(py_spy: Path, pid: int) -> None:
    """Raise SystemExit with the reason when py-spy cannot read `pid`."""
    done = subprocess.run(
        [str(py_spy), "dump", "--pid", str(pid), "--nonblocking"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        # Its first lines say why; a Rust backtrace follows them.
        lines = [ln.strip() for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
        said = " ".join(lines[:3])
        raise SystemExit(
            f"py-spy cannot attach to the daemon (pid {pid}); it needs ptrace permission: "
            "run as the daemon's user with kernel.yama.ptrace_scope 0, or as root, or in a "
            "container started with --cap-add SYS_PTRACE.\n"
            f"py-spy said: {said}"
        )


def _record(
    procs: Processes,
    live: Live,
    workload: Workload,
    mode: Mode,
    load: Load,
    py_spy: Path,
    svg: Path,
    tmp: Path,
) -> str:
    """Load the daemon and record it for the window; return the load's summary."""
    problem = probe(live.address, workload)
    if problem is not None:
        raise SystemExit(f"{live.server.name} {workload.rpc}: probe {problem}")
    recorder: list[Proc] = []
    argv = [
        str(py_spy),
        "record",
        "--pid",
        str(live.proc.pid),
        "--rate",
        str(SAMPLE_HZ),
        "--threads",
        "--nonblocking",
        # Whole seconds only; rounded up, the recording covers the window.
        "--duration",
        str(max(1, math.ceil(load.seconds))),
        "--format",
        "flamegraph",
        "-o",
        str(svg),
    ]

    def at_mark(mark: str) -> None:
        if mark == "measure-start":
            recorder.append(procs.start(f"py-spy-{svg.stem}", argv, os.environ, load.cpus))

    payloads = write_payloads(workload, tmp, f"payload-{svg.stem}")
    # So that a graph left from an earlier run cannot pass for this one.
    svg.unlink(missing_ok=True)
    drive = run_executors if workload.executors else run_load
    out = drive(procs, live.proc, live.address, workload, mode, load, payloads, on_mark=at_mark)
    if not recorder:
        raise SystemExit(f"{svg.name}: the load generator never started its window")
    code = recorder[0].popen.wait(timeout=load.seconds + 60)
    if code != 0 or not svg.exists():
        raise SystemExit(f"{svg.name}: py-spy exited {code}; its log ends:\n{recorder[0].tail()}")
    r = out.result
    # The status says whether an open-loop case kept up with its rate.
    return f"{status(r, mode, None)}; {r['calls_per_s']:.0f} calls/s, p99 {r['p99_ms']:.3f} ms"


def profile(args: argparse.Namespace) -> list[str]:
    """Record every case; return one line per SVG written."""
    pin = not args.no_pin and (os.cpu_count() or 1) >= 2
    server_cpus, load_cpus = ("0", "1") if pin else (None, None)
    load = Load(args.loadgen, args.seconds, args.warmup, 32, 2, load_cpus)
    workloads = squawk_workloads(100)
    args.out.mkdir(parents=True, exist_ok=True)
    lines = []
    with (
        tempfile.TemporaryDirectory(prefix="squawk-profile-") as tmp,
        Processes(Path(tmp)) as procs,
    ):
        jaeger = Jaeger(procs, args.jaeger, load_cpus)
        for server in squawk_servers(SQUAWK, workloads, jaeger.otlp_port):
            cases = [c for c in CASES if c.sampling == server.sampling]
            if not cases:
                continue
            live = _started(procs, server, server_cpus)
            _can_attach(args.py_spy, live.proc.pid)
            for case in cases:
                workload = next(w for w in server.workloads if w.rpc.startswith(case.rpc))
                mode = Mode((workload.rate or args.rate) if case.at_rate else None)
                svg = args.out / svg_name(case, mode)
                done = _record(procs, live, workload, mode, load, args.py_spy, svg, Path(tmp))
                line = f"{svg}: {server.name} {workload.rpc} {mode.name}: {done}"
                print(line, file=sys.stderr, flush=True)
                lines.append(line)
            procs.stop(live.proc)
    return lines


def _started(procs: Processes, server: Server, cpus: str | None) -> Live:
    live = start(procs, server, cpus, server.workloads[0])
    if live.broken is not None:
        raise SystemExit(f"{server.name}: {live.broken}")
    return live


def _on_sigterm(signum: int, frame: object) -> NoReturn:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0, help="recorded window per case")
    p.add_argument("--warmup", type=float, default=2.0, help="load before each window")
    p.add_argument("--rate", type=float, default=1000.0, help="calls/s of the open-loop cases")
    p.add_argument("--loadgen", type=Path, required=True)
    p.add_argument("--jaeger", type=Path, required=True)
    p.add_argument("--py-spy", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True, help="folder for the SVGs")
    p.add_argument("--no-pin", action="store_true", help="do not pin with taskset")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    if not args.py_spy.exists():
        p.error(f"no py-spy at {args.py_spy}: `make setup` installs it with the dev extras")
    try:
        lines = profile(args)
    except RuntimeError as exc:  # a server or the load generator failed to run
        print(f"bench-profile: {exc}", file=sys.stderr)
        return 1
    print("\n".join(["flame graphs:", *lines]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
