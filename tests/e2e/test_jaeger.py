"""Decisions in a real Jaeger: the executor's step span, with Squawk's
decision spans under it, exported over OTLP and read back from Jaeger's
query API. Jaeger is built from the Go module proxy by `make jaeger`."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, free_port, start_daemon

JAEGER_BIN = Path(
    os.environ.get(
        "SQUAWK_JAEGER_BIN", Path.home() / ".cache" / "squawk" / "jaeger-v1.76.0" / "jaeger"
    )
)


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    if not JAEGER_BIN.exists():
        pytest.fail(
            f"Jaeger is not built at {JAEGER_BIN}: run `make jaeger` (needs Go), "
            "or `make test`, which builds it first",
            pytrace=False,
        )
    ports = {
        name: free_port()
        for name in (
            "JAEGER_QUERY_PORT",
            "JAEGER_QUERY_GRPC_PORT",
            "JAEGER_HEALTH_PORT",
            "JAEGER_OTLP_GRPC_PORT",
            "JAEGER_OTLP_HTTP_PORT",
        )
    }
    log = (tmp_path_factory.mktemp("jaeger") / "jaeger.log").open("wb")
    process = subprocess.Popen(
        [str(JAEGER_BIN), "--config", str(ROOT / "tests" / "support" / "jaeger" / "config.yaml")],
        env={**os.environ, **{k: str(v) for k, v in ports.items()}, "OTEL_TRACES_EXPORTER": "none"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                url = f"http://127.0.0.1:{ports['JAEGER_HEALTH_PORT']}/status"
                with urllib.request.urlopen(url, timeout=1) as reply:
                    if json.load(reply).get("healthy"):
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"Jaeger did not start; see {log.name}", pytrace=False)
            time.sleep(0.1)
        yield ports
    finally:
        process.terminate()
        process.wait(timeout=15)
        log.close()


def hex_id(value: str) -> str:
    # The v3 API writes ids as hex; older gateways wrote base64 bytes.
    if len(value) in (16, 32) and all(c in "0123456789abcdef" for c in value.lower()):
        return value.lower()
    return base64.b64decode(value).hex()


def attributes(span: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for attr in span.get("attributes", []):
        value = attr["value"]
        out[attr["key"]] = next(iter(value.values())) if value else None
    return out


def query_spans(port: int, service: str, since: datetime) -> list[dict[str, Any]]:
    params = urllib.parse.urlencode(
        {
            "query.service_name": service,
            "query.start_time_min": since.isoformat().replace("+00:00", "Z"),
            "query.start_time_max": (datetime.now(UTC) + timedelta(minutes=1))
            .isoformat()
            .replace("+00:00", "Z"),
            "query.num_traces": "20",
        }
    )
    url = f"http://127.0.0.1:{port}/api/v3/traces?{params}"
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            body = json.load(reply)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:  # no traces yet
            return []
        raise
    spans = []
    for resource in body.get("result", {}).get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            spans.extend(scope.get("spans", []))
    return spans


def test_decision_spans_land_under_the_executor_span(jaeger: dict[str, int]) -> None:
    since = datetime.now(UTC) - timedelta(seconds=5)
    run = uuid.uuid4().hex[:8]
    otlp = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{jaeger['JAEGER_OTLP_GRPC_PORT']}",
        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    daemon = start_daemon(env={**otlp, "OTEL_SERVICE_NAME": f"squawk-{run}"})
    try:
        executor = subprocess.run(
            [sys.executable, str(ROOT / "tests" / "support" / "executor_trace.py"), daemon.target],
            cwd=ROOT,
            env={**os.environ, **otlp, "OTEL_SERVICE_NAME": f"executor-{run}"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert executor.returncode == 0, executor.stderr
        step = json.loads(executor.stdout)
    finally:
        assert daemon.stop() == 0  # SIGTERM flushes the daemon's exporter

    deadline = time.monotonic() + 30
    spans: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline and len(spans) < 3:
        found = query_spans(jaeger["JAEGER_QUERY_PORT"], f"squawk-{run}", since)
        spans = {s["name"].rsplit("/", 1)[-1]: s for s in found}
        time.sleep(0.2)
    assert {"DecideRetry", "AnalyzeError", "Classify"} <= spans.keys(), list(spans)

    for name in ("DecideRetry", "AnalyzeError", "Classify"):
        span = spans[name]
        assert hex_id(span["traceId"]) == step["trace_id"]
        assert hex_id(span["parentSpanId"]) == step["span_id"]
        attrs = attributes(span)
        assert attrs["rpc.system"] == "grpc"
        assert attrs["rpc.service"] == "squawk.v1.PolicyService"
        assert attrs["rpc.method"] == name

    decide = attributes(spans["DecideRetry"])
    assert decide["squawk.action"] == "RETRY"
    assert decide["squawk.reason"] == "TRANSIENT_STATUS"
    assert int(decide["squawk.delay_ms"]) == 542
    assert decide["squawk.capability"] == "search_hotels"
    analyze = attributes(spans["AnalyzeError"])
    assert analyze["squawk.analyzer.source"] == "HEURISTIC"
    assert int(analyze["squawk.changes.suggested"]) == 1

    # The refused call: an error in Jaeger, saying why, with no stack trace.
    refused = spans["Classify"]
    assert int(attributes(refused)["rpc.grpc.status_code"]) == 3
    assert step["refused"]["field"] == "profile"
    # STATUS_CODE_ERROR, naming the field; the caller alone gets the details.
    assert refused["status"] == {"code": 2, "message": "INVALID_ARGUMENT: profile"}
    assert "no-such" in step["refused"]["details"]
    assert not refused.get("events")
