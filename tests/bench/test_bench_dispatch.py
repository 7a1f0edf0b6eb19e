"""The dispatch row's arithmetic: the executors' results summed into one
row, and every RPC counted where it leaves an executor, failed or not."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

# bench/ is a folder at the repository's root, not an installed package,
# and pytest puts only tests/ on the import path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.dispatch import merge, quantile
from bench.executor import CountedStub, Tally
from conftest import ROOT, free_port, scrape, start_daemon


def _result(**values: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "dispatched": 0,
        "step_errors": 0,
        "missed": 0,
        "sent": {},
        "failed": {},
        "window_s": 2.0,
        "latency_ms": [],
    }
    return base | values


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 0.5, 0.0),
        ([7.0], 0.99, 7.0),
        # The round(q * n)-th smallest of n.
        ([1.0, 2.0, 3.0, 4.0], 0.5, 2.0),
        ([float(i) for i in range(1, 101)], 0.99, 99.0),
        ([float(i) for i in range(1, 101)], 0.999, 100.0),
    ],
)
def test_quantile_is_the_nearest_rank(values: list[float], q: float, expected: float) -> None:
    assert quantile(values, q) == expected


def test_merge_sums_the_executors_and_divides_by_the_dispatches() -> None:
    a = _result(
        dispatched=600,
        sent={"Admit": 600, "ReportOutcome": 30},
        latency_ms=[1.0, 3.0],
    )
    b = _result(
        dispatched=400,
        missed=2,
        sent={"Admit": 400, "ReportOutcome": 20, "DecideRetry": 1},
        failed={"Admit DEADLINE_EXCEEDED": 10},
        window_s=2.5,
        latency_ms=[2.0, 4.0],
    )
    got = merge([a, b], executor_cpu_s=0.3)
    assert got["calls"] == got["answered"] == 1000 and got["errors"] == 0
    assert got["missed"] == 2 and got["conns"] == 2
    assert got["rpcs"] == {"Admit": 1000, "ReportOutcome": 50, "DecideRetry": 1}
    assert got["rpcs_per_dispatch"] == pytest.approx(1.051)  # 1051 RPCs / 1000 dispatches
    assert got["fell_back_share"] == pytest.approx(10 / 1051)
    # The longest executor's window: 1000 dispatches in 2.5 s.
    assert got["calls_per_s"] == pytest.approx(400.0)
    assert got["executor_cpu_ms_per_dispatch"] == pytest.approx(0.3)  # 300 ms / 1000
    assert (got["p50_ms"], got["max_ms"]) == (2.0, 4.0)
    assert got["codes"] == {}


def test_a_step_that_raised_is_an_error_of_the_row() -> None:
    got = merge([_result(dispatched=10, step_errors=1, sent={"Admit": 11})], 0.0)
    assert got["errors"] == 1 and got["codes"] == {"step failed": 1}


def test_no_dispatch_gives_no_ratio() -> None:
    got = merge([_result()], 0.0)
    assert got["rpcs_per_dispatch"] is None and got["fell_back_share"] is None
    assert got["executor_cpu_ms_per_dispatch"] is None


class _Refused(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.CANCELLED


class _Stub:
    async def Admit(self, request: str, timeout: float) -> str:
        return f"admitted {request} within {timeout}"

    async def ReportOutcome(self, request: str) -> str:
        raise _Refused()


def test_the_counted_stub_counts_every_call_and_each_failure_by_status() -> None:
    tally = Tally()
    stub = CountedStub(_Stub(), tally)

    async def calls() -> str:
        with pytest.raises(grpc.RpcError):
            await stub.ReportOutcome("x")
        return str(await stub.Admit("a", timeout=0.05))

    assert asyncio.run(calls()) == "admitted a within 0.05"
    assert tally.sent == {"Admit": 1, "ReportOutcome": 1}
    assert tally.failed == {"ReportOutcome CANCELLED": 1}


def test_an_executor_counts_every_admit_the_daemon_answered(tmp_path: Path) -> None:
    """The row's RPC count, against the real daemon: the executor's own count
    of Admits is the daemon's count of Admit decisions, and its outcomes
    reached the daemon in fewer ReportOutcome calls than dispatches."""
    port = free_port()
    daemon = start_daemon("--metrics-listen", f"127.0.0.1:{port}")
    ready, out = tmp_path / "ready", tmp_path / "out.json"
    argv = [
        sys.executable,
        "-m",
        "bench.executor",
        f"--target={daemon.target}",
        "--rate=200",
        "--upstreams=a,b",
        f"--ready={ready}",
        f"--out={out}",
    ]
    executor = subprocess.Popen(argv, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert executor.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        executor.send_signal(signal.SIGUSR1)
        time.sleep(1.0)
        executor.send_signal(signal.SIGUSR2)
        assert executor.wait(timeout=30) == 0
        samples = scrape(port)
    finally:
        if executor.poll() is None:
            executor.kill()
        daemon.stop()
    result = json.loads(out.read_text())
    sent = result["sent_total"]
    # Every Admit the daemon answered, whatever it answered.
    admits = sum(
        v
        for k, v in samples.items()
        if k.startswith("squawk_decisions_total{") and 'rpc="Admit"' in k
    )
    # An Admit that ran out of its 50 ms (a busy machine) may or may not
    # have been answered before the daemon saw it go.
    late = sum(v for k, v in result["failed_total"].items() if k.startswith("Admit "))
    assert sent["Admit"] - late <= admits <= sent["Admit"]
    assert admits > 0
    assert 0 < sent["ReportOutcome"] < result["dispatched_total"]
    assert result["dispatched"] > 0 and result["step_errors"] == 0
    assert set(result["sent"]) <= {"Admit", "ReportOutcome"}
