"""The daemon as an operator and a black-box caller see it: a real process on
a real socket, reflection, health, signals, bad input and bad configuration."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from conftest import ROOT, Daemon, Reflected, free_port, squawk, start_daemon
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc


def test_reflection_json_call(reflected: Reflected) -> None:
    reply = reflected("DecideRetry", {"attempt": 1, "httpStatus": 429})
    assert reply["action"] == "ACTION_RETRY"
    assert reply["reason"] == "REASON_TRANSIENT_STATUS"
    assert reply["delay"] == "0.542s"
    reply = reflected("Classify", {"errorMessage": "error 401: expired key"})
    assert reply["category"] == "ERROR_CATEGORY_AUTH_ERROR"


def test_health_is_serving(channel: grpc.Channel) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    for service in ("", "squawk.v1.PolicyService"):
        reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)  # type: ignore[attr-defined]
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_body_over_the_limit_is_refused(channel: grpc.Channel) -> None:
    stub = pb_grpc.PolicyServiceStub(channel)
    big = pb.DecideRetryRequest(attempt=1, http_status=503, response_body=b"x" * (1024 * 1024 + 1))
    with pytest.raises(grpc.RpcError) as info:
        stub.DecideRetry(big, timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "response_body" in (info.value.details() or "")


def test_garbage_bytes_do_not_hurt_the_daemon(channel: grpc.Channel) -> None:
    raw = channel.unary_unary(
        "/squawk.v1.PolicyService/DecideRetry",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.RpcError):
        raw(b"\xff\xff\xff\xff not protobuf", timeout=5)
    stub = pb_grpc.PolicyServiceStub(channel)
    assert stub.DecideRetry(pb.DecideRetryRequest(attempt=1), timeout=5).action == pb.ACTION_RETRY


def test_batch_answers_in_order_with_per_item_errors(channel: grpc.Channel) -> None:
    stub = pb_grpc.PolicyServiceStub(channel)
    batch = pb.DecideRetryBatchRequest(
        requests=[
            pb.DecideRetryRequest(attempt=1, http_status=503),
            pb.DecideRetryRequest(attempt=0, http_status=503),
            pb.DecideRetryRequest(attempt=1, http_status=401),
        ]
    )
    results = stub.DecideRetryBatch(batch, timeout=5).results
    assert results[0].decision.action == pb.ACTION_RETRY
    assert results[1].error.startswith("requests[1].attempt:")
    assert results[2].decision.reason == pb.REASON_TERMINAL_STATUS


def test_batch_over_the_limit_is_refused(channel: grpc.Channel) -> None:
    stub = pb_grpc.PolicyServiceStub(channel)
    batch = pb.DecideRetryBatchRequest(requests=[pb.DecideRetryRequest(attempt=1)] * 10_001)
    with pytest.raises(grpc.RpcError) as info:
        stub.DecideRetryBatch(batch, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (info.value.details() or "").startswith("requests:")


def test_concurrent_calls_all_answer(channel: grpc.Channel) -> None:
    stub = pb_grpc.PolicyServiceStub(channel)

    def one(i: int) -> int:
        reply = stub.DecideRetry(
            pb.DecideRetryRequest(attempt=1 + i % 2, http_status=503), timeout=10
        )
        return reply.delay.ToMilliseconds()

    with ThreadPoolExecutor(8) as pool:
        delays = list(pool.map(one, range(400)))
    assert delays.count(542) == 200 and delays.count(1091) == 200


def test_sigterm_turns_health_not_serving_then_drains() -> None:
    daemon = start_daemon()
    with grpc.insecure_channel(daemon.target) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(  # type: ignore[attr-defined]
            health_pb2.HealthCheckRequest(service="squawk.v1.PolicyService"), timeout=20
        )
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        stub = pb_grpc.PolicyServiceStub(channel)
        # Distinct items, each decided afresh: equal ones would be answered
        # from the kept decisions, and the batch could end before the signal.
        big = pb.DecideRetryBatchRequest(
            requests=[
                pb.DecideRetryRequest(attempt=1, http_status=503, capability=f"c{i}")
                for i in range(10_000)
            ]
        )
        in_flight = stub.DecideRetryBatch.future(big, timeout=20)
        threading.Timer(0.05, daemon.process.send_signal, (signal.SIGTERM,)).start()
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        # The call that was in flight when SIGTERM arrived still completes.
        assert len(in_flight.result().results) == 10_000
    assert daemon.wait() == 0


def test_second_daemon_on_a_used_port_fails_clearly(daemon: Daemon) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "squawk.daemon.cli", "serve", "--listen", daemon.target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 3
    assert f"cannot listen on {daemon.target}" in result.stderr


def test_unix_socket_and_env_listen(tmp_path: Path) -> None:
    path = tmp_path / "squawk.sock"
    daemon = start_daemon(listen=f"unix://{path}")
    try:
        with grpc.insecure_channel(f"unix://{path}") as channel:
            reply = pb_grpc.PolicyServiceStub(channel).DecideRetry(
                pb.DecideRetryRequest(attempt=1, http_status=401), timeout=5
            )
        assert reply.reason == pb.REASON_TERMINAL_STATUS
    finally:
        assert daemon.stop() == 0


def test_env_vars_reach_the_daemon() -> None:
    daemon = start_daemon(env={"SQUAWK_STEP_RETRY_MAX_ATTEMPTS": "5"})
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            reply = pb_grpc.PolicyServiceStub(channel).DecideRetry(
                pb.DecideRetryRequest(attempt=4, http_status=503), timeout=5
            )
        assert reply.action == pb.ACTION_RETRY
    finally:
        daemon.stop()


def test_policy_file_reaches_the_daemon(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("profiles:\n  edge:\n    base: llm\n    retryable_statuses: [520]\n")
    daemon = start_daemon("--policy", str(policy))
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            reply = pb_grpc.PolicyServiceStub(channel).DecideRetry(
                pb.DecideRetryRequest(attempt=1, http_status=520, profile="edge"), timeout=5
            )
        assert reply.action == pb.ACTION_RETRY
    finally:
        daemon.stop()


def test_bad_policy_file_stops_the_daemon(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("profiles:\n  default:\n    max_attempts: 0\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "squawk.daemon.cli",
            "serve",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--policy",
            str(policy),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "profiles.default.max_attempts (line 3)" in result.stderr


def test_cli_local_and_remote_answers_agree(daemon: Daemon) -> None:
    args = ["decide", "--status", "503", "--attempt", "2", "--header", "X-Trace: 1"]
    local, remote = squawk(*args), squawk(*args, "--target", daemon.target)
    assert local.returncode == remote.returncode == 0
    assert json.loads(local.stdout) == json.loads(remote.stdout)
    assert json.loads(local.stdout)["delay"] == "1.091s"
    classify = ["classify", "Amadeus API error 400: bad city, api_key=k-123456"]
    local, remote = squawk(*classify), squawk(*classify, "--target", daemon.target)
    assert json.loads(local.stdout) == json.loads(remote.stdout)
    assert "k-123456" not in local.stdout


def test_cli_bad_input_names_the_field(daemon: Daemon) -> None:
    for target in ([], ["--target", daemon.target]):
        result = squawk("decide", "--attempt", "0", *target)
        assert result.returncode == 2
        assert "attempt" in result.stderr


def test_cli_decides_a_named_upstream_as_a_fresh_daemon(tmp_path: Path) -> None:
    # A breaker that opens on the first failure: the upstream's state, not
    # decide() alone, turns the retry of this 503 into a failure.
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "profiles:\n  default:\n"
        "    circuit_breaker: {minimum_calls: 1, failure_ratio: 0.5, open_for: 60s}\n"
    )
    args = ["decide", "--status", "503", "--attempt", "1", "--policy", str(policy)]
    alone = json.loads(squawk(*args).stdout)
    local = squawk(*args, "--upstream", "api.example")
    daemon = start_daemon("--policy", str(policy))
    try:
        remote = squawk(*args, "--upstream", "api.example", "--target", daemon.target)
    finally:
        daemon.stop()
    assert local.returncode == remote.returncode == 0
    # The breaker's open time is spread at random: the rest must agree.
    answers = [json.loads(result.stdout) for result in (local, remote)]
    assert all(a.pop("retryAfter").endswith("s") for a in answers)
    # The daemon keeps its FAIL for `squawk explain`; alone the CLI keeps none.
    assert ("decisionId" in answers[0], bool(answers[1].pop("decisionId"))) == (False, True)
    assert answers[0] == answers[1]
    assert alone["action"] == "ACTION_RETRY"
    assert answers[0]["action"] != "ACTION_RETRY"
