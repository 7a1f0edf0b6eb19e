"""Driving one server with the Go load generator and charging it for the load.

The load generator prints `measure-start` and `measure-end` around its
measurement window; at each mark this process reads the server's CPU time
(/proc/PID/stat) and resets or reads its peak RSS (/proc/PID/clear_refs,
VmHWM), so warm-up and connection set-up are never charged to a row. A
caller's hook runs at the marks too (the daemon's metrics are scraped there,
and the profiler starts there).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from .procs import Proc, Processes
from .workloads import Workload

__all__ = ["Load", "Mode", "Outcome", "probe", "run_load", "wait_serving", "write_payloads"]


@dataclass(frozen=True)
class Mode:
    """A closed loop at saturation (rate None) or an open loop at `rate` calls/s."""

    rate: float | None = None

    @property
    def name(self) -> str:
        return "saturation" if self.rate is None else f"{self.rate:g}/s"


@dataclass(frozen=True)
class Load:
    loadgen: Path
    seconds: float
    warmup_s: float
    concurrency: int
    conns: int
    cpus: str | None


@dataclass
class Outcome:
    """The load generator's JSON, and what /proc said about the server."""

    result: dict[str, Any]
    cpu_s: float
    peak_rss_mb: float
    # How much `counter` (see run_load) grew for the run's answered calls.
    counted: float = 0.0
    samples: list[tuple[float, float]] = field(default_factory=list)


def probe(address: str, workload: Workload, timeout_s: float = 10.0) -> str | None:
    """Send each probed payload once (a corpus: a sample spread over it); None
    when every answer is the one the row measures."""
    with grpc.insecure_channel(address) as channel:
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(workload.method)
        for payload in workload.probed:
            try:
                reply = call(payload, timeout=timeout_s)
            except grpc.RpcError as exc:
                return f"{exc.code().name}: {exc.details()}"
            problem = workload.check(reply)
            if problem is not None:
                return problem
    return None


def write_payloads(workload: Workload, folder: Path, stem: str) -> Path:
    """The workload's payloads as one file for the load generator's
    -payloads: each request after its length (4 bytes, big-endian)."""
    path = folder / f"{stem}.bin"
    path.write_bytes(b"".join(len(p).to_bytes(4, "big") + p for p in workload.payloads))
    return path


def wait_serving(proc: Proc, address: str, workload: Workload, timeout_s: float = 30.0) -> None:
    """Wait until the server answers anything but UNAVAILABLE."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.alive():
        problem = probe(address, workload, timeout_s=1.0)
        if problem is None or not problem.startswith(("UNAVAILABLE", "DEADLINE_EXCEEDED")):
            return
        time.sleep(0.05)
    state = "exited" if not proc.alive() else f"was not serving after {timeout_s:g}s"
    raise RuntimeError(f"{proc.name} {state}; its log ends:\n{proc.tail()}")


def run_load(
    procs: Processes,
    server: Proc,
    address: str,
    workload: Workload,
    mode: Mode,
    load: Load,
    payload_file: Path,
    sample_every_s: float | None = None,
    counter: Callable[[], float] | None = None,
    on_mark: Callable[[str], None] | None = None,
    drain_s: float = 5.0,
    quiet_s: float = 2.0,
) -> Outcome:
    """Run the load generator once; raise RuntimeError when it fails to run.

    With `sample_every_s`, the server's RSS is also sampled during the
    window (the soak's leak check). With `counter` (the spans Jaeger has
    accepted), Outcome.counted is how much it grew for this run's answered
    calls: read before the run, and after it until it has not grown for
    `quiet_s` (longer than the daemon's 1 s export interval) or `drain_s`
    passed; or at once when it has grown by one per answered call (the most
    a call makes) and no call was missed or failed. Spans trail their calls
    by up to the export interval; a sampled run never reaches one per call,
    and a run that fell behind leaves the server calls to finish, whose
    spans would otherwise be counted by the next run.

    `on_mark("measure-start")` runs before /proc is read at the window's
    start and `on_mark("measure-end")` after it is read at the end, so
    what the hook makes the server do is not charged to the row.
    """
    argv = [
        *procs.pin(load.cpus),
        str(load.loadgen),
        f"-target={address}",
        f"-method={workload.method}",
        f"-payloads={payload_file}",
        f"-conns={load.conns}",
        f"-warmup={load.warmup_s}s",
        f"-duration={load.seconds}s",
    ]
    if mode.rate is None:
        argv += ["-mode=closed", f"-concurrency={load.concurrency}"]
    else:
        argv += ["-mode=open", f"-rate={mode.rate}"]
    stderr = procs.logs / "loadgen.err"
    # Bounded: the generator stops itself, the watchdog covers a hang.
    limit_s = load.warmup_s + 2 * load.seconds + 30
    cpu0 = cpu1 = peak = 0.0
    count0 = counter() if counter else 0.0
    result: dict[str, Any] | None = None
    sampler: _Sampler | None = None
    with stderr.open("wb") as err:
        gen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
    watchdog = threading.Timer(limit_s, gen.kill)
    watchdog.start()
    try:
        assert gen.stdout is not None
        for line in gen.stdout:
            line = line.strip()
            if line == "measure-start":
                if on_mark:
                    on_mark(line)
                cpu0 = server.cpu_s()
                server.reset_peak_rss()
                if sample_every_s:
                    sampler = _Sampler(server.rss_mb, sample_every_s)
            elif line == "measure-end":
                cpu1 = server.cpu_s()
                peak = server.peak_rss_mb()
                if sampler:
                    sampler.stop()
                if on_mark:
                    on_mark(line)
            elif line.startswith("{"):
                result = json.loads(line)
        code = gen.wait(timeout=10)
    finally:
        watchdog.cancel()
        if gen.poll() is None:
            gen.kill()
            gen.wait()
        if sampler:
            sampler.stop()
    if code != 0 or result is None:
        raise RuntimeError(f"loadgen exited {code}: {stderr.read_text(errors='replace')[-800:]}")
    samples = sampler.samples if sampler else []
    answered = int(result["answered"])
    # Only a clean run's count is known to be complete at one per call.
    most = answered if not (result["missed"] or result["errors"]) else None
    counted = _drain(counter, count0, most, drain_s, quiet_s) if counter else 0.0
    return Outcome(result, cpu1 - cpu0, peak, counted, samples)


def _drain(
    counter: Callable[[], float], start: float, most: int | None, limit_s: float, quiet_s: float
) -> float:
    now = time.monotonic()
    deadline, grew_at = now + limit_s, now
    grown = counter() - start
    while (most is None or grown < most) and now < deadline and now - grew_at < quiet_s:
        time.sleep(0.1)
        now, before = time.monotonic(), grown
        grown = counter() - start
        if grown > before:
            grew_at = now
    return grown


class _Sampler:
    """Reads a value every `every_s` seconds on a thread: (seconds since start, value)."""

    def __init__(self, read: Callable[[], float], every_s: float) -> None:
        self.samples: list[tuple[float, float]] = []
        self._read = read
        self._every_s = every_s
        self._stopped = threading.Event()
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.samples.append((time.monotonic() - self._start, self._read()))
            except OSError:
                return
            self._stopped.wait(self._every_s)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
