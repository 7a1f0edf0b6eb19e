"""`squawk events` against a real daemon: the history a line an event, with
each change's cause; --json for scripts; --follow as tail -f, ended by
Ctrl-C without a traceback; filters; a name that cannot forge a line."""

from __future__ import annotations

import json
import os
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
        s = pb_grpc.PolicyServiceStub(channel)
        failed = [pb.Outcome(upstream="tripping", http_status=503) for _ in range(4)]
        s.ReportOutcome(pb.ReportOutcomeRequest(outcomes=failed), timeout=10)
        yield s


def _report(stub: pb_grpc.PolicyServiceStub, *outcomes: pb.Outcome) -> None:
    stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=outcomes), timeout=10)


def test_each_event_is_a_line_with_its_change_and_cause(
    pod: Daemon, stub: pb_grpc.PolicyServiceStub
) -> None:
    done = squawk("events", "--target", pod.target, "--upstream", "tripping")
    assert (done.returncode, done.stderr) == (0, "")
    (line,) = done.stdout.splitlines()
    stamp, number, kind, profile, name, *rest = line.split(" ")
    assert stamp.startswith("20") and stamp.endswith("Z") and number.startswith("#")
    assert (kind, profile, name) == ("breaker", "default", "tripping")
    change, _, cause = " ".join(rest).partition(": ")
    assert change.startswith("CLOSED -> OPEN (until ")
    assert cause == (
        "4 of 4 calls in the window failed (100%): at or over failure_ratio 50% "
        "with minimum_calls 4; last: HTTP 503"
    )


def test_json_gives_each_event_as_the_rpc_does(
    pod: Daemon, stub: pb_grpc.PolicyServiceStub
) -> None:
    _report(stub, pb.Outcome(upstream="json-busy", http_status=429, headers={"retry-after": "7"}))
    done = squawk("events", "--target", pod.target, "--json", "--upstream", "json-busy")
    assert done.returncode == 0, done.stderr
    (event,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert event["kind"] == "EVENT_KIND_COOL_DOWN"
    assert (event["after"], event["cause"]) == (
        "cooling for 7 s",
        "HTTP 429 (throttled), Retry-After 7 s",
    )
    assert event["until"] > event["time"]


def test_a_name_cannot_forge_a_line(pod: Daemon, stub: pb_grpc.PolicyServiceStub) -> None:
    forged = "x\n2099-01-01T00:00:00.000Z #1 breaker default fake CLOSED -> OPEN"
    _report(stub, pb.Outcome(upstream=forged, http_status=503, headers={"retry-after": "3"}))
    done = squawk("events", "--target", pod.target)
    assert done.returncode == 0, done.stderr
    assert not any(line.startswith("2099") for line in done.stdout.splitlines())
    assert "x\\n2099" in done.stdout


def test_follow_prints_new_events_as_they_come_until_ctrl_c(
    pod: Daemon, stub: pb_grpc.PolicyServiceStub
) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SQUAWK_")}
    following = subprocess.Popen(
        [*SQUAWK, "events", "--target", pod.target, "--follow", "--upstream", "later"],
        cwd=ROOT,
        env=clean,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert following.stdout is not None
        _report(stub, pb.Outcome(upstream="later", http_status=429, headers={"retry-after": "4"}))
        # Read until the event's line: a read waits at most one poll (1 s).
        line = following.stdout.readline()
        assert " cool_down default later cooling for 4 s (until " in line, line
        following.send_signal(signal.SIGINT)
        _, err = following.communicate(timeout=30)
    finally:
        if following.poll() is None:
            following.kill()
            following.wait()
    assert (following.returncode, err) == (0, ""), err


def test_an_unknown_profile_is_refused_by_name(pod: Daemon) -> None:
    done = squawk("events", "--target", pod.target, "--profile", "nope")
    assert done.returncode == 2
    assert done.stderr.startswith("squawk: INVALID_ARGUMENT: profile:"), done.stderr


def test_explain_shows_a_refusal_its_state_and_the_events_before_it(
    pod: Daemon, stub: pb_grpc.PolicyServiceStub
) -> None:
    refused = stub.Admit(pb.AdmitRequest(upstream="tripping"), timeout=10)
    assert not refused.allowed and refused.decision_id
    done = squawk("explain", "--target", pod.target, refused.decision_id)
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"decision {refused.decision_id}: Admit refused at 20")
    assert lines[1:4] == [
        "upstream: default tripping",
        "reason: CIRCUIT_OPEN",
        f"  {refused.explanation}",
    ]
    assert lines[4] == "state then: breaker OPEN, pace none"
    assert lines[5] == "events before it:"
    assert " breaker default tripping CLOSED -> OPEN (until " in lines[6]


def test_explain_of_an_id_not_kept_says_so(pod: Daemon) -> None:
    done = squawk("explain", "--target", pod.target, "000000-9")
    assert done.returncode == 1
    assert done.stderr.startswith("squawk: NOT_FOUND: decision_id: '000000-9' is not kept")
