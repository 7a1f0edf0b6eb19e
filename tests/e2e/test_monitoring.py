"""deploy/prometheus and deploy/grafana: the alert rules and the dashboard
that ship with the daemon (issue 36).

The rules pass the Prometheus project's own checker and its unit tests
(`promtool check rules`, `promtool test rules` on squawk-alerts.test.yaml,
which say when each alert fires and when it must not); and every query of
the rules and the dashboard names metrics a real daemon exports, with
labels those metrics carry: a daemon with the Redis store and a policy
that paces one upstream is driven through a breaker's trip, paced and shed
Admits, a refused call and a rejected reload, then scraped, and each
query's metric names and label names are looked up in that scrape.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from conftest import ROOT, free_port, start_daemon
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

sys.path.insert(0, str(ROOT))

from bench.redis_server import RedisServer

PROMETHEUS = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "squawk-dashboard.json"
PROMTOOL = Path(
    os.environ.get(
        "SQUAWK_PROMTOOL_BIN",
        Path.home() / ".cache" / "squawk" / "promtool-v0.316.0" / "promtool",
    )
)
# Labels Prometheus adds to every series it scrapes (the scrape job of
# deploy/kubernetes/prometheus-scrape.yaml), and a histogram's bucket bound.
TARGET_LABELS = {"job", "instance", "namespace", "pod"}
POLICY = """\
state: {min_pods: 1}
profiles:
  default:
    upstreams:
      tripping:
        circuit_breaker: {minimum_calls: 4, failure_ratio: 0.5, window: 60s, open_for: 60s}
      paced:
        rate_limit: {rate: 2, burst: 1, max_queue_delay: 100ms}
"""


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL.exists(), f"{PROMTOOL} is missing: `make test` installs it"
    return subprocess.run(
        [str(PROMTOOL), *args],
        cwd=PROMETHEUS,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_rules_pass_promtools_check_and_its_unit_tests() -> None:
    checked = _promtool("check", "rules", "squawk-alerts.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 9 rules found" in checked.stdout
    tested = _promtool("test", "rules", "squawk-alerts.test.yaml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_a_rule_that_fires_too_late_fails_its_unit_test(tmp_path: Path) -> None:
    """The unit tests can fail: the same tests on a breaker rule that waits
    20 minutes instead of 10 see no alert where they expect one."""
    rules = (PROMETHEUS / "squawk-alerts.yaml").read_text()
    slower = rules.replace("        for: 10m\n", "        for: 20m\n", 1)
    assert slower != rules
    (tmp_path / "squawk-alerts.yaml").write_text(slower)
    (tmp_path / "squawk-alerts.test.yaml").write_text(
        (PROMETHEUS / "squawk-alerts.test.yaml").read_text()
    )
    tested = subprocess.run(
        [str(PROMTOOL), "test", "rules", "squawk-alerts.test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert tested.returncode != 0
    assert "SquawkBreakerOpen" in tested.stdout + tested.stderr


def _queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every rule and every dashboard panel."""
    rules = yaml.safe_load((PROMETHEUS / "squawk-alerts.yaml").read_text())
    out = [
        (f"rule {rule['alert']}", str(rule["expr"]))
        for group in rules["groups"]
        for rule in group["rules"]
    ]
    dashboard = json.loads(DASHBOARD.read_text())
    out += [
        (f"panel {panel['title']!r}", target["expr"])
        for panel in dashboard["panels"]
        for target in panel["targets"]
    ]
    out += [
        (f"variable {v['name']}", v["query"]["query"])
        for v in dashboard["templating"]["list"]
        if v["type"] == "query"
    ]
    return out


_METRIC = re.compile(r"\b(squawk_[a-z_]+)\b")
_MATCHERS = re.compile(r"\{([^}]*)\}")
_MATCHER_NAME = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="')


def _labels_by_metric(scrape: str) -> dict[str, set[str]]:
    """Each sampled series name of a scrape, with the label names it carries."""
    out: dict[str, set[str]] = {}
    for line in scrape.splitlines():
        if line.startswith("#") or not (m := _SAMPLE.match(line)):
            continue
        out.setdefault(m[1], set()).update(_LABEL.findall(m[2] or ""))
    return out


def _used_labels(query: str) -> set[str]:
    names = {n for body in _MATCHERS.findall(query) for n in _MATCHER_NAME.findall(body)}
    for body in _GROUPING.findall(query):
        names |= {n.strip() for n in body.split(",") if n.strip()}
    return names


def _drive(target: str, policy: Path, daemon_pid: int) -> None:
    """Traffic that gives every labelled series a sample."""
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)
        failed = [pb.Outcome(upstream="tripping", http_status=503) for _ in range(4)]
        stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=failed), timeout=10)
        # An answer whose headers say 90 of 100 requests are used.
        near = {
            "x-ratelimit-limit-requests": "100",
            "x-ratelimit-remaining-requests": "10",
            "x-ratelimit-reset-requests": "1s",
        }
        nearly = pb.Outcome(upstream="paced", success=True, http_status=200, headers=near)
        stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[nearly]), timeout=10)
        for i in range(20):
            stub.Admit(
                pb.AdmitRequest(
                    upstream="paced",
                    criticality=pb.CRITICALITY_SHEDDABLE if i % 2 else pb.CRITICALITY_CRITICAL,
                    fairness_key=f"tenant-{i % 3}",
                ),
                timeout=10,
            )
        stub.DecideRetry(pb.DecideRetryRequest(attempt=1, http_status=503), timeout=10)
        with pytest.raises(grpc.RpcError):
            stub.DecideRetry(pb.DecideRetryRequest(attempt=-1), timeout=10)
    # A reload the daemon rejects: a field out of its bounds.
    policy.write_text(POLICY.replace("rate: 2,", "rate: -2,"))
    os.kill(daemon_pid, signal.SIGHUP)


def test_every_query_names_metrics_and_labels_a_daemon_exports(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    port = free_port()
    redis = RedisServer().start()
    try:
        daemon = start_daemon(
            "--policy",
            str(policy),
            "--metrics-listen",
            f"127.0.0.1:{port}",
            env={"SQUAWK_STATE_URL": redis.url},
        )
        try:
            _drive(daemon.target, policy, daemon.process.pid)
            scrape, seen = "", {}
            # Until the reload has been judged and the fleet's breaker moved
            # (its sync runs apart from the calls): at most 10 s.
            for _ in range(100):
                url = f"http://127.0.0.1:{port}/metrics"
                with urllib.request.urlopen(url, timeout=10) as reply:
                    scrape = reply.read().decode()
                seen = _labels_by_metric(scrape)
                wanted = ("squawk_policy_reloads_total", "squawk_fleet_breaker_transitions_total")
                if all(name in seen for name in wanted):
                    break
                time.sleep(0.1)
        finally:
            daemon.stop()
    finally:
        redis.stop()
    problems: list[str] = []
    for where, query in _queries():
        metrics = set(_METRIC.findall(query))
        assert metrics, f"{where}: names no squawk metric: {query}"
        carried: set[str] = set()
        for metric in metrics:
            if metric not in seen:
                problems.append(f"{where}: {metric} has no sample in the scrape")
            carried |= seen.get(metric, set())
        unknown = _used_labels(query) - carried - TARGET_LABELS
        if unknown:
            problems.append(f"{where}: labels {sorted(unknown)} on none of {sorted(metrics)}")
    assert problems == []


def test_the_dashboard_is_one_grafana_dashboard_with_a_query_per_panel() -> None:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    assert (dashboard["uid"], dashboard["title"]) == ("squawk", "Squawk")
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) >= 10
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert [t["refId"] for t in panel["targets"]] == ["A"]
        # Every panel honours the namespace and pod chosen above it.
        assert 'namespace=~"$namespace", pod=~"$pod"' in panel["targets"][0]["expr"]
