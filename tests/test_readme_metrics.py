"""The metrics reference (docs/metrics.md) lists exactly what a running daemon
exports.

A daemon with every optional part that adds a metric turned on (tracing:
the dropped-spans counter; the Redis store: its up gauge and the fleet's
breaker) is scraped over HTTP, and the metric names on its /metrics are
compared with the first column of the page's first table, so neither can
drift from the other.
"""

from __future__ import annotations

import re
import sys
import urllib.request

from conftest import ROOT, free_port, start_daemon

sys.path.insert(0, str(ROOT))

from bench.redis_server import RedisServer

_TABLE_ROW = re.compile(r"^\| `(squawk_[a-z_]+)`")
_TYPE = re.compile(r"^# TYPE (\S+) \S+$")


def documented_metrics() -> set[str]:
    """The names in the first column of the table before the first section."""
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    section = text.split("\n## ", 1)[0]
    return {m[1] for line in section.splitlines() if (m := _TABLE_ROW.match(line))}


def exported(text: str) -> set[str]:
    """The metric names a Prometheus scrape declares (`# TYPE` lines)."""
    names = {m[1] for line in text.splitlines() if (m := _TYPE.match(line))}
    # prometheus_client declares an unlabelled histogram's creation time as
    # a gauge of its own: a timestamp of the metric, not a metric to document.
    return {name for name in names if not name.endswith("_created")}


def test_the_metrics_table_names_every_metric_the_daemon_exports() -> None:
    port = free_port()
    redis = RedisServer().start()
    try:
        daemon = start_daemon(
            "--metrics-listen",
            f"127.0.0.1:{port}",
            env={
                "SQUAWK_STATE_URL": redis.url,
                # Tracing on, so the dropped-spans counter exists; nothing listens.
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
                "OTEL_TRACES_SAMPLER": "always_on",
            },
        )
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
                text = reply.read().decode()
        finally:
            daemon.stop()
    finally:
        redis.stop()
    names = exported(text)
    assert {"squawk_breaker_state", "squawk_state_store_up"} <= names  # the parts were on
    assert documented_metrics() == names
