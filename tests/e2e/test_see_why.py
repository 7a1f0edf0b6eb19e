"""Issue 36's walk-through: three executors above an upstream that
throttles, and what an operator sees of it. A real daemon, a real HTTP
upstream on loopback (a token bucket of RATE calls/s answering 429 with
Retry-After: 1 past it), and three executors, each its own client and
channel, running steps through the Python runner at 4.5 x the upstream's
rate. Then every view is held against what the upstream and the executors
counted themselves:

- `squawk upstreams`' row: THROTTLED is the upstream's 429s, SHED the
  executors' steps refused UPSTREAM_SATURATED, the pace learned;
- `squawk top` during the overload: the row shedding, with its pace;
- the event history: the cool-down the first 429 began, with that 429 as
  its cause and its Retry-After as its end, and the pace learned;
- `squawk explain` of a shed step's decision id: the refusal the executor
  got, word for word, the pace it was made at, and the cool-down before it.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import httpx
import pytest

from conftest import ROOT, SQUAWK, Daemon, free_port, start_daemon
from squawk.daemon.server.telemetry.events import CAPACITY
from squawk.daemon.server.telemetry.metrics import MAX_UPSTREAM_LABELS, OTHER_UPSTREAMS
from squawk.daemon.server.telemetry.status_page import EVENTS, MAX_ROWS
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc
from squawk_client import AsyncSquawkClient, Reason, StepError, StepFailed, StepOptions, run_step

RATE = 10.0  # the upstream's calls/s
STEPS_PER_S = 15.0  # each executor's, three of them: 4.5 x RATE
SECONDS = 4.0
POLICY = """\
profiles:
  default:
    upstreams:
      llm:
        rate_limit: {learn: true, max_queue_delay: 300ms}
"""


class _Upstream(ThreadingHTTPServer):
    """A token bucket of RATE calls/s and a burst of 2; it counts what it answers."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.tokens, self.at = 2.0, time.monotonic()
        self.ok = 0
        self.throttled: list[float] = []  # wall times of its 429s

    def take(self) -> bool:
        with self.lock:
            now = time.monotonic()
            self.tokens = min(2.0, self.tokens + (now - self.at) * RATE)
            self.at = now
            if self.tokens >= 1.0:
                self.tokens -= 1.0
                self.ok += 1
                return True
            self.throttled.append(time.time())
            return False


class _Handler(BaseHTTPRequestHandler):
    server: _Upstream

    def do_GET(self) -> None:
        if self.server.take():
            self.send_response(200)
            body = b'{"ok": true}'
        else:
            self.send_response(429)
            self.send_header("Retry-After", "1")
            body = b'{"error": "rate_limited"}'
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def upstream() -> Iterator[_Upstream]:
    server = _Upstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    policy = tmp_path_factory.mktemp("policy") / "policy.yaml"
    policy.write_text(POLICY)
    daemon = start_daemon("--policy", str(policy))
    yield daemon
    daemon.stop()


class _Tally:
    def __init__(self) -> None:
        self.ok = 0
        self.shed: list[StepFailed] = []
        self.other: list[BaseException] = []


async def _executor(target: str, url: str, tally: _Tally) -> None:
    """One executor: Poisson-free, evenly spaced steps for SECONDS."""
    options = StepOptions(max_attempts=3, deadline=timedelta(seconds=5), upstream="llm")
    async with AsyncSquawkClient(target) as client, httpx.AsyncClient() as http:

        async def call(step: int) -> None:
            r = await http.get(url, params={"step": step})
            if r.status_code != 200:
                raise StepError(
                    f"HTTP {r.status_code}", http_status=r.status_code, headers=dict(r.headers)
                )

        async def one(step: int) -> None:
            try:
                await run_step(client, call, step, options=options)
                tally.ok += 1
            except StepFailed as failed:
                if failed.decision.reason is Reason.UPSTREAM_SATURATED:
                    tally.shed.append(failed)
                else:
                    tally.other.append(failed)
            except Exception as exc:  # counted: the test fails on any
                tally.other.append(exc)

        tasks = []
        for step in range(int(SECONDS * STEPS_PER_S)):
            tasks.append(asyncio.create_task(one(step)))
            await asyncio.sleep(1.0 / STEPS_PER_S)
        await asyncio.gather(*tasks)


def _squawk(*args: str) -> str:
    done = subprocess.run(
        [*SQUAWK, *args],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("SQUAWK_")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return done.stdout


def _row(table: str, name: str) -> dict[str, str]:
    lines = table.splitlines()
    head = lines[0].split()
    rows = [line.split() for line in lines[1:] if line.split()[1:2] == [name]]
    assert len(rows) == 1, table
    return dict(zip(head, rows[0], strict=True))


def test_three_executors_above_a_throttling_upstream(pod: Daemon, upstream: _Upstream) -> None:
    url = f"http://127.0.0.1:{upstream.server_address[1]}/v1/call"
    tallies = [_Tally() for _ in range(3)]
    seen_by_top: list[str] = []

    def watch() -> None:
        time.sleep(SECONDS / 2)  # inside the overload
        seen_by_top.append(
            _squawk("top", "--target", pod.target, "--interval", "0.5", "--count", "2")
        )

    watcher = threading.Thread(target=watch)
    watcher.start()

    async def executors() -> None:
        await asyncio.gather(*(_executor(pod.target, url, t) for t in tallies))

    started = time.time()
    asyncio.run(executors())
    watcher.join(timeout=60)
    assert not any(t.other for t in tallies), [t.other for t in tallies]
    shed = [f for t in tallies for f in t.shed]
    # The overload was real: the upstream throttled, and the pod shed.
    assert upstream.throttled and shed

    # The row: every 429 the upstream sent, every step the pod refused.
    row = _row(_squawk("upstreams", "--target", pod.target), "llm")
    assert row["THROTTLED"] == str(len(upstream.throttled))
    assert row["SHED"] == str(len(shed))
    assert row["PACE"] == "learned"

    # top, while it happened: the row with its learned pace, shedding.
    (shown,) = seen_by_top
    last = shown.rsplit("\n\n# ", 1)[-1]
    table = last.split("\n", 1)[1].split("\n\nLATEST EVENTS", 1)[0]
    live = _row(table, "llm")
    assert live["PACE"] == "learned"
    assert float(live["SHED/S"]) > 0 and float(live["ADMITTED/S"]) > 0

    # The events: the first 429 began the cool-down, its Retry-After ends it.
    with grpc.insecure_channel(pod.target) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)
        events = stub.GetEvents(pb.GetEventsRequest(upstream="llm", page_size=500), timeout=5)
    kinds = [e.kind for e in events.events]
    assert pb.EVENT_KIND_PACE in kinds
    cool = next(e for e in events.events if e.kind == pb.EVENT_KIND_COOL_DOWN)
    assert cool.cause == "HTTP 429 (throttled), Retry-After 1 s"
    at = cool.time.ToNanoseconds() / 1e9
    # Reported after the upstream answered it (the runner batches outcomes).
    assert started <= upstream.throttled[0] <= at + 0.01
    assert at < cool.until.ToNanoseconds() / 1e9 <= at + 1.01
    learned = next(e for e in events.events if e.kind == pb.EVENT_KIND_PACE)
    assert learned.after.startswith("learned ")

    # Why was that step refused? Its decision, the state, the events before it.
    failed = shed[-1]
    decision_id = failed.decision.decision_id
    assert decision_id
    told = _squawk("explain", decision_id, "--target", pod.target)
    assert f"decision {decision_id}: Admit refused at " in told
    # The runner's explanation leads with the refusal, then the daemon's words.
    lead, words = failed.decision.explanation.split(" REASON_UPSTREAM_SATURATED. ", 1)
    assert lead == "The pod refused the dispatch to llm:"
    assert f"reason: UPSTREAM_SATURATED\n  {words}\n" in told
    assert "(learned from the upstream's throttling)" in words
    assert "pace learned " in told
    before = told.split("events before it:", 1)[1]
    assert " cool_down default llm " in before and "Retry-After 1 s" in before


def test_a_flood_of_names_keeps_the_ring_the_labels_and_the_page_bounded(
    tmp_path: Path,
) -> None:
    """6,000 invented names, each throttled with a Retry-After (a cool-down
    begun, an event), and 300 more admitted: the history keeps its last
    CAPACITY events, the metrics MAX_UPSTREAM_LABELS names of their own and
    "other", the status page MAX_ROWS rows."""
    port = free_port()
    daemon = start_daemon("--metrics-listen", f"127.0.0.1:{port}")
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            for start in range(0, 6000, 1000):
                stub.ReportOutcome(
                    pb.ReportOutcomeRequest(
                        outcomes=[
                            pb.Outcome(
                                upstream=f"invented-{i}",
                                http_status=429,
                                headers={"retry-after": "30"},
                            )
                            for i in range(start, start + 1000)
                        ]
                    ),
                    timeout=30,
                )
            for i in range(300):  # an Admit's series carry its name
                stub.Admit(pb.AdmitRequest(upstream=f"invented-admit-{i}"), timeout=10)
            held, after = 0, 0
            while True:
                page = stub.GetEvents(pb.GetEventsRequest(after=after, page_size=500), timeout=10)
                held += len(page.events)
                if page.next_after == after:
                    break
                after = page.next_after
            last = stub.GetUpstreams(pb.GetUpstreamsRequest(page_size=1), timeout=10).last_event
        assert last >= 6000
        assert held == CAPACITY
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            scrape = r.read().decode()
        labels = set(re.findall(r'upstream="([^"]*)"', scrape))
        assert OTHER_UPSTREAMS in labels
        assert len(labels) <= MAX_UPSTREAM_LABELS + 1
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10) as r:
            page_text = r.read().decode()
        assert page_text.count("invented-") <= MAX_ROWS + EVENTS
    finally:
        daemon.stop()
