"""The pod's executors for tests/e2e/test_pod.py: one Python, one Go and one
Node process (tests/support/pod/), two workers each, every worker running its
client's step runner in a loop against the fake upstream.

Each prints JSON lines `{"w": worker, "ev": event, ...}`:

| ev | fields | when |
| --- | --- | --- |
| dispatch | status | the step's HTTP call got an answer |
| decision | action, reason, delay_ms | the runner's DecideRetry answer (its error hook) |
| wait | kind, ms | the runner's sleep: `retry` after a RETRY, `admission` after a refusal |
| step | ok, and when failed: action, reason, calls | a step ended |
| done / error | message | the worker's loop ended |
| exit | fallbacks | the process's client answers given without the daemon (`w` is "") |
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from conftest import ROOT

__all__ = ["WORKERS", "Executors", "Run", "Scenario", "go_executor", "node_executor"]

POD = ROOT / "tests" / "support" / "pod"
TS_CLIENT = ROOT / "clients" / "typescript"
WORKERS = {"py": ("py-1", "py-2"), "go": ("go-1", "go-2"), "node": ("node-1", "node-2")}

Event = dict[str, Any]


@dataclass(frozen=True)
class Scenario:
    upstream: str
    path: str
    max_steps: int
    max_attempts: int
    profile: str = "pod"
    # Each worker stops by itself past this, so a run is bounded even when
    # the upstream never says stop.
    time_limit_s: float = 30.0


def node_executor() -> list[str]:
    """The Node executor's command; fails (never skips) without a fresh build."""
    built = TS_CLIENT / "dist" / "src" / "index.js"
    if not built.exists():
        pytest.fail(f"{built.relative_to(ROOT)} is missing: run `make ts-build` first")
    newest = max(p.stat().st_mtime for p in (TS_CLIENT / "src").rglob("*.ts"))
    if newest > built.stat().st_mtime:
        pytest.fail(f"{built.relative_to(ROOT)} is older than its sources: run `make ts-build`")
    return ["node", str(POD / "node_executor.js")]


def go_executor(out: Path) -> list[str]:
    """Build the Go executor (a module with a `replace` to clients/go) once."""
    try:
        done = subprocess.run(
            ["go", "build", "-o", str(out), "."],
            cwd=POD / "go",
            env={**os.environ, "GOFLAGS": "-mod=mod"},
            capture_output=True,
            text=True,
            # A cold module and build cache downloads and compiles gRPC.
            timeout=600,
            check=False,
        )
    except FileNotFoundError:
        pytest.fail("the pod test needs Go (`go` is not on PATH)")
    assert done.returncode == 0, f"go build failed:\n{done.stderr}"
    return [str(out)]


@dataclass
class _Process:
    name: str
    process: subprocess.Popen[bytes]
    out: IO[bytes]
    err: IO[bytes]

    def output(self) -> tuple[str, str]:
        self.out.seek(0)
        self.err.seek(0)
        return self.out.read().decode(errors="replace"), self.err.read().decode(errors="replace")


class Run:
    """The three executor processes of one scenario. As a context manager
    it kills what still runs on the way out, and adds every process's
    output to an exception that leaves the block."""

    def __init__(self, processes: list[_Process]) -> None:
        self._processes = processes

    def finish(self, timeout_s: float = 40.0) -> list[Event]:
        """Every process's events, once all have exited cleanly."""
        deadline = time.monotonic() + timeout_s
        problems = []
        for p in self._processes:
            try:
                p.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                problems.append(f"the {p.name} executor did not finish in {timeout_s} s")
                p.process.kill()
                p.process.wait(timeout=10)
            if p.process.returncode != 0:
                problems.append(f"the {p.name} executor exited {p.process.returncode}")
        assert not problems, "; ".join(problems)
        events: list[Event] = []
        for p in self._processes:
            events += [{"exec": p.name, **json.loads(line)} for line in p.output()[0].splitlines()]
        return events

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        for p in self._processes:
            if p.process.poll() is None:
                p.process.kill()
                p.process.wait(timeout=10)
            if exc is not None:
                out, err = p.output()
                exc.add_note(f"--- {p.name} executor, stdout:\n{out}--- stderr:\n{err}")
            p.out.close()
            p.err.close()


class Executors:
    def __init__(self, go: list[str], node: list[str]) -> None:
        self._commands = {
            "py": [sys.executable, str(POD / "py_executor.py")],
            "go": go,
            "node": node,
        }

    def start(self, target: str, base: str, scenario: Scenario) -> Run:
        processes = []
        for name, command in self._commands.items():
            config = {
                "target": target,
                "base": base,
                "upstream": scenario.upstream,
                "path": scenario.path,
                "profile": scenario.profile,
                "workers": list(WORKERS[name]),
                "max_steps": scenario.max_steps,
                "max_attempts": scenario.max_attempts,
                "time_limit_s": scenario.time_limit_s,
            }
            # Files, not pipes: nobody reads them until the run is over.
            out = tempfile.TemporaryFile()  # noqa: SIM115 (closed by Run.__exit__)
            err = tempfile.TemporaryFile()  # noqa: SIM115
            process = subprocess.Popen(
                [*command, json.dumps(config)], cwd=ROOT, stdout=out, stderr=err
            )
            processes.append(_Process(name, process, out, err))
        return Run(processes)
