"""Starting and stopping the daemon as a platform runs it: the shutdown
notice and drain on SIGTERM, a bounded exit whatever the trace collector
does, and the addresses it claims (unix socket files, their mode, ports
already taken). Every test runs the real daemon process."""

from __future__ import annotations

import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from chat_server import ChatServer, LoopbackServer, Reply, Seen, answer
from conftest import ROOT, Daemon, free_port, start_daemon
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

# What the daemon may take beyond --grace to exit: closing the analyzer's
# client and the interpreter's own teardown (docs/security.md,
# "Shutdown and binding").
TEARDOWN_S = 1.0

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s}s")
        time.sleep(0.02)


def health_check(target: str) -> int | grpc.StatusCode:
    """One Check on a new channel: the status it reads, or the RPC's error code."""
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            request = health_pb2.HealthCheckRequest(service="squawk.v1.PolicyService")
            reply = stub.Check(request, timeout=2)  # type: ignore[attr-defined]
        except grpc.RpcError as exc:
            code: grpc.StatusCode = exc.code()
            return code
        status: int = reply.status
        return status


def checks_until_not_serving(target: str, timeout_s: float) -> list[int | grpc.StatusCode]:
    """Health checks until one reads other than SERVING: every answer read."""
    seen: list[int | grpc.StatusCode] = []

    def stopped_serving() -> bool:
        seen.append(health_check(target))
        return seen[-1] != SERVING

    until(stopped_serving, timeout_s, "NOT_SERVING")
    return seen


def decide(target: str) -> pb.DecideRetryResponse | grpc.StatusCode:
    with grpc.insecure_channel(target) as channel:
        try:
            return pb_grpc.PolicyServiceStub(channel).DecideRetry(
                pb.DecideRetryRequest(attempt=1, http_status=503), timeout=2
            )
        except grpc.RpcError as exc:
            code: grpc.StatusCode = exc.code()
            return code


def exit_time(daemon: Daemon, signalled_at: float, timeout_s: float) -> tuple[int, float]:
    """The exit code and the seconds from the signal to the exit."""
    code = daemon.process.wait(timeout=timeout_s)
    return code, time.monotonic() - signalled_at


def squawk_serve(*args: str, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "squawk.daemon.cli", "serve", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


# --- SIGTERM: notice, then drain -----------------------------------------


def analysis_request() -> pb.AnalyzeErrorRequest:
    request = pb.AnalyzeErrorRequest(http_status=400, error_response="INVALID CITY CODE: PARIS")
    request.original_request.update({"city_code": "PARIS"})
    request.parameter_schema.update(
        {"properties": {"city_code": {"type": "string", "enum": ["PAR", "LON"]}}}
    )
    return request


def test_sigterm_gives_notice_then_drains_then_exits_in_time() -> None:
    grace, notice = 5.0, 1.5
    # The model holds its answer until released: an AnalyzeError call in
    # flight for as long as the test needs one.
    with ChatServer(answer({"city_code": "LON"}, "held"), hold=True) as model:
        daemon = start_daemon(
            "--grace", str(grace), "--shutdown-notice", str(notice), env=model.daemon_env()
        )
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                in_flight = pb_grpc.PolicyServiceStub(channel).AnalyzeError.future(
                    analysis_request(), timeout=15
                )
                assert model.arrived.wait(5), "the analysis never reached the model"
                signalled_at = time.monotonic()
                daemon.process.send_signal(signal.SIGTERM)

                # New health checks read NOT_SERVING (a check may still read
                # SERVING before the signal is handled), never a refused call.
                seen = checks_until_not_serving(daemon.target, 2)
                assert seen[-1] == NOT_SERVING, seen
                # During the notice a new decision is still answered.
                answered = decide(daemon.target)
                assert isinstance(answered, pb.DecideRetryResponse), answered
                assert answered.action == pb.ACTION_RETRY
                assert health_check(daemon.target) == NOT_SERVING

                # Then the drain: new calls are refused, the one in flight goes on.
                until(
                    lambda: decide(daemon.target) == grpc.StatusCode.UNAVAILABLE,
                    notice + 2,
                    "refusing new calls",
                )
                assert not in_flight.done()
                model.release.set()
                reply = in_flight.result(timeout=5)
            assert reply.source == pb.ANALYSIS_SOURCE_LLM
            assert json_format.MessageToDict(reply.suggested_changes) == {"city_code": "LON"}
            code, took = exit_time(daemon, signalled_at, grace + 5)
        finally:
            output = daemon.output()
            daemon.stop(signal.SIGKILL)
    assert code == 0, output
    assert took <= grace + TEARDOWN_S, f"exited {took:.2f}s after SIGTERM\n{output}"


def test_a_short_grace_gets_half_of_it_as_notice_by_default() -> None:
    grace = 1.0
    daemon = start_daemon("--grace", str(grace))
    try:
        signalled_at = time.monotonic()
        daemon.process.send_signal(signal.SIGTERM)
        seen = checks_until_not_serving(daemon.target, 1)
        code, took = exit_time(daemon, signalled_at, grace + 5)
    finally:
        output = daemon.output()
        daemon.stop(signal.SIGKILL)
    assert seen[-1] == NOT_SERVING, seen
    assert code == 0, output
    # Half the grace for the notice; the drain has nothing in flight.
    assert grace / 2 <= took <= grace + TEARDOWN_S, f"exited {took:.2f}s after SIGTERM"


def test_a_notice_longer_than_the_grace_is_refused() -> None:
    result = squawk_serve("--grace", "1", "--shutdown-notice", "2")
    assert result.returncode == 2
    assert "--shutdown-notice (2s) must not exceed --grace (1s)" in result.stderr


# --- A collector that is down, silent or fine ------------------------------


@contextmanager
def silent_collector() -> Iterator[int]:
    """A TCP server that accepts connections and never says a word."""
    held: list[socket.socket] = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.settimeout(0.1)
        stop = threading.Event()

        def accept() -> None:
            while not stop.is_set():
                with suppress(TimeoutError):
                    held.append(listener.accept()[0])

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        try:
            yield listener.getsockname()[1]
        finally:
            stop.set()
            thread.join(5)
            for conn in held:
                conn.close()


@contextmanager
def refused_collector() -> Iterator[int]:
    yield free_port()  # nothing listens there


class Collector(LoopbackServer):
    """An OTLP/HTTP trace collector on loopback that accepts everything."""

    def answer(self, seen: Seen) -> Reply:
        reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        return Reply(reply, content_type="application/x-protobuf")

    @property
    def spans(self) -> int:
        """Spans received, counted from every export as it arrived."""
        count = 0
        for seen in self.seen:
            export = trace_service_pb2.ExportTraceServiceRequest.FromString(seen.raw)
            count += sum(len(sc.spans) for rs in export.resource_spans for sc in rs.scope_spans)
        return count


DECISIONS = 20


def traced_run(port: int, protocol: str, grace: float) -> tuple[int, float, str]:
    """Start a traced daemon, make DECISIONS decisions, SIGTERM it: the exit
    code, the seconds from the signal to the exit, and its log."""
    daemon = start_daemon(
        "--grace",
        str(grace),
        "--shutdown-notice",
        "0",
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_TRACES_SAMPLER": "always_on",
            # Nothing leaves before the shutdown: the flush carries every span.
            "OTEL_BSP_SCHEDULE_DELAY": "60000",
        },
    )
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            for _ in range(DECISIONS):
                stub.DecideRetry(pb.DecideRetryRequest(attempt=1, http_status=503), timeout=5)
        signalled_at = time.monotonic()
        daemon.process.send_signal(signal.SIGTERM)
        code, took = exit_time(daemon, signalled_at, grace + 10)
    finally:
        output = daemon.output()
        daemon.stop(signal.SIGKILL)
    return code, took, output


@pytest.mark.parametrize(
    ("collector", "protocol"),
    [
        (silent_collector, "grpc"),
        (silent_collector, "http/protobuf"),
        (refused_collector, "grpc"),
    ],
    ids=["silent-grpc", "silent-http", "refused-grpc"],
)
def test_a_dead_collector_cannot_hold_up_the_exit(
    collector: Callable[[], Any], protocol: str
) -> None:
    grace = 2.0
    with collector() as port:
        code, took, output = traced_run(port, protocol, grace)
    assert code == 0, output
    assert took <= grace + TEARDOWN_S, f"exited {took:.2f}s after SIGTERM\n{output}"
    assert f"tracing: {DECISIONS} of {DECISIONS} spans were not exported" in output, output


def test_a_working_collector_gets_every_span_at_exit() -> None:
    with Collector() as collector:
        code, _, output = traced_run(collector.port, "http/protobuf", 3.0)
    assert code == 0, output
    assert collector.spans == DECISIONS
    assert f"tracing: all {DECISIONS} spans exported" in output, output


# --- Unix sockets -----------------------------------------------------------

# No health checker to give notice to here.
QUICK_STOP = ("--shutdown-notice", "0")


@pytest.fixture
def sock() -> Iterator[Path]:
    """A socket path in a new directory; short, since a unix socket path has
    room for about 107 bytes and pytest's tmp_path can be longer."""
    directory = Path(tempfile.mkdtemp(prefix="sq-"))
    yield directory / "squawk.sock"
    shutil.rmtree(directory)


def test_a_second_daemon_on_a_live_socket_exits_3_and_the_first_keeps_serving(
    sock: Path,
) -> None:
    address = f"unix://{sock}"
    first = start_daemon(*QUICK_STOP, listen=address)
    try:
        inode = sock.stat().st_ino
        second = squawk_serve("--listen", address)
        assert second.returncode == 3, second.stderr
        assert f"cannot listen on {address}: another process is serving on it" in second.stderr
        assert "Traceback" not in second.stderr
        assert sock.stat().st_ino == inode
        answered = decide(address)
        assert isinstance(answered, pb.DecideRetryResponse), answered
    finally:
        code = first.stop()
    assert code == 0
    assert not sock.exists(), "a clean exit leaves no socket file"


def test_a_stale_socket_from_a_killed_daemon_is_replaced(sock: Path) -> None:
    address = f"unix://{sock}"
    killed = start_daemon(listen=address)
    killed.stop(signal.SIGKILL)
    assert stat.S_ISSOCK(sock.lstat().st_mode), "SIGKILL leaves the socket file behind"
    daemon = start_daemon(*QUICK_STOP, listen=address)
    try:
        assert isinstance(decide(address), pb.DecideRetryResponse)
        assert "removed the stale socket" in daemon.output()
    finally:
        assert daemon.stop() == 0


def test_a_path_that_is_not_a_socket_is_refused(sock: Path) -> None:
    sock.write_text("not a socket\n")
    address = f"unix://{sock}"
    result = squawk_serve("--listen", address)
    assert result.returncode == 3, result.stderr
    assert f"cannot listen on {address}: {sock} exists and is not a socket" in result.stderr
    assert sock.read_text() == "not a socket\n"


@pytest.mark.parametrize(
    ("args", "mode"), [((), 0o660), (("--socket-mode", "600"), 0o600)], ids=["default", "600"]
)
def test_the_socket_mode_does_not_depend_on_the_umask(
    sock: Path, args: tuple[str, ...], mode: int
) -> None:
    # umask 0 would create the socket 0777 if the daemon left it to the umask.
    daemon = start_daemon(*args, *QUICK_STOP, listen=f"unix://{sock}", umask=0)
    try:
        assert stat.S_IMODE(sock.lstat().st_mode) == mode
    finally:
        assert daemon.stop() == 0


def test_a_bad_socket_mode_is_refused() -> None:
    result = squawk_serve("--socket-mode", "rw-rw----")
    assert result.returncode == 2
    assert "--socket-mode" in result.stderr and "is not an octal mode" in result.stderr


# --- Ports already taken ----------------------------------------------------


def test_a_busy_metrics_port_exits_3_and_leaves_no_socket(sock: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        metrics = f"127.0.0.1:{taken.getsockname()[1]}"
        result = squawk_serve("--listen", f"unix://{sock}", "--metrics-listen", metrics)
    assert result.returncode == 3, result.stderr
    assert f"cannot listen on {metrics} for metrics" in result.stderr
    assert "Traceback" not in result.stderr
    assert not sock.exists(), "a daemon that failed to start leaves no socket file"
