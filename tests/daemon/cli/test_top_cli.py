"""`squawk top`: the live view. Its frame (rows with trouble first, rates
as the counters' change over the time between refreshes, the latest events
underneath) from hand-made states; then the real command against a daemon
three executors report to, plain into a pipe, and on a terminal, where
keys sort, filter and quit; and what each refresh asks the daemon."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from conftest import ROOT, SQUAWK, Daemon, start_daemon
from squawk.daemon.cli import _parser
from squawk.daemon.top import Last, frame, sparkline, top
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

POLICY = """\
profiles:
  default:
    upstreams:
      tripping:
        circuit_breaker: {minimum_calls: 4, failure_ratio: 0.5, window: 60s, open_for: 60s}
"""


def _state(
    name: str, *, shed: int = 0, throttled: int = 0, near: int = 0, open_: bool = False
) -> pb.UpstreamState:
    return pb.UpstreamState(
        profile="default",
        upstream=name,
        breaker_state=pb.BREAKER_STATE_OPEN if open_ else pb.BREAKER_STATE_CLOSED,
        shed=shed,
        throttled=throttled,
        near_limit=near,
        pace_source=pb.PACE_SOURCE_NONE,
    )


def _rows(text: str) -> list[list[str]]:
    table = text.split("\n\nLATEST EVENTS", 1)[0]
    return [line.split() for line in table.splitlines()[1:]]


def _named(text: str) -> dict[str, dict[str, str]]:
    """The table's rows by upstream, each cell by its column's name."""
    table = text.split("\n\nLATEST EVENTS", 1)[0].splitlines()
    head = table[0].split()
    return {
        cells[1]: dict(zip(head, cells, strict=True)) for cells in (r.split() for r in table[1:])
    }


def test_a_frame_puts_trouble_first_and_reads_rates_over_the_time_between() -> None:
    states = [_state("calm"), _state("shedding", shed=10), _state("open", open_=True)]
    first = frame(states, [], {}, now=100.0)
    # The first refresh has no rate to show; the open breaker leads.
    assert [r[1] for r in _rows(first.text)] == ["open", "calm", "shedding"]
    assert {r["NEAR/S"] for r in _named(first.text).values()} == {"-"}
    later = [_state("calm"), _state("shedding", shed=40, throttled=5), _state("open", open_=True)]
    second = frame(later, [], first.seen, now=102.0, sort="shed")
    # 30 shed and 5 throttled over the 2 s between the refreshes.
    named = _named(second.text)["shedding"]
    assert [named[c] for c in ("PACED/S", "SHED/S", "THROTTLED/S", "NEAR/S")] == [
        "0",
        "15",
        "2.5",
        "0",
    ]
    assert [r[1] for r in _rows(second.text)] == ["shedding", "open", "calm"]
    only = frame(later, [], first.seen, now=102.0, troubled_only=True)
    assert [r[1] for r in _rows(only.text)] == ["open", "shedding"]
    assert "LATEST EVENTS\n(none yet)" in only.text


def test_answers_near_the_quotas_limit_are_trouble() -> None:
    first = frame([_state("a"), _state("nearly", near=3)], [], {}, now=10.0)
    second = frame([_state("a"), _state("nearly", near=7)], [], first.seen, now=12.0)
    rows = _rows(second.text)
    # 4 answers near the limit over 2 s: NEAR/S 2, and the row leads.
    assert [r[1] for r in rows] == ["nearly", "a"]
    named = _named(second.text)
    assert (named["nearly"]["NEAR/S"], named["a"]["NEAR/S"]) == ("2", "0")


def test_a_sparkline_scales_each_ten_seconds_to_the_largest() -> None:
    # Succeeded grows by 0, 1, ..., 11 in the twelve ten-second stretches
    # of the last two minutes; throttled by 5 in the last one alone.
    total, history = 0, [(0.0, 0, 0)]
    for i in range(12):
        total += i
        history.append((10.0 * (i + 1), total, 5 if i == 11 else 0))
    shown = tuple(history)
    # Eight heights: a stretch's count x 7 // the largest (11).
    assert sparkline(shown, 120.0, 1) == "▁▁▂▂▃▄▄▅▆▆▇█"
    assert sparkline(shown, 120.0, 2) == "▁▁▁▁▁▁▁▁▁▁▁█"
    # Before the view's first reading, dots.
    assert sparkline(shown[6:], 120.0, 1) == "······▄▅▆▆▇█"


def test_the_admitted_rate_and_the_sparklines_come_with_the_row() -> None:
    calm = pb.UpstreamState(profile="default", upstream="calm", admitted=100, succeeded=120)
    history = tuple((float(t), t, 0) for t in range(0, 111, 10))
    seen = {("default", "calm"): Last(0, 0, 0, 0, 80, 118.0, history)}
    shown = frame([calm], [], seen, now=120.0)
    header, row = shown.text.splitlines()[:2]
    cells = dict(zip(header.split(), row.split(), strict=True))
    assert cells["ADMITTED/S"] == "10"  # 20 admitted over the 2 s between
    assert cells["OK/2MIN"] == "████████████" and cells["429/2MIN"] == "▁▁▁▁▁▁▁▁▁▁▁▁"
    # Later refreshes carry the history on, a sample a second at most.
    kept = shown.seen
    for now in (120.5, 120.7):
        kept = frame([calm], [], kept, now=now).seen
    later = kept[("default", "calm")].history
    assert [h[0] for h in later[-3:]] == [110.0, 120.0, 120.7]


def test_a_cool_down_is_trouble() -> None:
    cooling = _state("cooling")
    cooling.cool_down_left.CopyFrom(Duration(seconds=5))
    shown = frame([_state("a"), cooling], [], {}, now=1.0)
    assert [r[1] for r in _rows(shown.text)] == ["cooling", "a"]


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    path = tmp_path_factory.mktemp("policy") / "policy.yaml"
    path.write_text(POLICY)
    d = start_daemon("--policy", str(path))
    with grpc.insecure_channel(d.target) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)
        failed = [pb.Outcome(upstream="tripping", http_status=503) for _ in range(4)]
        stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=failed), timeout=10)
    yield d
    d.stop()


def _executors(target: str, stop: threading.Event) -> list[threading.Thread]:
    """Three executors: two report successes, one throttles on `busy`."""

    def run(outcome: pb.Outcome) -> None:
        with grpc.insecure_channel(target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            while not stop.is_set():
                stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[outcome]), timeout=10)
                time.sleep(0.01)

    outcomes = [
        pb.Outcome(upstream="steady", success=True),
        pb.Outcome(upstream="steady", success=True),
        pb.Outcome(upstream="busy", http_status=429),
    ]
    threads = [threading.Thread(target=run, args=(o,)) for o in outcomes]
    for t in threads:
        t.start()
    return threads


def test_into_a_pipe_each_refresh_is_a_plain_block_with_its_rates(pod: Daemon) -> None:
    stop = threading.Event()
    threads = _executors(pod.target, stop)
    try:
        done = subprocess.run(
            [*SQUAWK, "top", "--target", pod.target, "--interval", "0.5", "--count", "3"],
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if not k.startswith("SQUAWK_")},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
    assert (done.returncode, done.stderr) == (0, "")
    assert "\x1b" not in done.stdout
    blocks = done.stdout.split("\n\n# ")
    assert len(blocks) == 3
    last = blocks[-1]
    assert last.splitlines()[0].startswith("every 0.5s, ") and "sorted by name" in last
    rows = {r[1]: r for r in _rows(last.split("\n", 1)[1])}
    # The open breaker and the throttling upstream lead; busy throttles each second.
    assert list(rows)[:2] == ["tripping", "busy"] or list(rows)[:2] == ["busy", "tripping"]
    assert rows["tripping"][2] == "OPEN"
    named = _named(last.split("\n", 1)[1])
    assert float(named["busy"]["THROTTLED/S"]) > 0 and named["steady"]["THROTTLED/S"] == "0"
    assert " breaker default tripping CLOSED -> OPEN (until " in last


def test_on_a_terminal_keys_sort_filter_and_quit(pod: Daemon) -> None:
    main, term = pty.openpty()
    process = subprocess.Popen(
        [*SQUAWK, "top", "--target", pod.target, "--interval", "0.3"],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("SQUAWK_")},
        stdin=term,
        stdout=term,
        stderr=subprocess.PIPE,
    )
    os.close(term)
    shown = b""

    def read_until(text: bytes, seconds: float = 20.0) -> None:
        nonlocal shown
        end = time.monotonic() + seconds
        while text not in shown and time.monotonic() < end:
            ready, _, _ = select.select([main], [], [], 0.2)
            if ready:
                shown += os.read(main, 65536)
        assert text in shown, shown[-2000:]

    try:
        read_until(b"sorted by name (s: sort, f: trouble only, q: quit)")
        os.write(main, b"s")
        read_until(b"sorted by shed")
        os.write(main, b"f")
        read_until(b"f: every row, q: quit)")
        os.write(main, b"q")
        _, err = process.communicate(timeout=30)
    finally:
        os.close(main)
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert (process.returncode, err) == (0, b"")
    assert shown.count(b"\x1b[H\x1b[2J") >= 3


_REAL_STUB = pb_grpc.PolicyServiceStub
_CALLS: list[str] = []


class _CountingStub:
    """The real stub, counting the RPCs top sends."""

    def __init__(self, channel: grpc.Channel) -> None:
        self._stub = _REAL_STUB(channel)

    def __getattr__(self, name: str) -> Any:
        _CALLS.append(name)
        return getattr(self._stub, name)


class _Screen(io.StringIO):
    """top's output; a cool-down begins as its first refresh is shown."""

    def __init__(self, target: str) -> None:
        super().__init__()
        self._target = target

    def write(self, text: str) -> int:
        if not self.tell():
            with grpc.insecure_channel(self._target) as channel:
                _REAL_STUB(channel).ReportOutcome(
                    pb.ReportOutcomeRequest(
                        outcomes=[
                            pb.Outcome(
                                upstream="top-new", http_status=429, headers={"retry-after": "9"}
                            )
                        ]
                    ),
                    timeout=5,
                )
        return super().write(text)


def test_a_refresh_asks_for_events_only_when_there_are_new_ones(
    pod: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pb_grpc, "PolicyServiceStub", _CountingStub)
    _CALLS.clear()
    args = _parser().parse_args(
        ["top", "--target", pod.target, "--interval", "0.1", "--count", "4"]
    )
    out = _Screen(pod.target)
    assert top(args, out, io.StringIO()) == 0
    # The first refresh reads the history; the second the cool-down begun
    # after it; the two after that, with nothing new, GetUpstreams alone.
    assert _CALLS == ["GetUpstreams", "GetEvents"] * 2 + ["GetUpstreams"] * 2
    blocks = out.getvalue().split("\n\n# ")
    assert len(blocks) == 4
    assert "top-new" not in blocks[0].split("LATEST EVENTS", 1)[1]
    assert all(" cool_down default top-new " in b.split("LATEST EVENTS", 1)[1] for b in blocks[1:])
