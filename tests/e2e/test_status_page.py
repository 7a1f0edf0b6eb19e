"""The status page (GET /status) in a real browser: Debian's Chromium,
headless, loads it from a daemon under load (executors reporting outcomes
and asking Admit the whole time), and the page it rendered says what
happened: the tripped upstream's row first, OPEN, with the window that
tripped it in the events, a hostile name shown as text. The screenshot is
kept at build/test-artifacts/status-page.png."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from conftest import ROOT, Daemon, free_port, start_daemon
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

CHROMIUM = Path(os.environ.get("SQUAWK_CHROMIUM_BIN", "/usr/bin/chromium"))
ARTIFACTS = ROOT / "build" / "test-artifacts"
POLICY = """\
profiles:
  default:
    upstreams:
      payments:
        circuit_breaker: {minimum_calls: 4, failure_ratio: 0.5, window: 60s, open_for: 60s}
"""
HOSTILE = '<img src=x onerror="document.title=1">'
# As the machine's own probe starts it: no sandbox (root), and nothing
# reaching out to Google's hosts, which this network refuses.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1400,1000",
)


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, int]]:
    policy = tmp_path_factory.mktemp("policy") / "policy.yaml"
    policy.write_text(POLICY)
    port = free_port()
    daemon = start_daemon("--policy", str(policy), "--metrics-listen", f"127.0.0.1:{port}")
    yield daemon, port
    daemon.stop()


def _load(target: str, stop: threading.Event, calls: list[int]) -> None:
    """An executor's traffic: Admits and successes on a healthy upstream."""
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)
        ok = pb.ReportOutcomeRequest(outcomes=[pb.Outcome(upstream="search", success=True)] * 20)
        while not stop.is_set():
            stub.Admit(pb.AdmitRequest(upstream="search"), timeout=5)
            stub.ReportOutcome(ok, timeout=5)
            calls[0] += 2


def _chromium(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: `make test` installs Debian's chromium"
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args, url],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def test_chromium_renders_the_page_of_a_daemon_under_load(pod: tuple[Daemon, int]) -> None:
    daemon, port = pod
    with grpc.insecure_channel(daemon.target) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)
        failed = [pb.Outcome(upstream="payments", http_status=503) for _ in range(4)]
        stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=failed), timeout=5)
        stub.ReportOutcome(
            pb.ReportOutcomeRequest(
                outcomes=[
                    pb.Outcome(upstream=HOSTILE, http_status=429, headers={"retry-after": "9"})
                ]
            ),
            timeout=5,
        )
    stop, calls = threading.Event(), [0]
    loaders = [threading.Thread(target=_load, args=(daemon.target, stop, calls)) for _ in range(4)]
    for t in loaders:
        t.start()
    try:
        url = f"http://127.0.0.1:{port}/status"
        dom = _chromium(url, "--dump-dom")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "status-page.png"
        shot.unlink(missing_ok=True)
        taken = _chromium(url, f"--screenshot={shot}")
    finally:
        stop.set()
        for t in loaders:
            t.join(timeout=10)
    assert calls[0] > 0, "the load never ran"
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = dom.stdout
    assert "<title>Squawk status</title>" in page
    # The tripped upstream first, OPEN; the healthy one under load after it.
    rows = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    assert rows.index("<td>payments</td><td>OPEN</td>") < rows.index(
        "<td>search</td><td>CLOSED</td>"
    )
    assert "4 of 4 calls in the window failed (100%)" in page
    assert "cooling for 9 s" in page
    # The hostile name is text in a cell: no element, no handler ran.
    assert "&lt;img src=x onerror=" in page and "<img" not in page
    assert taken.returncode == 0, taken.stderr[-2000:]
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000


def test_the_page_is_served_while_the_event_loop_is_busy(pod: tuple[Daemon, int]) -> None:
    """A page read waits for the event loop a second at most: under load it
    still answers, quickly enough for a browser that reloads every 5 s."""
    daemon, port = pod
    stop, calls = threading.Event(), [0]
    loaders = [threading.Thread(target=_load, args=(daemon.target, stop, calls)) for _ in range(8)]
    for t in loaders:
        t.start()
    try:
        for _ in range(10):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as r:
                assert r.status == 200
                assert b"<td>search</td>" in r.read()
    finally:
        stop.set()
        for t in loaders:
            t.join(timeout=10)
    assert calls[0] > 0
