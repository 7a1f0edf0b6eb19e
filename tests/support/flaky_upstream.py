"""A fake upstream on loopback for tests/e2e/test_pod.py: a real HTTP server
whose answers follow a schedule the test sets, one route per scenario, and
which records every hit.

Each route (`/breaker`, `/budget`, ...) answers GET <route> from its
schedule and GET <route>/gate by holding the caller until the test opens
the gate for it: executors wait there, ready, until the scenario starts.
Every wait is bounded, so a test that goes wrong ends in a failed
assertion, never a hang. Executors name themselves in `X-Pod-Worker`.

Times are `time.monotonic()`, the clock the daemon's breaker and cool-down
run on (CLOCK_MONOTONIC, one per machine), so a hit's time and a time the
daemon reports can be compared without any skew between the processes.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FakeUpstream", "Hit", "Route", "serve"]

# No wait here outlasts this: a stuck test fails instead of hanging.
_MAX_WAIT_S = 30.0


@dataclass(frozen=True)
class Hit:
    worker: str
    route: str
    status: int
    # When the request arrived, and when its answer was sent.
    arrived: float
    answered: float


@dataclass
class Route:
    """One scenario's schedule. Change fields only under FakeUpstream.lock."""

    # What to answer, after the one-shot answers in `once` are used up.
    status: int = 503
    headers: dict[str, str] = field(default_factory=dict)
    once: deque[tuple[int, dict[str, str]]] = field(default_factory=deque)
    # A 2xx answer then says `X-Pod-Stop: 1`: the executor ends its loop.
    stop: bool = False
    # Hold each worker's first hit until this many workers have sent one,
    # so that the first failures come from every executor at once.
    barrier: int = 0
    # Hold every hit arriving at or after this time until `let_go`.
    hold_from: float | None = None
    let_go: bool = False
    held: int = 0
    # The gate: who arrived, and who may pass (None: nobody yet).
    at_gate: set[str] = field(default_factory=set)
    gate_open_for: set[str] | None = None
    gate_open_to_all: bool = False
    first_hit_from: set[str] = field(default_factory=set)


class FakeUpstream:
    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.routes: dict[str, Route] = {}
        self.hits: list[Hit] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.upstream = self  # type: ignore[attr-defined]
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def route(self, path: str) -> Route:
        with self.lock:
            return self.routes.setdefault(path, Route())

    def change(self, path: str, update: Callable[[Route], None]) -> None:
        """Change a route's schedule, waking whoever waits on it."""
        with self.lock:
            update(self.routes[path])
            self.lock.notify_all()

    def wait_for(
        self, what: str, ready: Callable[[], bool], timeout_s: float = _MAX_WAIT_S
    ) -> None:
        """Wait until `ready()` (called under the lock) is true, else fail."""
        with self.lock:
            if not self.lock.wait_for(ready, timeout=timeout_s):
                raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")

    def hits_on(self, path: str) -> list[Hit]:
        with self.lock:
            return sorted((h for h in self.hits if h.route == path), key=lambda h: h.arrived)

    # The handler's side, on the server's threads.

    def _pass_gate(self, route: Route, worker: str) -> bool:
        with self.lock:
            route.at_gate.add(worker)
            self.lock.notify_all()
            return self.lock.wait_for(
                lambda: route.gate_open_to_all or worker in (route.gate_open_for or ()),
                timeout=_MAX_WAIT_S,
            )

    def _answer(self, path: str, route: Route, worker: str) -> tuple[int, dict[str, str]]:
        arrived = time.monotonic()
        with self.lock:
            if worker not in route.first_hit_from:
                route.first_hit_from.add(worker)
                self.lock.notify_all()
                self.lock.wait_for(lambda: len(route.first_hit_from) >= route.barrier, _MAX_WAIT_S)
            if route.hold_from is not None and arrived >= route.hold_from:
                route.held += 1
                self.lock.notify_all()
                self.lock.wait_for(lambda: route.let_go, _MAX_WAIT_S)
            status, headers = route.once.popleft() if route.once else (route.status, route.headers)
            headers = dict(headers)
            if route.stop and status < 300:
                headers["X-Pod-Stop"] = "1"
            self.hits.append(Hit(worker, path, status, arrived, time.monotonic()))
            self.lock.notify_all()
        return status, headers

    def _close(self) -> None:
        with self.lock:
            for route in self.routes.values():
                route.gate_open_to_all = route.let_go = True
                route.barrier = 0
            self.lock.notify_all()
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        upstream: FakeUpstream = self.server.upstream  # type: ignore[attr-defined]
        worker = self.headers.get("X-Pod-Worker", "")
        path = self.path.removesuffix("/gate")
        with upstream.lock:
            route = upstream.routes.get(path)
        if route is None:
            self._send(404, {})
        elif path != self.path:
            self._send(200 if upstream._pass_gate(route, worker) else 504, {})
        else:
            self._send(*upstream._answer(path, route, worker))

    def _send(self, status: int, headers: dict[str, str]) -> None:
        body = json.dumps({"status": status}).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # the hit log is the record


@contextmanager
def serve() -> Iterator[FakeUpstream]:
    upstream = FakeUpstream()
    upstream._thread.start()
    try:
        yield upstream
    finally:
        upstream._close()
