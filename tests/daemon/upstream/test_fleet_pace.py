"""The fleet's pace: three daemons ("pods") and one real Redis-compatible
server on loopback divide one declared rate between them.

Each pod's executor asks Admit at a fixed rate of its own, whatever the
answers (an open loop, as requests arriving from users), and a granted
call starts at its answer's time plus its `wait`. The tests count starts
over windows of seconds, never time one answer. The margins come from the
rule (squawk.policy.fleet.share and docs/fleet.md): in steady state the
pods' shares read from one slot add up to 1, so the fleet's starts over a
window W are at most 1.05 R W (the issue's bound) plus one sync interval's
worth (a share is read up to one interval late) plus one start per pod (a
window's edge cuts one GCRA slot per pod). The lower bounds are looser: on
a busy machine a stalled executor asks late, and its pod's short queue
(a few slots, once overloaded) cannot make up what it did not ask for, so
they leave room for a stall of most of a second and still tell the rules
apart (a third of the rate from a half, the lease's share from the fallback).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from conftest import Daemon, start_daemon
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

# bench/ (the Redis server the fleet simulation shares) is at the root.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench.redis_server import RedisServer

RATE = 60.0  # the upstream's declared rate, calls/s, for the whole fleet
SYNC_S = 0.1  # state.sync's default
LEASE_S = 10 * SYNC_S  # a share holds this long without a new reading
FALLBACK = 0.75
POLICY = f"""
state:
  store: redis
  key_prefix: "pace:"
  deadline: 250ms
  fallback_share: {FALLBACK}
profiles:
  default:
    circuit_breaker: {{enabled: false}}
    rate_limit: {{rate: {RATE:g}}}
  unpaced:   # no rate declared: the fleet divides nothing
    circuit_breaker: {{enabled: false}}
"""


@dataclass
class Asker:
    """One pod's executor: Admits at `rate` a second from a thread until
    `until` (which may be moved earlier: the pod stops calling)."""

    daemon: Daemon
    upstream: str
    rate: float
    until: float
    profile: str = ""
    # Each Admit's deadline (None: none); 0 asks for a start at once only.
    deadline_s: float | None = None
    asks: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    thread: threading.Thread | None = None

    def start(self) -> Asker:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        gap, next_at = 1.0 / self.rate, time.monotonic()
        with grpc.insecure_channel(self.daemon.target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            while True:
                now = time.monotonic()
                if now >= self.until:
                    return
                if next_at > now:
                    time.sleep(next_at - now)
                next_at += gap
                request = pb.AdmitRequest(upstream=self.upstream, profile=self.profile)
                if self.deadline_s is not None:
                    request.deadline.FromTimedelta(timedelta(seconds=self.deadline_s))
                reply = stub.Admit(request, timeout=5)
                answered = time.monotonic()
                self.asks.append(answered)
                if reply.allowed:
                    self.starts.append(answered + reply.wait.ToTimedelta().total_seconds())

    def join(self) -> None:
        assert self.thread is not None
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()

    def started(self, begin: float, end: float) -> int:
        return sum(begin <= s < end for s in self.starts)

    def asked(self, begin: float, end: float) -> int:
        return sum(begin <= s < end for s in self.asks)


def most(window_s: float, pods: int, share: float = 1.0) -> float:
    """The most starts `pods` pods holding `share` of the rate together may
    make in a window (see the module docstring)."""
    return 1.05 * share * RATE * window_s + RATE * SYNC_S + pods


def ask(pods: list[Daemon], upstream: str, rates: list[float], for_s: float) -> list[Asker]:
    until = time.monotonic() + for_s
    return [
        Asker(pod, upstream, rate, until).start() for pod, rate in zip(pods, rates, strict=True)
    ]


def start_pods(url: str, policy: Path) -> list[Daemon]:
    return [
        start_daemon(
            "--policy", str(policy), env={"SQUAWK_STATE_URL": url, "SQUAWK_STATE_POD": f"pod-{i}"}
        )
        for i in range(3)
    ]


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pace") / "policy.yaml"
    path.write_text(POLICY)
    return path


@pytest.fixture(scope="module")
def pods(policy_file: Path) -> Iterator[list[Daemon]]:
    server = RedisServer().start()
    started = start_pods(server.url, policy_file)
    yield started
    for pod in started:
        pod.stop()
    server.stop()


def test_the_fleet_holds_one_rate_across_three_pods(pods: list[Daemon]) -> None:
    # Each pod asks 1.5 R: alone, each would start R.
    t0 = time.monotonic()
    askers = ask(pods, "even", [1.5 * RATE] * 3, for_s=6.0)
    for asker in askers:
        asker.join()
    begin, end = t0 + 2.0, t0 + 5.0  # after the first syncs; fed to the end
    counts = [a.started(begin, end) for a in askers]
    assert sum(counts) <= most(end - begin, 3), counts
    # The shares cover the rate, split evenly: each pod within a third +- 0.1.
    assert sum(counts) >= 0.75 * RATE * (end - begin), counts
    assert all(abs(c / sum(counts) - 1 / 3) <= 0.1 for c in counts), counts


def test_the_shares_follow_the_pods_demand(pods: list[Daemon]) -> None:
    # A pod's demand is what it starts: one asking 0.15 R starts all of it,
    # and the two asking 1.5 R split the rest, 0.425 R each.
    t0 = time.monotonic()
    askers = ask(pods, "uneven", [1.5 * RATE, 1.5 * RATE, 0.15 * RATE], for_s=6.0)
    for asker in askers:
        asker.join()
    begin, end = t0 + 2.0, t0 + 5.0
    counts = [a.started(begin, end) for a in askers]
    asked = [a.asked(begin, end) for a in askers]
    assert sum(counts) <= most(end - begin, 3), counts
    assert counts[2] >= 0.8 * asked[2], (counts, asked)
    assert all(c >= 0.36 * RATE * (end - begin) for c in counts[:2]), counts


def test_a_caller_spinning_on_admit_wins_no_share(pods: list[Daemon]) -> None:
    # Pod 1's one caller asks 500 times a second for a start at once
    # (deadline 0: refused whenever it would wait), pod 0's executor 0.9 R.
    # Pod 1's refusals start nothing, so they are no demand: pod 0 keeps
    # about half the rate (each pod starts its share: 0.5 R), not the
    # millionth its 500 refusals a second against its 0.5 R made it.
    t0 = time.monotonic()
    until = t0 + 6.0
    askers = [
        Asker(pods[0], "spun", 0.9 * RATE, until).start(),
        Asker(pods[1], "spun", 500.0, until, deadline_s=0.0).start(),
    ]
    for asker in askers:
        asker.join()
    begin, end = t0 + 2.0, t0 + 5.0
    counts = [a.started(begin, end) for a in askers]
    assert sum(counts) <= most(end - begin, 2), counts
    assert counts[0] >= 0.36 * RATE * (end - begin), counts


def test_when_one_pod_stops_calling_the_others_take_its_share(pods: list[Daemon]) -> None:
    t0 = time.monotonic()
    askers = ask(pods, "stopping", [RATE] * 3, for_s=9.0)
    time.sleep(3.0)
    stopped = time.monotonic()
    askers[0].until = stopped
    for asker in askers:
        asker.join()
    before = [a.started(t0 + 1.5, stopped) for a in askers[1:]]
    # The two left ask 2 R together: within a few syncs (its demand fades
    # over two intervals, a slot is two more) they start the whole rate.
    begin, end = stopped + 1.5, t0 + 8.0
    after = [a.started(begin, end) for a in askers[1:]]
    assert sum(after) <= most(end - begin, 2), after
    assert sum(after) >= 0.75 * RATE * (end - begin), (before, after)
    # Each of them was held to about a third before, and to about a half after.
    assert all(c <= most(stopped - t0 - 1.5, 1, share=0.45) for c in before), before
    assert all(c >= 0.36 * RATE * (end - begin) for c in after), after


def test_a_pod_that_loses_redis_keeps_its_share_for_the_lease_then_the_fallback(
    policy_file: Path,
) -> None:
    server = RedisServer().start()
    pods = start_pods(server.url, policy_file)
    try:
        askers = ask(pods, "lost", [1.5 * RATE] * 3, for_s=3.0 + 9.5)
        time.sleep(3.0)
        lost = time.monotonic()
        server.kill()
        for asker in askers:
            asker.join()
    finally:
        for pod in pods:
            pod.stop()
        server.stop()
    # The last reading came at most one interval before `lost`: the share
    # it leased holds until at least lost + LEASE_S - SYNC_S.
    leased = [a.started(lost + 0.1, lost + LEASE_S - SYNC_S) for a in askers]
    window = LEASE_S - SYNC_S - 0.1
    # About a third each; the fallback (0.75) or the whole rate would be far more.
    assert all(c <= most(window, 1, share=0.45) - RATE * SYNC_S for c in leased), leased
    # Once the lease is over (and the queue granted under it has drained),
    # each paces by fallback_share x R: the fleet runs over, by design. It
    # still does once the view itself is dropped, 5 s into the outage.
    for begin, end in ((lost + LEASE_S + 1.5, lost + 5.0), (lost + 5.5, lost + 9.0)):
        fallen = [a.started(begin, end) for a in askers]
        fallback = most(end - begin, 1, share=FALLBACK) - RATE * SYNC_S
        assert all(c <= fallback for c in fallen), (begin - lost, fallen)
        assert all(c >= 0.7 * FALLBACK * RATE * (end - begin) for c in fallen), fallen


def listed(pod: Daemon, upstream: str, profile: str = "") -> pb.UpstreamState | None:
    """The pod's row of `upstream` with the fleet's view beside it, once it
    has one: a pod reads the names it stopped syncing when asked, within a
    sync or two."""
    deadline = time.monotonic() + 5
    with grpc.insecure_channel(pod.target) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)
        while time.monotonic() < deadline:
            request = pb.GetUpstreamsRequest(upstream=upstream, profile=profile, include_fleet=True)
            (row,) = stub.GetUpstreams(request, timeout=5).upstreams
            if row.HasField("fleet"):
                return row
            time.sleep(0.05)
    return None


def test_the_listed_shares_add_up_across_the_pods_and_rate_means_the_same_on_each(
    pods: list[Daemon],
) -> None:
    # Each pod listed SHARE as the part it would pace by: a pod that asked
    # for nothing showed an equal part (a third here) beside two that
    # shared the whole rate, and an upstream without a rate showed parts of
    # a rate nobody divides. Now SHARE is each pod's part of the demand
    # (0 for a pod that asked none; the asking pods' add up to 1), 1 where
    # nothing is divided, and RATE x SHARE is each pod's own pace.
    quiet = pods[2]
    for profile in ("", "unpaced"):
        with grpc.insecure_channel(quiet.target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            stub.Admit(pb.AdmitRequest(upstream="listed", profile=profile), timeout=5)
    time.sleep(2.5)  # past the two seconds the quiet pod syncs a name it called
    # The second pod asks less than half the rate: it keeps what it starts,
    # the first takes the rest (docs/fleet.md, "By demand").
    askers = ask(pods[:2], "listed", [1.5 * RATE, 0.25 * RATE], for_s=6.0)
    unpaced = [
        Asker(pod, "listed", RATE, askers[0].until, profile="unpaced").start() for pod in pods[:2]
    ]
    time.sleep(3.0)
    # Each pod lists the shares of its own last sync, and the three are read
    # one after another: under load one may be a sync behind the others, so
    # the sum is judged on the middle of five readings.
    readings = []
    for _ in range(5):
        readings.append([listed(pod, "listed", "default") for pod in pods])
        time.sleep(0.2)
    rows = readings[-1]
    bare = [listed(pod, "listed", "unpaced") for pod in pods]
    for asker in askers + unpaced:
        asker.join()
    assert all(r is not None for read in readings for r in read + bare), (readings, bare)
    shares = [r.fleet.pace_share for r in rows if r is not None]
    assert shares[2] == 0.0, shares  # asked for nothing
    sums = sorted(sum(r.fleet.pace_share for r in read if r is not None) for read in readings)
    assert abs(sums[2] - 1.0) <= 0.1, sums
    assert shares[0] > shares[1] > 0.0, shares
    # PODS: the pods that asked in the last slot, the same on every pod.
    assert [r.fleet.pods for r in rows if r is not None] == [2, 2, 2], rows
    # RATE is the fleet's declared rate on every pod; RATE x SHARE its own pace.
    assert [r.rate for r in rows if r is not None] == [RATE] * 3
    assert abs(sum(r.rate * r.fleet.pace_share for r in rows if r is not None) - RATE) <= 6
    assert [r.fleet.pace_share for r in bare if r is not None] == [1.0] * 3
