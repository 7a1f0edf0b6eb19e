"""The criticality header (tests/vectors/criticality_header.json; the Go and
TypeScript clients run the same file): read by criticality_from_headers,
and sent by the httpx transport to a loopback server that records what
reached it, inside a step whose level is in force (the daemon unreachable,
so admission fails open)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import free_port
from squawk_client import (
    Criticality,
    SquawkClient,
    StepOptions,
    criticality_from_headers,
    run_step_sync,
)
from squawk_client.httpx import SquawkTransport

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "vectors" / "criticality_header.json").read_text()
)


def _level(name: str | None) -> Criticality | None:
    return None if name is None else Criticality[name]


@pytest.mark.parametrize("case", VECTORS["read"], ids=[c["name"] for c in VECTORS["read"]])
def test_reading_the_header(case: dict[str, Any]) -> None:
    pairs = [(name, value) for name, values in case["headers"].items() for value in values]
    assert criticality_from_headers(pairs) == _level(case["level"])
    # httpx's Headers, a mapping that joins repeated values with commas.
    assert criticality_from_headers(httpx.Headers(pairs)) == _level(case["level"])


@contextlib.contextmanager
def _recording() -> Iterator[tuple[str, list[str | None]]]:
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("squawk-criticality"))
            self.send_response(200)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("case", VECTORS["write"], ids=[c["name"] for c in VECTORS["write"]])
def test_the_transport_sends_the_level_in_force(case: dict[str, Any]) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    with (
        _recording() as (url, seen),
        SquawkClient(nowhere, call_timeout=timedelta(milliseconds=200)) as squawk,
        httpx.Client(transport=SquawkTransport(squawk, "next-hop")) as http,
    ):

        def call(_: None) -> int:
            return http.get(url, headers=case["headers"]).status_code

        level = _level(case["level"])
        if level is None:
            assert call(None) == 200
        else:
            # The request is made inside a step of that level: the
            # transport's own step inherits it, and sends it on.
            options = StepOptions(criticality=level)
            assert run_step_sync(squawk, call, None, options=options) == 200
    assert seen == [case["sent"]]
