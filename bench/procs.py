"""Processes the benchmark starts, and what /proc says about them.

Every process is started through `Processes`, a context manager that stops
all of them on the way out, error or not (SIGTERM, then SIGKILL after a
bounded wait). Output goes to files, never pipes, so a chatty server cannot
block on a full pipe.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

__all__ = ["Proc", "Processes", "free_port", "read_cpu_s", "read_rss_mb"]

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def read_cpu_s(pid: int) -> float:
    """User + system CPU seconds of every thread of `pid`, live or exited."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # Fields after the command name, which may itself contain spaces or ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def read_rss_mb(pid: int, field: str = "VmRSS") -> float:
    """VmRSS (now) or VmHWM (peak since start or the last reset), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


class Proc:
    def __init__(self, name: str, popen: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.popen = popen
        self.log = log

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def cpu_s(self) -> float:
        return read_cpu_s(self.pid)

    def rss_mb(self) -> float:
        return read_rss_mb(self.pid)

    def reset_peak_rss(self) -> None:
        # "5" resets VmHWM to the current RSS (proc(5), clear_refs).
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")

    def peak_rss_mb(self) -> float:
        return read_rss_mb(self.pid, "VmHWM")

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_s: float = 10.0) -> int:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                return self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
        return self.popen.wait(timeout=grace_s)


class Processes:
    """Starts processes pinned to CPUs (when asked) and stops them all on exit."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self._started: list[Proc] = []
        self.taskset = shutil.which("taskset")

    def __enter__(self) -> Processes:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for proc in reversed(self._started):
            proc.stop()
        self._started.clear()

    def pin(self, cpus: str | None) -> list[str]:
        """The command prefix that pins to `cpus` ("0", "1-3"), or none."""
        return [self.taskset, "-c", cpus] if cpus and self.taskset else []

    def start(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        cpus: str | None = None,
        cwd: Path | None = None,
    ) -> Proc:
        log = self.logs / f"{name}.log"
        out: IO[bytes] = log.open("wb")
        with out:
            popen = subprocess.Popen(
                [*self.pin(cpus), *argv],
                env=dict(env),
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        proc = Proc(name, popen, log)
        self._started.append(proc)
        return proc

    def stop(self, proc: Proc) -> int:
        code = proc.stop()
        self._started.remove(proc)
        return code

    def wait_http_healthy(self, proc: Proc, url: str, timeout_s: float = 30.0) -> None:
        """Wait until `url` answers {"healthy": true} (Jaeger's health check)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not proc.alive():
                break
            try:
                with urllib.request.urlopen(url, timeout=1) as reply:
                    if json.load(reply).get("healthy"):
                        return
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{proc.name} did not become healthy; log {proc.log}:\n{proc.tail()}")
