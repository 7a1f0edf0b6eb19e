"""Policy hot reload, as a Kubernetes ConfigMap update does it, under load;
and `squawk check-policy`."""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from configmap import ConfigMap
from conftest import free_port, scrape, squawk, start_daemon
from squawk.daemon.config import Config, load_config, parse_config
from squawk.daemon.server.lifecycle import reload as reload_module
from squawk.daemon.server.lifecycle.reload import PolicyWatch, policy_hash
from squawk.daemon.server.tracking.registry import Upstreams
from squawk.policy import Outcome, Policy
from squawk.policy.limits import MAX_BATCH
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

BREAKER = "circuit_breaker: {minimum_calls: 2, failure_ratio: 0.5, open_for: 60s}"
POLICY_A = f"""profiles:
  default:
    max_attempts: 3
    backoff: {{initial_delay: 100ms, max_delay: 10s, factor: 2, jitter: none}}
    {BREAKER}
"""
POLICY_B = POLICY_A.replace("max_attempts: 3", "max_attempts: 5").replace("100ms", "300ms")
INVALID = "profiles:\n  default:\n    max_attempts: 0\n"
# (action, delay in ms) for a 503 at attempts 1 and 3, worked out by hand:
# A retries after 100 ms and has no fourth attempt; B waits 300 ms, then
# 300 x 2^2 = 1,200 ms before the fourth of five.
ANSWERS = {
    "A": {1: (pb.ACTION_RETRY, 100), 3: (pb.ACTION_FAIL, 0)},
    "B": {1: (pb.ACTION_RETRY, 300), 3: (pb.ACTION_RETRY, 1200)},
}


def reloads(port: int) -> Counter[str]:
    samples = scrape(port)
    return Counter(
        {
            result: int(samples.get(f'squawk_policy_reloads_total{{result="{result}"}}', 0))
            for result in ("applied", "invalid", "unchanged")
        }
    )


def test_reloads_under_load_never_drop_or_mix_a_decision(tmp_path: Path) -> None:
    config = ConfigMap(tmp_path, POLICY_A)
    port = free_port()
    daemon = start_daemon(
        "--policy",
        str(config.path),
        "--policy-poll",
        "0.05",
        "--metrics-listen",
        f"127.0.0.1:{port}",
    )
    answers: list[tuple[int, tuple[int, int]]] = []
    errors: list[str] = []
    stop = threading.Event()

    def load() -> None:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            health = health_pb2_grpc.HealthStub(channel)
            while not stop.is_set():
                for attempt in (1, 3):
                    try:
                        reply = stub.DecideRetry(
                            pb.DecideRetryRequest(attempt=attempt, http_status=503), timeout=2
                        )
                        answers.append((attempt, (reply.action, reply.delay.ToMilliseconds())))
                        status = health.Check(health_pb2.HealthCheckRequest(), timeout=2)  # type: ignore[attr-defined]
                        if status.status != health_pb2.HealthCheckResponse.SERVING:
                            errors.append(f"health {status.status}")
                    except grpc.RpcError as exc:
                        errors.append(f"{exc.code().name}: {exc.details()}")

    try:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            # State to keep: a breaker opened before the reloads.
            stub.ReportOutcome(
                pb.ReportOutcomeRequest(
                    outcomes=[pb.Outcome(upstream="kept", http_status=503)] * 2
                ),
                timeout=5,
            )
            assert stub.Admit(pb.AdmitRequest(upstream="kept"), timeout=5).reason == (
                pb.REASON_CIRCUIT_OPEN
            )
            threads = [threading.Thread(target=load) for _ in range(2)]
            for t in threads:
                t.start()
            valid = "A"
            seen_per_swap = []
            for i in range(20):
                before = reloads(port)
                if i % 2:
                    config.update(INVALID)
                    result = "invalid"
                else:
                    valid = "B" if valid == "A" else "A"
                    config.update(POLICY_A if valid == "A" else POLICY_B)
                    result = "applied"
                deadline = time.monotonic() + 10
                while reloads(port)[result] == before[result]:
                    assert time.monotonic() < deadline, f"swap {i} ({result}) not seen"
                    time.sleep(0.02)
                # Answers after the swap follow the policy now in force.
                mark = len(answers)
                while len(answers) < mark + 4:
                    time.sleep(0.01)
                seen_per_swap.append((valid, answers[mark : mark + 4]))
            stop.set()
            for t in threads:
                t.join(timeout=10)
            final = reloads(port)
            # The breaker opened before the reloads is still open.
            kept = stub.Admit(pb.AdmitRequest(upstream="kept"), timeout=5)
            assert kept.reason == pb.REASON_CIRCUIT_OPEN
            assert kept.retry_after.ToMilliseconds() > 30_000
    finally:
        stop.set()
        daemon.process.terminate()
        daemon.process.wait(timeout=15)
        log = daemon.output()
        daemon.log.close()
    assert errors == []
    assert len(answers) > 200
    # Every answer is wholly A's or wholly B's, never a mix of the two.
    allowed = {(n, ANSWERS[p][n]) for p in ANSWERS for n in (1, 3)}
    assert set(answers) <= allowed
    # After each swap, the policy in force answers (the invalid file kept the previous one).
    for in_force, after in seen_per_swap:
        assert all(answer == ANSWERS[in_force][n] for n, answer in after), (in_force, after)
    assert final["applied"] == 10 and final["invalid"] == 10
    assert log.count("refused, keeping") == 10
    assert log.count("profiles.default.max_attempts (line 3): expected an integer >= 1") == 10


def test_sighup_reloads_at_once_and_the_metric_names_the_policy(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY_A)
    port = free_port()
    daemon = start_daemon(
        "--policy", str(policy), "--policy-poll", "3600", "--metrics-listen", f"127.0.0.1:{port}"
    )
    try:
        before = {k for k in scrape(port) if k.startswith("squawk_policy_info")}
        assert len(before) == 1
        policy.write_text(POLICY_B)  # the same inode, and no poll for an hour
        daemon.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while reloads(port)["applied"] < 1:
            assert time.monotonic() < deadline, "SIGHUP did not reload"
            time.sleep(0.02)
        after = {k for k in scrape(port) if k.startswith("squawk_policy_info")}
        assert len(after) == 1 and after != before
        with grpc.insecure_channel(daemon.target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            reply = stub.DecideRetry(pb.DecideRetryRequest(attempt=3, http_status=503), timeout=5)
        assert (reply.action, reply.delay.ToMilliseconds()) == ANSWERS["B"][3]
    finally:
        daemon.stop()


def check(
    path: Path, *options: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return squawk("check-policy", *options, str(path), env=env)


@pytest.mark.parametrize(
    ("text", "code", "message"),
    [
        (POLICY_B, 0, "valid (policy "),
        (INVALID, 2, "profiles.default.max_attempts (line 3): expected an integer >= 1"),
        ("state: {pod: p1}\n", 2, "state.pod (line 1)"),
        ("profiles: [\n", 2, "not valid YAML"),
    ],
)
def test_check_policy_says_what_the_daemon_would(
    tmp_path: Path, text: str, code: int, message: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    done = check(path)
    assert done.returncode == code
    assert message in (done.stdout if code == 0 else done.stderr)


@pytest.mark.parametrize(
    ("text", "notes"),
    [
        (
            "analyzer:\n  backend: openai\n",
            [
                "analyzer.base_url must come from SQUAWK_ANALYZER_BASE_URL",
                "analyzer.model must come from SQUAWK_ANALYZER_MODEL",
            ],
        ),
        ("state:\n  store: redis\n", ["state.url must come from SQUAWK_STATE_URL"]),
        ("state:\n  store: redis\n  url: redis://redis:6379/0\n", []),
    ],
)
def test_check_policy_says_what_the_file_leaves_to_the_environment(
    tmp_path: Path, text: str, notes: list[str]
) -> None:
    # The file can be right: the pod's environment may hold these (a Redis
    # password only ever does), and the CI of a policy repository has no Secrets.
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    done = check(path)
    assert (done.returncode, done.stderr) == (0, "")
    first, *rest = done.stdout.splitlines()
    assert first.startswith(f"{path}: valid (policy ")
    assert rest == [f"{path}: at start, {note} (the file does not set it)" for note in notes]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "analyzer:\n  backend: openai\n  model: m\n",
            "analyzer.base_url: required when analyzer.backend (line 2) is openai "
            "(set it in the file or in SQUAWK_ANALYZER_BASE_URL)",
        ),
        (
            "state: {store: redis}\n",
            "state.url: required when state.store (line 1) is redis "
            "(set it in the file or in SQUAWK_STATE_URL)",
        ),
    ],
)
def test_check_policy_with_env_refuses_what_serve_refuses(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    checked = check(path, "--env")
    served = squawk("serve", "--policy", str(path), "--listen", f"127.0.0.1:{free_port()}")
    assert (checked.returncode, checked.stdout) == (2, "")
    assert checked.stderr == served.stderr == f"squawk: bad policy: {path}: {message}\n"
    assert served.returncode == 2


def test_check_policy_with_env_takes_what_the_environment_gives(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("analyzer:\n  backend: openai\nstate:\n  store: redis\n")
    env = {
        "SQUAWK_ANALYZER_BASE_URL": "http://127.0.0.1:9/v1",
        "SQUAWK_ANALYZER_MODEL": "tiny-model",
        "SQUAWK_STATE_URL": "redis://:pw-in-a-secret@127.0.0.1:6379/0",
    }
    done = check(path, "--env", env=env)
    assert (done.returncode, done.stderr) == (0, "")
    (line,) = done.stdout.splitlines()
    assert line.startswith(f"{path}: valid (policy ")


def test_check_policy_names_a_broken_yaml_file_once(tmp_path: Path) -> None:
    path = tmp_path / "b.yaml"
    path.write_text("profiles:\n  - a\n b: 1\n")
    done = check(path)
    assert done.returncode == 2
    assert done.stderr.startswith(
        f"squawk: bad policy: {path}: not valid YAML at line 3, column 2: "
    )
    assert done.stderr.count(str(path)) == 1
    assert len(done.stderr.splitlines()) == 1


NEVER_RETRIED = "is a terminal status in this profile, so it is never retried"
DEAD_401 = "profiles:\n  default:\n    max_attempts: 3\n    retryable_statuses: [404, 401, 302]\n"


def test_check_policy_warns_of_a_status_that_is_never_retried(tmp_path: Path) -> None:
    # A warning, not an error: the file works, 401 just stays terminal.
    path = tmp_path / "rs.yaml"
    path.write_text(DEAD_401)
    done = check(path)
    assert (done.returncode, done.stderr) == (0, "")
    first, *rest = done.stdout.splitlines()
    assert first.startswith(f"{path}: valid (policy ")
    assert rest == [f"{path}: profiles.default.retryable_statuses (line 4): 401 {NEVER_RETRIED}"]


def test_serve_logs_each_warning_at_start_and_on_reload(tmp_path: Path) -> None:
    policy = tmp_path / "rs.yaml"
    policy.write_text(DEAD_401)
    port = free_port()
    daemon = start_daemon(
        "--policy", str(policy), "--policy-poll", "3600", "--metrics-listen", f"127.0.0.1:{port}"
    )
    try:
        policy.write_text(
            "profiles:\n  default:\n    retryable_statuses:\n      - 520\n      - 403\n"
        )
        daemon.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while reloads(port)["applied"] < 1:
            assert time.monotonic() < deadline, "SIGHUP did not reload"
            time.sleep(0.02)
    finally:
        daemon.process.terminate()
        daemon.process.wait(timeout=15)
        log = daemon.output()
        daemon.log.close()
    warnings = [line for line in log.splitlines() if " WARNING " in line]
    assert [line.split(" WARNING ", 1)[1] for line in warnings] == [
        f"squawk: {policy}: profiles.default.retryable_statuses (line 4): 401 {NEVER_RETRIED}",
        f"squawk.daemon.server.lifecycle.reload: {policy}: "
        f"profiles.default.retryable_statuses (line 5): 403 {NEVER_RETRIED}",
    ]


def test_a_reload_keeps_each_upstreams_state_and_drops_what_no_longer_means_the_same() -> None:
    def policy(extra: str = "", window: str = "60s") -> Policy:
        text = f"""profiles:
  default:
    circuit_breaker: {{minimum_calls: 100, window: {window}}}
{extra}"""
        return parse_config(text).policy

    first = policy("  batch: {base: default}\n")
    upstreams = Upstreams(first, clock=lambda: 1000.0)
    failed = Outcome(success=False, http_status=503)
    for name in ("default", "batch"):
        for _ in range(3):
            upstreams.record(first.profile(name), "api", failed)
    assert [v.snapshot.calls for v in upstreams.views()] == [3, 3]
    # The same window: the counts go on. The `batch` profile is gone, and its key with it.
    upstreams.use_policy(policy())
    assert [(v.profile, v.snapshot.calls) for v in upstreams.views()] == [("default", 3)]
    # A window of another length: its buckets' numbers mean other times, so it starts empty.
    upstreams.use_policy(policy(window="30s"))
    assert [v.snapshot.calls for v in upstreams.views()] == [0]


def wait_for(port: int, result: str, count: int, what: str) -> None:
    deadline = time.monotonic() + 15
    while reloads(port)[result] < count:
        assert time.monotonic() < deadline, f"{what}: no {result} reload seen"
        time.sleep(0.02)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


REFUSED: list[tuple[str, Callable[[Path], object], str]] = [
    # (case, what is put at the path, what the log line says)
    ("empty", lambda p: p.write_text(""), "the file is empty"),
    ("only-comments", lambda p: p.write_text("# soon\n"), "the file is empty"),
    ("deep-nesting", lambda p: p.write_text("[" * 5000), "nested deeper than 32 levels"),
    (
        "huge-duration",
        lambda p: p.write_text(
            "profiles:\n  default:\n    backoff: {max_delay: 1" + "0" * 20 + "h}\n"
        ),
        "is longer than any duration can be",
    ),
    ("fifo", _fifo, "not a regular file (a FIFO)"),
]


def test_a_reload_refuses_what_it_cannot_use_and_the_watch_goes_on(tmp_path: Path) -> None:
    """Each file is swapped in by a rename; after each refusal a valid file
    still reloads (the watch used to die on the parser's exception, and a
    FIFO blocked every later reload and the exit)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY_A)
    port = free_port()
    daemon = start_daemon(
        "--policy", str(policy), "--policy-poll", "0.05", "--metrics-listen", f"127.0.0.1:{port}"
    )
    try:
        for i, (case, put, _) in enumerate(REFUSED):
            swap = tmp_path / f"swap-{i}"
            put(swap)
            os.replace(swap, policy)
            wait_for(port, "invalid", i + 1, case)
            policy.unlink()
            policy.write_text(POLICY_B if i % 2 == 0 else POLICY_A)
            daemon.process.send_signal(signal.SIGHUP)
            wait_for(port, "applied", i + 1, f"after {case}")
            with grpc.insecure_channel(daemon.target) as channel:
                reply = pb_grpc.PolicyServiceStub(channel).DecideRetry(
                    pb.DecideRetryRequest(attempt=3, http_status=503), timeout=5
                )
            assert (reply.action, reply.delay.ToMilliseconds()) == ANSWERS[
                "B" if i % 2 == 0 else "A"
            ][3], case
        assert reloads(port)["invalid"] == len(REFUSED)
    finally:
        daemon.process.terminate()
        code = daemon.process.wait(timeout=15)  # a FIFO used to keep it from exiting
        log = daemon.output()
        daemon.log.close()
    assert code == 0
    for case, _, message in REFUSED:
        assert message in log, case
    assert "Traceback" not in log


def test_an_empty_file_reloads_when_the_file_was_empty_at_start(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("")
    port = free_port()
    daemon = start_daemon(
        "--policy", str(policy), "--policy-poll", "3600", "--metrics-listen", f"127.0.0.1:{port}"
    )
    try:
        policy.write_text("# the policy comes later\n")
        daemon.process.send_signal(signal.SIGHUP)
        wait_for(port, "applied", 1, "comments only")
        assert reloads(port)["invalid"] == 0
    finally:
        daemon.stop()


class _Inotify:
    """Linux inotify, to see when the daemon has read the file (IN_CLOSE_NOWRITE)."""

    IN_CLOSE_NOWRITE = 0x10

    def __init__(self, path: Path) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.inotify_init()
        assert self.fd >= 0
        assert self._libc.inotify_add_watch(self.fd, bytes(path), self.IN_CLOSE_NOWRITE) >= 0

    def wait_read(self, timeout_s: float = 15) -> None:
        ready, _, _ = select.select([self.fd], [], [], timeout_s)
        assert ready, "the daemon never read the file"
        os.read(self.fd, 4096)

    def close(self) -> None:
        os.close(self.fd)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")
def test_a_file_rewritten_in_place_is_applied_only_once_it_is_whole(tmp_path: Path) -> None:
    """Truncate, write the first half, and finish the file once the daemon
    has read the half: the half (valid YAML: POLICY_B without its backoff)
    must never be applied; the whole file is."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY_A)
    half, rest = POLICY_B.split("    backoff:")
    port = free_port()
    daemon = start_daemon(
        "--policy", str(policy), "--policy-poll", "3600", "--metrics-listen", f"127.0.0.1:{port}"
    )
    watch = _Inotify(policy)
    try:
        with policy.open("r+") as file:
            file.truncate()
            file.write(half)
            file.flush()
            daemon.process.send_signal(signal.SIGHUP)
            watch.wait_read()
            file.write("    backoff:" + rest)
        wait_for(port, "applied", 1, "the whole file")
        time.sleep(1)  # any later reload of a half would be counted by now
        with grpc.insecure_channel(daemon.target) as channel:
            reply = pb_grpc.PolicyServiceStub(channel).DecideRetry(
                pb.DecideRetryRequest(attempt=3, http_status=503), timeout=5
            )
        assert (reply.action, reply.delay.ToMilliseconds()) == ANSWERS["B"][3]
        assert reloads(port)["applied"] == 1
    finally:
        watch.close()
        daemon.stop()


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_sighup_of_an_unchanged_large_file_parses_nothing(tmp_path: Path) -> None:
    """A 1 MiB file used to be parsed again at each SIGHUP (seconds of CPU
    each, health checks waiting behind it): the hash of unchanged content
    skips the parse. Generous bounds on the daemon's CPU time and on health's
    answers meanwhile."""
    policy = tmp_path / "policy.yaml"
    entries = "".join(
        f"      upstream-{i:05d}-{'x' * 80}:\n        circuit_breaker: {{open_for: 10s}}\n"
        for i in range(7000)
    )
    policy.write_text("profiles:\n  default:\n    upstreams:\n" + entries)
    assert policy.stat().st_size > 900_000
    port = free_port()
    daemon = start_daemon(
        "--policy", str(policy), "--policy-poll", "3600", "--metrics-listen", f"127.0.0.1:{port}"
    )
    waits: list[float] = []
    stop = threading.Event()

    def check_health() -> None:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while not stop.is_set():
                started = time.monotonic()
                stub.Check(health_pb2.HealthCheckRequest(), timeout=5)  # type: ignore[attr-defined]
                waits.append(time.monotonic() - started)
                time.sleep(0.01)

    checker = threading.Thread(target=check_health)
    try:
        checker.start()
        before = _cpu_s(daemon.process.pid)
        for n in range(1, 4):
            daemon.process.send_signal(signal.SIGHUP)
            wait_for(port, "unchanged", n, f"SIGHUP {n}")
        # One parse of this file costs several seconds of CPU.
        assert _cpu_s(daemon.process.pid) - before < 1.0
    finally:
        stop.set()
        checker.join(timeout=10)
        daemon.stop()
    # Generous: a re-parse held health checks for half a second and more.
    assert waits and max(waits) < 0.5


BODY = json.dumps({"success": False, "error": {"message": "status " * 40}}).encode()


def test_a_batch_is_answered_from_one_policy_whatever_reloads_meanwhile(tmp_path: Path) -> None:
    """A SIGHUP sent while each batch of 10,000 runs: every batch is
    wholly A's or wholly B's (a reload between two slices of a batch used to
    answer the rest of it from the new policy)."""
    policy = tmp_path / "policy.yaml"
    a, b = (p.replace(BREAKER, "circuit_breaker: {enabled: false}") for p in (POLICY_A, POLICY_B))
    policy.write_text(a)
    port = free_port()
    daemon = start_daemon(
        "--policy", str(policy), "--policy-poll", "3600", "--metrics-listen", f"127.0.0.1:{port}"
    )
    mixed, seen = [], set()
    # Ten thousand answers with their classifications outgrow gRPC's default
    # 4 MiB receive limit; a caller of such batches raises it.
    options = [("grpc.max_receive_message_length", 64 << 20)]
    try:
        with grpc.insecure_channel(daemon.target, options=options) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            for n in range(12):
                swap = tmp_path / "swap.yaml"
                swap.write_text(b if n % 2 == 0 else a)
                os.replace(swap, policy)
                # Each item an upstream's state to update and a body to
                # parse and redact, so the batch runs for most of a second
                # (the reload waits for the file to read the same twice).
                # The same 10,000 names each time, with no breaker to open:
                # new ones would overflow the registry after the first batch.
                batch = pb.DecideRetryBatchRequest(
                    requests=[
                        pb.DecideRetryRequest(
                            attempt=1, http_status=503, response_body=BODY, upstream=f"u{i}"
                        )
                        for i in range(MAX_BATCH)
                    ]
                )
                future = stub.DecideRetryBatch.future(batch, timeout=60)
                time.sleep(0.15)  # the batch is under way
                daemon.process.send_signal(signal.SIGHUP)
                delays = {r.decision.delay.ToMilliseconds() for r in future.result().results}
                seen |= delays
                if len(delays) != 1:
                    mixed.append((n, sorted(delays)))
                wait_for(port, "applied", n + 1, f"batch {n}")
    finally:
        daemon.stop()
    assert mixed == []
    assert seen == {100, 300}  # the reloads did happen


def test_a_parser_failure_nobody_foresaw_is_logged_and_the_watch_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The parser raising what it should not (a RecursionError once killed
    the polling watch for good, silently): refused, logged with its
    traceback, and the next change still reloads."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY_A)
    calls = []

    def failing_once(*args: object) -> Config:
        calls.append(args)
        if len(calls) == 1:
            raise RecursionError("maximum recursion depth exceeded")
        return load_config(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(reload_module, "load_config", failing_once)
    counted: list[str] = []
    applied: list[str] = []

    async def run() -> None:
        watch = PolicyWatch(
            str(policy),
            parse_config(POLICY_A),
            policy_hash(POLICY_A.encode()),
            lambda config, digest: applied.append(digest),
            counted.append,
            poll_s=0.01,
            settle_s=0.01,
        )
        task = asyncio.create_task(watch.watch())
        for reloads_seen, text in enumerate((POLICY_B, POLICY_B + "# again\n"), 1):
            policy.write_text(text)
            for _ in range(1000):  # 10 s at most
                if len(counted) == reloads_seen:
                    break
                await asyncio.sleep(0.01)
        assert not task.done()  # the watch goes on
        task.cancel()

    with caplog.at_level(logging.ERROR):
        asyncio.run(run())
    assert counted == ["invalid", "applied"]
    assert applied == [policy_hash((POLICY_B + "# again\n").encode())]
    assert "policy reload (the file changed) failed, keeping" in caplog.text
    assert "RecursionError" in caplog.text


@pytest.mark.skipif(not Path("/proc/uptime").is_file(), reason="needs /proc")
def test_a_file_that_never_settles_is_refused_and_tried_again_at_the_next_poll(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """/proc/uptime, a regular file whose content changes every 10 ms, read
    20 ms apart: never two equal reads, so never parsed."""
    counted: list[str] = []
    watch = PolicyWatch(
        "/proc/uptime",
        parse_config(POLICY_A),
        policy_hash(POLICY_A.encode()),
        lambda config, digest: pytest.fail("applied"),
        counted.append,
        settle_s=0.02,
    )
    with caplog.at_level(logging.ERROR):
        asyncio.run(watch.reload("SIGHUP"))
    assert counted == ["invalid"]
    assert "/proc/uptime: still changing after 8 reads 0.02s apart" in caplog.text


RATED = "profiles:\n  default:\n    upstreams:\n      api:\n        rate_limit: {{rate: {}}}\n"


def test_a_reload_with_a_tiny_rate_fixed_seconds_later_leaves_the_upstream_open(
    tmp_path: Path,
) -> None:
    # `rate: 100`, then a typo (`rate: 0.0000116`, a call a day) whose pace
    # grants one call, fixed 5 s later: the typo's call is one slot of the
    # 100/s back in force (10 ms), so 20 calls asked one after another all
    # start within the 1 s queue (200 ms of slots), not one in a day.
    policy = tmp_path / "policy.yaml"
    policy.write_text(RATED.format(100))
    port = free_port()
    daemon = start_daemon(
        "--policy", str(policy), "--policy-poll", "3600", "--metrics-listen", f"127.0.0.1:{port}"
    )

    def reload_to(rate: str, applied: int) -> None:
        policy.write_text(RATED.format(rate))
        daemon.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while reloads(port)["applied"] < applied:
            assert time.monotonic() < deadline, "SIGHUP did not reload"
            time.sleep(0.02)

    try:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            assert stub.Admit(pb.AdmitRequest(upstream="api"), timeout=5).allowed
            reload_to("0.0000116", 1)
            time.sleep(0.05)  # the 100/s slot has passed: the typo's pace grants
            assert stub.Admit(pb.AdmitRequest(upstream="api"), timeout=5).allowed
            assert not stub.Admit(pb.AdmitRequest(upstream="api"), timeout=5).allowed
            time.sleep(5)
            reload_to("100", 2)
            replies = [stub.Admit(pb.AdmitRequest(upstream="api"), timeout=5) for _ in range(20)]
        assert [r.allowed for r in replies] == [True] * 20
    finally:
        daemon.stop()
