"""The dispatch row: what one dispatch through a runner costs the daemon
when the upstream is healthy.

EXECUTORS Python executor processes (executor.py) together offer
DISPATCH_RATE dispatches/s, each `squawk_client.run_step` with `upstream`
set around a step that does nothing, over the row's upstreams (the names its
Admit requests carry). The daemon's CPU is read from /proc at the window's
two edges, as for every row, and divided by the dispatches the executors
finished in the window; the RPCs they sent in it (counted where they leave
each executor, by method) give RPCs per dispatch. The executors' own CPU per
dispatch is reported beside it: what moving work to the client costs there.

The window is set with signals (SIGUSR1 opens it, SIGUSR2 closes it), sent
right after and before the daemon's CPU is read, so the executors count
over the same window the daemon is charged for. The result has the load
generator's fields (drive.py), so a row reads and judges it as any other.
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from squawk.v1 import policy_pb2 as pb

from .drive import Load, Mode, Outcome
from .procs import Proc, Processes, read_cpu_s
from .targets import ROOT, clean_env
from .workloads import Workload

__all__ = ["FELL_BACK_LIMIT", "merge", "quantile", "run_executors"]

# Executors are started, connect and finish a first dispatch within this.
READY_S = 60.0
# A row where more of the executors' Squawk calls than this ended in an
# error (each then fell back: fail-open admission, an unreported outcome)
# timed a daemon that did not answer in time, not a dispatch.
FELL_BACK_LIMIT = 0.01


def quantile(ordered: list[float], q: float) -> float:
    """The round(q * n)-th smallest of n sorted values (0 when there are none)."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def merge(results: list[dict[str, Any]], executor_cpu_s: float) -> dict[str, Any]:
    """The executors' results as one load generator result, plus the RPCs."""
    calls = sum(r["dispatched"] for r in results)
    errors = sum(r["step_errors"] for r in results)
    sent: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for r in results:
        sent.update(r["sent"])
        failed.update(r["failed"])
    window_s = max(r["window_s"] for r in results)
    latencies = sorted(x for r in results for x in r["latency_ms"])
    rpcs = sum(sent.values())
    return {
        "calls": calls,
        "answered": calls,
        "errors": errors,
        "missed": sum(r["missed"] for r in results),
        "codes": {"step failed": errors} if errors else {},
        "messages": {"step failed": "run_step raised"} if errors else {},
        "conns": len(results),
        "window_s": window_s,
        "calls_per_s": calls / window_s if window_s > 0 else 0.0,
        "p50_ms": quantile(latencies, 0.5),
        "p90_ms": quantile(latencies, 0.9),
        "p99_ms": quantile(latencies, 0.99),
        "p999_ms": quantile(latencies, 0.999),
        "max_ms": latencies[-1] if latencies else 0.0,
        "rpcs": dict(sent),
        "rpcs_failed": dict(failed),
        "rpcs_per_dispatch": rpcs / calls if calls else None,
        "fell_back_share": sum(failed.values()) / rpcs if rpcs else None,
        "executor_cpu_ms_per_dispatch": executor_cpu_s / calls * 1000 if calls else None,
    }


def _upstreams(workload: Workload) -> list[str]:
    return [pb.AdmitRequest.FromString(p).upstream for p in workload.payloads]


def _wait_ready(executors: list[Proc], ready: list[Path]) -> None:
    deadline = time.monotonic() + READY_S
    while not all(path.exists() for path in ready):
        dead = [e for e in executors if not e.alive()]
        if dead:
            raise RuntimeError(f"{dead[0].name} exited; its log ends:\n{dead[0].tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"executors had not dispatched after {READY_S:g} s")
        time.sleep(0.05)


def _cpu_s(executors: list[Proc]) -> float:
    """The executors' CPU seconds; RuntimeError when one has exited."""
    try:
        return sum(read_cpu_s(e.pid) for e in executors)
    except OSError:
        dead = next((e for e in executors if not e.alive()), executors[0])
        raise RuntimeError(f"{dead.name} exited; its log ends:\n{dead.tail()}") from None


def run_executors(
    procs: Processes,
    server: Proc,
    address: str,
    workload: Workload,
    mode: Mode,
    load: Load,
    payload_file: Path,
    counter: Callable[[], float] | None = None,
    on_mark: Callable[[str], None] | None = None,
    extra: Sequence[str] = (),
) -> Outcome:
    """Run the row's executors once (run_load's signature and Outcome);
    raise RuntimeError when they fail to run."""
    assert mode.rate is not None and workload.executors > 0
    # A folder of its own: a round's files must never pass for the next one's.
    folder = Path(tempfile.mkdtemp(prefix=f"{payload_file.stem}-", dir=payload_file.parent))
    names = ",".join(_upstreams(workload))
    share = mode.rate / workload.executors
    executors, ready, outs = [], [], []
    try:
        for i in range(workload.executors):
            ready.append(folder / f"{i}.ready")
            outs.append(folder / f"{i}.json")
            argv = [
                sys.executable,
                "-m",
                "bench.executor",
                f"--target={address}",
                f"--rate={share}",
                f"--upstreams={names}",
                f"--seed={i}",
                f"--ready={ready[i]}",
                f"--out={outs[i]}",
                *extra,
            ]
            executors.append(procs.start(f"executor-{i}", argv, clean_env(), load.cpus, ROOT))
        _wait_ready(executors, ready)
        time.sleep(load.warmup_s)
        if on_mark:
            on_mark("measure-start")
        cpu0, own0 = server.cpu_s(), _cpu_s(executors)
        server.reset_peak_rss()
        for e in executors:
            e.popen.send_signal(signal.SIGUSR1)
        time.sleep(load.seconds)
        # Read before SIGUSR2: an executor exits soon after it.
        own1 = _cpu_s(executors)
        for e in executors:
            e.popen.send_signal(signal.SIGUSR2)
        cpu1 = server.cpu_s()
        peak = server.peak_rss_mb()
        if on_mark:
            on_mark("measure-end")
        for e in executors:
            code = e.popen.wait(timeout=30)
            if code != 0 or not outs[executors.index(e)].exists():
                raise RuntimeError(f"{e.name} exited {code}; its log ends:\n{e.tail()}")
    finally:
        for e in executors:
            procs.stop(e)
    results = [json.loads(path.read_text()) for path in outs]
    return Outcome(merge(results, own1 - own0), cpu1 - cpu0, peak)
