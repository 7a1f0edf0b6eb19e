"""`squawk upstreams` against a real daemon: the throttles it counts, the
window behind an OPEN breaker, and `--watch`.

Users asked three things of the table: how often each upstream throttled
(429/529), why a breaker is OPEN (CALLS and FAILURES read 0 while it was:
an OPEN breaker records nothing), and to keep watching it without a shell
loop. One daemon runs a policy whose "tripping" upstream opens after 4
calls and stays open for a minute, longer than this module runs.
"""

from __future__ import annotations

import os
import pty
import signal
import subprocess
from collections.abc import Iterator

import grpc
import pytest

from conftest import ROOT, SQUAWK, Daemon, squawk, start_daemon
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

POLICY = """\
profiles:
  default:
    upstreams:
      tripping:
        circuit_breaker: {minimum_calls: 4, failure_ratio: 0.5, window: 60s, open_for: 60s}
"""


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    path = tmp_path_factory.mktemp("policy") / "policy.yaml"
    path.write_text(POLICY)
    d = start_daemon("--policy", str(path))
    yield d
    d.stop()


@pytest.fixture(scope="module")
def stub(pod: Daemon) -> Iterator[pb_grpc.PolicyServiceStub]:
    with grpc.insecure_channel(pod.target) as channel:
        yield pb_grpc.PolicyServiceStub(channel)


def _report(stub: pb_grpc.PolicyServiceStub, *outcomes: pb.Outcome) -> None:
    stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=outcomes), timeout=10)


def _table(pod: Daemon) -> dict[str, dict[str, str]]:
    """`squawk upstreams` once: each row by upstream name, cells by column."""
    done = squawk("upstreams", "--target", pod.target)
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    names = header.split()
    return {cells[1]: dict(zip(names, cells, strict=True)) for cells in map(str.split, rows)}


def test_each_upstream_shows_how_often_it_throttled(
    pod: Daemon, stub: pb_grpc.PolicyServiceStub
) -> None:
    name = "throttles"
    _report(
        stub,
        pb.Outcome(upstream=name, success=True),
        pb.Outcome(upstream=name, http_status=429),
        pb.Outcome(upstream=name, http_status=529),
        pb.Outcome(upstream=name, http_status=503),  # no wait hint: broken, not full
        pb.Outcome(upstream=name, http_status=429),
    )
    # A throttle DecideRetry was asked about counts too.
    decided = pb.DecideRetryRequest(attempt=1, http_status=429, upstream=name)
    stub.DecideRetry(decided, timeout=10)
    rows = _table(pod)
    assert rows[name]["THROTTLED"] == "4"
    assert rows["tripping"]["THROTTLED"] == "0"
    listed = stub.GetUpstreams(pb.GetUpstreamsRequest(upstream=name), timeout=10).upstreams
    assert [u.throttled for u in listed] == [4]


def test_an_open_breaker_shows_the_outcomes_that_opened_it(
    pod: Daemon, stub: pb_grpc.PolicyServiceStub
) -> None:
    # One success, then three failures: 3 of 4 >= 0.5 with 4 calls, OPEN.
    ok, failed = (
        pb.Outcome(upstream="tripping", success=True),
        pb.Outcome(upstream="tripping", http_status=503),
    )
    _report(stub, ok, failed, failed, failed)
    row = _table(pod)["tripping"]
    assert (row["BREAKER"], row["CALLS"], row["FAILURES"]) == ("OPEN", "4", "3")
    # Outcomes reported while it is OPEN describe the upstream before the
    # break: they are dropped, and the window that opened it stays shown.
    _report(stub, ok, ok)
    row = _table(pod)["tripping"]
    assert (row["BREAKER"], row["CALLS"], row["FAILURES"]) == ("OPEN", "4", "3")


def _watch(pod: Daemon, *flags: str) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SQUAWK_")}
    return subprocess.Popen(
        [*SQUAWK, "upstreams", "--target", pod.target, *flags],
        cwd=ROOT,
        env=clean,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_watch_into_a_pipe_appends_plain_tables_up_to_its_count(pod: Daemon) -> None:
    done = squawk("upstreams", "--target", pod.target, "--watch", "0.1", "--count", "3")
    assert (done.returncode, done.stderr) == (0, "")
    assert "\x1b" not in done.stdout  # no terminal codes into a file
    blocks = done.stdout.split("\n\n")
    assert blocks[-1] == ""
    tables = blocks[:-1]
    assert len(tables) == 3
    for block in tables:
        stamp, header, *_ = block.splitlines()
        assert stamp.startswith("# every 0.1s, ") and stamp.endswith(" UTC")
        assert header.split()[:2] == ["PROFILE", "UPSTREAM"]


def test_watch_shows_what_changed_at_each_refresh_until_ctrl_c(
    pod: Daemon, stub: pb_grpc.PolicyServiceStub
) -> None:
    watching = _watch(pod, "--watch", "0.2")
    try:
        assert watching.stdout is not None
        # Each refresh is flushed as it is printed: the first arrives
        # while the command still runs.
        first = watching.stdout.readline()
        assert first.startswith("# every 0.2s, ")
        _report(stub, pb.Outcome(upstream="appeared-while-watched", success=True))
        # A later refresh lists it (each line read is bounded by the
        # refresh interval; a few hundred refreshes is ample on any machine).
        for _ in range(5000):
            line = watching.stdout.readline()
            assert line, "the watch ended by itself"
            if "appeared-while-watched" in line:
                break
        else:
            pytest.fail("no refresh listed the new upstream")
        watching.send_signal(signal.SIGINT)
        _, err = watching.communicate(timeout=30)
    finally:
        if watching.poll() is None:
            watching.kill()
            watching.wait()
    # Ctrl-C is how a watch ends: no traceback, no error.
    assert (watching.returncode, err) == (0, "")


def test_watch_on_a_terminal_redraws_the_screen(pod: Daemon) -> None:
    main, term = pty.openpty()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SQUAWK_")}
    process = subprocess.Popen(
        [*SQUAWK, "upstreams", "--target", pod.target, "--watch", "0.1", "--count", "2"],
        cwd=ROOT,
        env=clean,
        stdout=term,
        stderr=subprocess.PIPE,
    )
    os.close(term)
    shown = b""
    try:
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the command ended and closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        _, err = process.communicate(timeout=30)
    finally:
        os.close(main)
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert (process.returncode, err) == (0, b"")
    text = shown.decode()
    # Two refreshes, each from a cleared screen, each saying how to stop.
    assert text.count("\x1b[H\x1b[2J") == 2
    assert text.count("(Ctrl-C to stop)") == 2
    assert text.count("PROFILE") == 2


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--watch", "0"], "argument --watch: must be seconds from 0.1 to 3600, got '0'"),
        (["--watch", "nan"], "argument --watch: must be seconds from 0.1 to 3600, got 'nan'"),
        (["--watch", "5000"], "argument --watch: must be seconds from 0.1 to 3600"),
        (["--watch", "--count", "0"], "argument --count: must be a whole number from 1 to"),
        (["--watch", "--count", "1e3"], "argument --count: must be a whole number from 1 to"),
        (["--count", "3"], "--count needs --watch"),
    ],
)
def test_a_bad_watch_flag_is_refused_naming_it(flags: list[str], said: str) -> None:
    done = squawk("upstreams", "--target", "127.0.0.1:1", *flags)
    assert done.returncode == 2
    assert said in done.stderr
    assert done.stdout == ""


def test_a_secret_given_as_a_flag_value_is_not_echoed() -> None:
    done = squawk("upstreams", "--target", "127.0.0.1:1", "--watch", "sk-" + "a" * 40)
    assert done.returncode == 2
    assert "argument --watch" in done.stderr
    assert "a" * 40 not in done.stderr


def test_help_names_watch_and_count() -> None:
    done = squawk("upstreams", "--help", env={"COLUMNS": "200"})
    assert "--watch [SECONDS]" in done.stdout and "--count N" in done.stdout
