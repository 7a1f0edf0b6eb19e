"""The fleet's view beside the pod's: GetUpstreams' include_fleet, the
clients' option and `squawk upstreams --fleet`.

The view is only ever read from the store's memory (its last sync), and
only when asked. With the memory store there is none, and the CLI says so
in one line; with the Redis store, two daemons' failures show in either
one's fleet view while each pod's own columns keep its own state.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from conftest import Daemon, free_port, squawk, start_daemon
from squawk.daemon.config import Config, load_policy
from squawk.daemon.server.lifecycle.app import Daemon as InProcessDaemon
from squawk.daemon.settings import ServeSettings
from squawk.daemon.upstream_table import NO_FLEET_VIEW
from squawk.policy import BreakerState
from squawk.policy.fleet import FleetSnapshot
from squawk.policy.limits import MAX_NAME_CHARS, MAX_PROFILE_CHARS, MAX_UPSTREAMS_PAGE
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc
from squawk_client import AsyncSquawkClient, SquawkClient

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench.redis_server import RedisServer

POD_COLUMNS = ["PROFILE", "UPSTREAM", "BREAKER", "FOR", "CALLS", "FAILURES", "RETRIES"]
FLEET_COLUMNS = [
    "FLEET",
    "LEFT",
    "F-CALLS",
    "F-FAILURES",
    "FAILING-PODS",
    "PROBES",
    "F-RETRIES",
    "F-COOL-DOWN",
    "SHARE",
    "PODS",
    "AGE",
]


def report(target: str, upstream: str, *statuses: int) -> None:
    with grpc.insecure_channel(target) as channel:
        outcomes = [pb.Outcome(upstream=upstream, http_status=s, success=s < 400) for s in statuses]
        reply = pb_grpc.PolicyServiceStub(channel).ReportOutcome(
            pb.ReportOutcomeRequest(outcomes=outcomes), timeout=5
        )
    assert reply.recorded == len(statuses)


def listed(target: str, upstream: str, include_fleet: bool) -> pb.UpstreamState:
    with grpc.insecure_channel(target) as channel:
        reply = pb_grpc.PolicyServiceStub(channel).GetUpstreams(
            pb.GetUpstreamsRequest(upstream=upstream, include_fleet=include_fleet), timeout=5
        )
    (state,) = reply.upstreams
    return state


def table(target: str, *flags: str) -> dict[str, dict[str, str]]:
    """`squawk upstreams` as {upstream: {column: cell}}, and "" for the
    header's own row; a line under the table goes to the key "under"."""
    done = squawk("upstreams", "--target", target, *flags)
    assert done.returncode == 0, done.stderr
    header, *lines = done.stdout.splitlines()
    rows: dict[str, dict[str, str]] = {"": dict.fromkeys(header.split(), "")}
    for line in lines:
        if line.startswith("("):
            rows["under"] = {"": line}
            continue
        cells = dict(zip(header.split(), line.split(), strict=True))
        rows[cells["UPSTREAM"]] = cells
    return rows


def test_a_page_of_the_longest_rows_with_the_fleets_view_stays_under_2_mib() -> None:
    # Every number at its widest: a negative integer takes ten bytes, a
    # duration google.protobuf.Duration's longest.
    row = pb.UpstreamState(
        profile="😀" * MAX_PROFILE_CHARS,
        upstream="😀" * MAX_NAME_CHARS,
        breaker_state=pb.BREAKER_STATE_HALF_OPEN,
        pace_source=pb.PACE_SOURCE_LEARNED,
    )
    counts = (
        "window_calls",
        "window_failures",
        "concurrency_limit",
        "in_flight",
        "paced",
        "shed",
        "throttled",
    )
    fleet_counts = ("window_calls", "window_failures", "failing_pods", "probes", "retries_left")
    for message, names in ((row, counts), (row.fleet, (*fleet_counts, "pods"))):
        for name in names:
            setattr(message, name, -1)
    for name in ("budget_balance", "rate", "token_rate"):
        setattr(row, name, 1e300)
    row.fleet.breaker_state = pb.BREAKER_STATE_HALF_OPEN
    row.fleet.pace_share = 0.3
    widest = timedelta(seconds=315_576_000_000 - 1, microseconds=999_999)
    for d in (row.breaker_state_age, row.cool_down_left, row.queue_delay):
        d.FromTimedelta(widest)
    for d in (row.fleet.breaker_retry_after, row.fleet.cool_down_left, row.fleet.age):
        d.FromTimedelta(widest)
    page = pb.GetUpstreamsResponse(
        upstreams=[row] * MAX_UPSTREAMS_PAGE, truncated=True, next_page_token="9" * 18
    )
    assert page.ByteSize() < 2 << 20


def test_the_memory_store_has_no_fleet_view() -> None:
    daemon = start_daemon()
    try:
        report(daemon.target, "fleetless", 503)
        assert not listed(daemon.target, "fleetless", include_fleet=True).HasField("fleet")
        rows, pod_only = table(daemon.target, "--fleet"), table(daemon.target)
    finally:
        daemon.stop()
    # The pod's own columns, and one line saying there is nothing beside them.
    assert list(rows[""]) == list(pod_only[""])
    assert list(rows[""])[: len(POD_COLUMNS)] == POD_COLUMNS
    assert rows["fleetless"]["BREAKER"] == "CLOSED"
    assert rows["under"] == {"": NO_FLEET_VIEW}
    assert "under" not in pod_only


# What a store that has synced "flights" (and not "hotels") holds in memory.
SEEN = FleetSnapshot(
    breaker_state=BreakerState.OPEN,
    calls=0,
    failures=0,
    failing_pods=3,
    probes=0,
    breaker_retry_after=timedelta(seconds=1.5),
    cooldown_left=timedelta(seconds=4),
    retries_left=7,
    pace_share=0.25,
    pods=4,
    age=timedelta(milliseconds=40),
)
SEEN_WIRE = pb.FleetState(
    breaker_state=pb.BREAKER_STATE_OPEN,
    failing_pods=3,
    retries_left=7,
    pace_share=0.25,
    pods=4,
)
SEEN_WIRE.breaker_retry_after.FromTimedelta(timedelta(seconds=1.5))
SEEN_WIRE.cool_down_left.FromTimedelta(timedelta(seconds=4))
SEEN_WIRE.age.FromTimedelta(timedelta(milliseconds=40))
SEEN_CELLS = ["OPEN", "1.5s", "0", "0", "3", "0", "7", "4.0s", "0.25", "4", "0.040s"]


@contextmanager
def daemon_whose_store_has_seen(
    views: Callable[[str], dict[tuple[str, str], FleetSnapshot]],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[str]:
    """A daemon in this process, on a thread of its own, whose store's last
    sync read `views`: the seam the Redis store fills (the rest is real)."""
    target = f"127.0.0.1:{free_port()}"
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> InProcessDaemon:
        config = Config(load_policy(None, environ={}))
        started = InProcessDaemon(ServeSettings(config, (target,)))
        monkeypatch.setattr(started.store, "fleet_views", views)
        await started.start()
        return started

    started = asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    try:
        yield target
    finally:
        asyncio.run_coroutine_threadsafe(started.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_the_fleets_view_is_sent_only_when_asked_and_shown_beside_the_pods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def views(profile: str = "") -> dict[tuple[str, str], FleetSnapshot]:
        asked.append(profile)
        return {("default", "flights"): SEEN}

    with daemon_whose_store_has_seen(views, monkeypatch) as target:
        report(target, "flights", 503)
        report(target, "hotels", 200)
        assert not listed(target, "flights", include_fleet=False).HasField("fleet")
        assert asked == []  # not asked: the store is not even read
        assert listed(target, "flights", include_fleet=True).fleet == SEEN_WIRE
        assert not listed(target, "hotels", include_fleet=True).HasField("fleet")
        with SquawkClient(target, fallback=False) as client:
            assert [s.HasField("fleet") for s in client.get_upstreams()] == [False, False]
            states = client.get_upstreams(include_fleet=True)

        async def listed_async() -> list[pb.UpstreamState]:
            async with AsyncSquawkClient(target, fallback=False) as client:
                return await client.get_upstreams(include_fleet=True)

        for got in (states, asyncio.run(listed_async())):
            assert {s.upstream: s.fleet for s in got if s.HasField("fleet")} == {
                "flights": SEEN_WIRE
            }
        with grpc.insecure_channel(target) as channel:
            pb_grpc.PolicyServiceStub(channel).GetUpstreams(
                pb.GetUpstreamsRequest(profile="llm", include_fleet=True), timeout=5
            )
        assert asked[-1] == "llm"  # the store is asked for the profile listed
        pod_only, both = table(target), table(target, "--fleet")
    assert list(pod_only[""]) == list(both[""])[: -len(FLEET_COLUMNS)]
    assert list(both[""])[-len(FLEET_COLUMNS) :] == FLEET_COLUMNS
    # The pod saw one failure: its own breaker is CLOSED while the fleet's is OPEN.
    for rows in (pod_only, both):
        assert rows["flights"]["BREAKER"] == "CLOSED"
    assert [both["flights"][c] for c in FLEET_COLUMNS] == SEEN_CELLS
    assert [both["hotels"][c] for c in FLEET_COLUMNS] == ["-"] * len(FLEET_COLUMNS)
    assert "under" not in both


# Two pods; min_pods 2, so the fleet's breaker needs both pods' failures.
# open_for is long so that the view is read while the breaker is still open.
REDIS_POLICY = """
state:
  store: redis
  key_prefix: "view:"
  deadline: 250ms
  min_pods: 2
profiles:
  default:
    circuit_breaker: {minimum_calls: 4, failure_ratio: 0.5, window: 60s,
                      open_for: 60s, half_open_probes: 2, close_ratio: 0.5}
"""


def fleet_of(target: str, upstream: str, until: Callable[[pb.FleetState], bool]) -> pb.FleetState:
    """The pod's fleet view of `upstream` once `until` holds: a sync is
    about 100 ms away; wait a few seconds at most."""
    deadline = time.monotonic() + 5
    while True:
        state = listed(target, upstream, include_fleet=True)
        if state.HasField("fleet") and until(state.fleet):
            return state.fleet
        if time.monotonic() > deadline:
            raise AssertionError(f"no such fleet view of {upstream} within 5 s: {state}")
        time.sleep(0.05)


def test_two_pods_failures_show_in_the_fleets_view_and_each_pod_keeps_its_own(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(REDIS_POLICY)
    server = RedisServer().start()
    pods: list[Daemon] = []
    try:
        for name in ("pod-a", "pod-b"):
            env = {"SQUAWK_STATE_URL": server.url, "SQUAWK_STATE_POD": name}
            pods.append(start_daemon("--policy", str(policy), env=env))
        a, b = (pod.target for pod in pods)
        report(a, "flights", 503, 503, 503, 503)
        seen = fleet_of(a, "flights", lambda f: f.window_failures == 4)
        # One pod is no quorum: its own breaker opened, the fleet's did not.
        assert (seen.breaker_state, seen.failing_pods) == (pb.BREAKER_STATE_CLOSED, 1)
        assert listed(a, "flights", include_fleet=False).breaker_state == pb.BREAKER_STATE_OPEN
        report(b, "flights", 503)
        for target in (a, b):
            seen = fleet_of(target, "flights", lambda f: f.breaker_state == pb.BREAKER_STATE_OPEN)
            assert seen.failing_pods == 2
        # pod-b saw one failure: its own breaker is CLOSED, the fleet's OPEN.
        assert table(b)["flights"]["BREAKER"] == "CLOSED"
        both = table(b, "--fleet")["flights"]
        assert (both["BREAKER"], both["FLEET"], both["FAILING-PODS"]) == ("CLOSED", "OPEN", "2")
    finally:
        for pod in pods:
            pod.stop()
        server.stop()


def test_a_quiet_pod_shows_the_fleets_open_breaker_it_stopped_syncing(tmp_path: Path) -> None:
    # pod-c called once, then went quiet: past two seconds its store stops
    # syncing the name. The fleet's breaker opened after that, and pod-c's
    # listing showed no fleet view at all, saying it had never synced the
    # name. Asked, it reads the fleet's state again, and keeps the OPEN
    # breaker in view while it lasts.
    policy = tmp_path / "policy.yaml"
    policy.write_text(REDIS_POLICY)
    server = RedisServer().start()
    pods: list[Daemon] = []
    try:
        for name in ("pod-a", "pod-b", "pod-c"):
            env = {"SQUAWK_STATE_URL": server.url, "SQUAWK_STATE_POD": name}
            pods.append(start_daemon("--policy", str(policy), env=env))
        a, b, c = (pod.target for pod in pods)
        report(c, "quiet", 200)
        fleet_of(c, "quiet", lambda f: f.window_calls == 1)
        time.sleep(3)  # quiet past the two seconds a name is synced for
        report(a, "quiet", 503, 503, 503, 503)
        report(b, "quiet", 503)
        fleet_of(a, "quiet", lambda f: f.breaker_state == pb.BREAKER_STATE_OPEN)
        seen = fleet_of(c, "quiet", lambda f: f.breaker_state == pb.BREAKER_STATE_OPEN)
        assert seen.failing_pods == 2
        time.sleep(3)  # quiet again: the OPEN breaker stays in view
        assert listed(c, "quiet", include_fleet=True).fleet.breaker_state == pb.BREAKER_STATE_OPEN
        assert table(c, "--fleet")["quiet"]["FLEET"] == "OPEN"
    finally:
        for pod in pods:
            pod.stop()
        server.stop()
