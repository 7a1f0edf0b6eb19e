"""Shared fixtures: the real daemon, started as a subprocess on a free port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import grpc
import pytest
from google.protobuf import descriptor_pool, json_format, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from squawk.daemon.analysis import analyzer
from squawk.daemon.analysis.budget import DEFAULT_UNITS, Budget

ROOT = Path(__file__).resolve().parent.parent
# The lock every install of the project's own builds takes (make lock); make
# names another for `make check-latest`.
LOCK = Path(os.environ.get("SQUAWK_LOCK") or ROOT / "constraints.txt")
VECTORS = json.loads((ROOT / "tests" / "vectors" / "decisions.json").read_text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scrape(port: int) -> dict[str, float]:
    """A daemon's Prometheus metrics by sample name (labels included)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


@dataclass
class Daemon:
    process: subprocess.Popen[bytes]
    target: str
    log: IO[bytes]

    def stop(self, sig: int = 15) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.wait()

    def wait(self) -> int:
        """Wait for an exit already under way (a second SIGTERM would kill it)."""
        code = self.process.wait(timeout=15)
        self.log.close()
        return code

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")


def wait_serving(target: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            try:
                # typeshed's HealthStub declares no methods.
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)  # type: ignore[attr-defined]
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.05)
    raise TimeoutError(f"daemon at {target} did not become SERVING in {timeout_s}s")


SQUAWK = (sys.executable, "-m", "squawk.daemon.cli")


def squawk(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real `squawk` command, run to its end: no SQUAWK_ variable of the
    test runner's reaches it, only `env`'s."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SQUAWK_")}
    return subprocess.run(
        [*SQUAWK, *args],
        cwd=ROOT,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def start_daemon(
    *args: str,
    env: dict[str, str] | None = None,
    listen: str | None = None,
    umask: int = -1,
    command: tuple[str, ...] = (sys.executable, "-m", "squawk.daemon.cli"),
    cwd: Path = ROOT,
) -> Daemon:
    """The daemon as a subprocess, once it reports SERVING; `umask` is the one
    it inherits (-1: this process's); `command` runs the `squawk` command."""
    target = listen or f"127.0.0.1:{free_port()}"
    # A file, not a pipe: a chatty daemon must never block on a full pipe.
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by Daemon.stop)
    process = subprocess.Popen(
        [*command, "serve", "--listen", target, *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdout=log,
        stderr=subprocess.STDOUT,
        umask=umask,
    )
    daemon = Daemon(process, target, log)
    try:
        wait_serving(target)
    except TimeoutError:
        output = daemon.output()
        daemon.stop(9)
        raise RuntimeError(f"daemon failed to start:\n{output}") from None
    return daemon


@contextmanager
def serving(tmp_path_factory: pytest.TempPathFactory, policy: str) -> Iterator[grpc.Channel]:
    """A daemon of its own running the policy file `policy`, and a channel
    to it: for a module's fixture."""
    path = tmp_path_factory.mktemp("policy") / "policy.yaml"
    path.write_text(policy)
    daemon = start_daemon("--policy", str(path))
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            yield channel
    finally:
        daemon.stop()


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    d = start_daemon()
    yield d
    d.stop()


@pytest.fixture(scope="session")
def channel(daemon: Daemon) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(daemon.target) as ch:
        yield ch


Reflected = Callable[[str, dict[str, Any]], dict[str, Any]]


@pytest.fixture(scope="session")
def reflected(channel: grpc.Channel) -> Reflected:
    """Call a PolicyService method with proto3 JSON, knowing only what the
    daemon's reflection service says, as grpcurl does."""
    pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
    service = pool.FindServiceByName("squawk.v1.PolicyService")

    def call(method: str, body: dict[str, Any]) -> dict[str, Any]:
        m = service.methods_by_name[method]
        request_cls = message_factory.GetMessageClass(m.input_type)
        response_cls = message_factory.GetMessageClass(m.output_type)
        rpc: grpc.UnaryUnaryMultiCallable[Any, Any] = channel.unary_unary(
            f"/squawk.v1.PolicyService/{method}",
            request_serializer=lambda msg: msg.SerializeToString(),
            response_deserializer=response_cls.FromString,
        )
        reply = rpc(json_format.ParseDict(body, request_cls()), timeout=5)
        return json_format.MessageToDict(reply, always_print_fields_with_no_presence=True)

    return call


def subset_mismatches(expect: Any, actual: Any, path: str = "") -> list[str]:
    """Where `actual` differs from the fields `expect` lists (durations compared in ms)."""
    if isinstance(expect, dict):
        if not isinstance(actual, dict):
            return [f"{path}: expected an object, got {actual!r}"]
        out: list[str] = []
        for key, value in expect.items():
            out += subset_mismatches(value, actual.get(key, _MISSING), f"{path}.{key}")
        return out
    if isinstance(expect, str) and expect.endswith("s") and _is_duration(expect):
        got = duration_ms(actual) if isinstance(actual, str) and _is_duration(actual) else actual
        return [] if got == duration_ms(expect) else [f"{path}: expected {expect}, got {actual!r}"]
    return [] if expect == actual else [f"{path}: expected {expect!r}, got {actual!r}"]


_MISSING = object()


def _is_duration(text: str) -> bool:
    try:
        float(text[:-1])
    except ValueError:
        return False
    return True


def duration_ms(text: str) -> float:
    return round(float(text[:-1]) * 1000, 3)


@pytest.fixture
def analysis_budgets(monkeypatch: pytest.MonkeyPatch) -> list[Budget]:
    """Every CPU budget an analysis opens during the test, to read what it
    spent: counted units, the same on any machine, instead of a clock."""
    budgets: list[Budget] = []

    class Counted(Budget):
        def __init__(self, units: int = DEFAULT_UNITS) -> None:
            super().__init__(units)
            budgets.append(self)

    monkeypatch.setattr(analyzer, "Budget", Counted)
    return budgets


# The markers (registered in pyproject.toml), in one table so that a module
# keeps no marking of its own:
#   e2e       the test starts the daemon or another server or process, or
#             uses the session's daemon (the `daemon`, `channel` and
#             `reflected` fixtures);
#   external  the test runs a program from outside the Python packages:
#             the Go or Node toolchain, Jaeger, grpcurl, grpc_health_probe,
#             openssl, a Redis server, hadolint, kubernetes-validate.
# `pytest -m "not e2e and not external"` runs the core's tests alone.
E2E_MODULES = {
    "test_address_flags", "test_admitted_outcomes", "test_analysis_config", "test_analysis_llm",
    "test_analysis_model", "test_behind",
    "test_analysis_stream", "test_bench_dispatch", "test_bench_outcome", "test_bench_overload",
    "test_bench_paced", "test_bench_capped", "test_bench_views",
    "test_canary",
    "test_check_policy_misspellings", "test_cli_tls",
    "test_client", "test_client_batch", "test_client_cap", "test_client_connect",
    "test_client_pace", "test_client_pages", "test_lease_bounds",
    "test_daemon", "test_decision_log", "test_deploy",
    "test_dist", "test_events_cli", "test_events_wire", "test_examples", "test_top_cli",
    "test_fallback_conformance", "test_first_run", "test_fleet",
    "test_fleet_connect", "test_fleet_pace", "test_fleet_store", "test_fleet_tables",
    "test_fleet_view", "test_fuzz", "test_jaeger", "test_lifecycle", "test_limits",
    "test_monitoring", "test_pacing",
    "test_peer_budget", "test_pod",
    "test_pod_rehearsal", "test_pushback", "test_rate_limit_config", "test_readme",
    "test_readme_metrics", "test_reflection", "test_refusal_jitter", "test_reload",
    "test_runner_vectors", "test_sdk_transports", "test_see_why", "test_shedding_order",
    "test_span_encoding",
    "test_status_page",
    "test_start_errors",
    "test_telemetry", "test_throttling", "test_tls", "test_upstream_personalities",
    "test_upstreams", "test_upstreams_cli", "test_vectors",
}  # fmt: skip
EXTERNAL_MODULES = {
    "test_bench_outcome", "test_bench_overload", "test_bench_views", "test_cli_tls", "test_deploy",
    "test_dist",
    "test_examples",
    "test_fallback_conformance", "test_first_run", "test_fleet_view",
    "test_fleet", "test_fleet_connect", "test_fleet_pace", "test_fleet_store", "test_fleet_tables",
    "test_jaeger", "test_monitoring", "test_status_page",
    "test_pacing",
    "test_peer_budget", "test_pod", "test_pod_rehearsal", "test_readme", "test_readme_metrics",
    "test_refusal_jitter", "test_throttling", "test_tls", "test_upstream_personalities",
    "test_upstreams",
}  # fmt: skip
SESSION_DAEMON = {"daemon", "channel", "reflected"}


@pytest.hookimpl(tryfirst=True)  # before -m reads the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = item.path.stem
        if module in E2E_MODULES or SESSION_DAEMON & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)
        if module in EXTERNAL_MODULES:
            item.add_marker(pytest.mark.external)
