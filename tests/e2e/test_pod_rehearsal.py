"""The pod rehearsal: on loopback, what the kubelet does with
deploy/kubernetes/executor-deployment.yaml.

Squawk starts with the manifest's own arguments (paths and ports moved to
this machine); the real grpc_health_probe probes its health port until it
is ready, as the startup probe would; an executor process calls it through
the unix socket with the Python client; the ConfigMap is updated mid-run;
SIGTERM drains it: health turns NOT_SERVING while the executor's calls
are still answered, and the daemon exits within its grace, removing its
socket.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from configmap import ConfigMap
from conftest import ROOT, free_port
from squawk.v1 import policy_pb2 as pb

PROBE_BIN = Path(
    os.environ.get(
        "SQUAWK_HEALTH_PROBE_BIN",
        Path.home() / ".cache" / "squawk" / "grpc-health-probe-v0.4.62" / "grpc-health-probe",
    )
)
MANIFEST = ROOT / "deploy" / "kubernetes" / "executor-deployment.yaml"
POLICY_A = """profiles:
  default:
    max_attempts: 3
    backoff: {initial_delay: 100ms, max_delay: 10s, factor: 2, jitter: none}
"""
POLICY_B = POLICY_A.replace("max_attempts: 3", "max_attempts: 5").replace("100ms", "300ms")
# A 503 at attempt 3: A has no fourth attempt; B waits 300 ms x 2^2 (by hand).
A_ANSWER = (pb.ACTION_FAIL, 0)
B_ANSWER = (pb.ACTION_RETRY, 1200)


def manifest_args() -> dict[str, str]:
    deployment = yaml.safe_load(MANIFEST.read_text())
    (squawk,) = deployment["spec"]["template"]["spec"]["initContainers"]
    return dict(arg.removeprefix("--").split("=", 1) for arg in squawk["args"])


def probe(port: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PROBE_BIN), f"-addr=127.0.0.1:{port}", "-connect-timeout=1s", "-rpc-timeout=1s"],
        capture_output=True,
        text=True,
        timeout=10,
    )


class Lines:
    """An executor's JSON lines, read as they come."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.items: list[dict[str, Any]] = []
        assert process.stdout is not None
        self._stdout = stdout = process.stdout
        self._thread = threading.Thread(
            target=lambda: self.items.extend(json.loads(line) for line in stdout), daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._thread.join(timeout=10)
        self._stdout.close()

    def wait_for(self, answer: tuple[int, int], what: str, timeout_s: float = 10) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            recent = self.items[-3:]
            if len(recent) == 3 and all(answer_of(i) == answer for i in recent):
                return
            time.sleep(0.02)
        raise AssertionError(f"not within {timeout_s}s: {what}; last: {self.items[-3:]}")


def answer_of(item: dict[str, Any]) -> tuple[int, int]:
    return item["action"], item["delay_ms"]


def test_the_pod_as_the_kubelet_runs_it(tmp_path: Path) -> None:
    if not PROBE_BIN.exists():
        pytest.fail(f"{PROBE_BIN} is missing: run `make test` (it installs grpc_health_probe)")
    args = manifest_args()
    (tmp_path / "config").mkdir()
    config = ConfigMap(tmp_path / "config", POLICY_A)
    run = tmp_path / "run"
    run.mkdir()
    socket = run / Path(args["listen"].removeprefix("unix://")).name
    health_port, metrics_port = free_port(), free_port()
    argv = {
        **args,
        "listen": f"unix://{socket}",
        "health-listen": f"127.0.0.1:{health_port}",
        "metrics-listen": f"127.0.0.1:{metrics_port}",
        "policy": str(config.path),
        "policy-poll": "0.1",
    }
    log = (tmp_path / "squawk.log").open("w+")
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "squawk.daemon.cli",
            "serve",
            *(f"--{k}={v}" for k, v in argv.items()),
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    executor: subprocess.Popen[str] | None = None
    try:
        # The startup probe: period 1 s in the manifest, faster here.
        deadline = time.monotonic() + 20
        while (ready := probe(health_port)).returncode != 0:
            assert daemon.poll() is None, "the daemon exited"
            assert time.monotonic() < deadline, f"never ready: {ready.stdout}{ready.stderr}"
            time.sleep(0.1)
        assert "status: SERVING" in ready.stdout + ready.stderr
        executor = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "tests" / "support" / "pod" / "rehearsal_executor.py"),
                f"unix://{socket}",
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        lines = Lines(executor)
        lines.wait_for(A_ANSWER, "the executor answered by policy A")
        config.update(POLICY_B)
        lines.wait_for(B_ANSWER, "policy B after the ConfigMap update")
        # SIGTERM, as the kubelet sends once the executor has stopped (here
        # it goes on calling, to see the notice answered).
        daemon.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        deadline = stopped + 5
        while (draining := probe(health_port)).returncode == 0:
            assert time.monotonic() < deadline, "health stayed SERVING"
            time.sleep(0.05)
        assert "NOT_SERVING" in draining.stdout + draining.stderr
        during = len(lines.items)
        code = daemon.wait(timeout=float(args["grace"]) + 5)
        took = time.monotonic() - stopped
        assert code == 0
        assert took <= float(args["grace"]) + 1
        assert not socket.exists(), "the socket file outlived the daemon"
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        if executor is not None:
            assert executor.stdin is not None
            executor.stdin.close()
            executor.wait(timeout=10)
            lines.close()
        log.seek(0)
        output = log.read()
        log.close()
    # Until the daemon was gone, every answer was the daemon's, A's then B's.
    answered = lines.items[:during]
    assert answered and not any(i["fallback"] for i in answered), output
    switch = next(n for n, i in enumerate(answered) if answer_of(i) == B_ANSWER)
    assert all(answer_of(i) == A_ANSWER for i in answered[:switch])
    assert all(answer_of(i) == B_ANSWER for i in answered[switch:])
    assert "policy reload (the file changed)" in output
