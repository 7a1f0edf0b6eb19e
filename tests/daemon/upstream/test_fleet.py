"""Fleet state on Redis: three daemons ("pods") and one real Redis-compatible
server on loopback, everything over real sockets.

The fleet's breaker opens only on failures from at least `min_pods` pods;
its half-open probes, retry budget and Retry-After cool-down are shared; and
losing Redis never stops an answer.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from conftest import Daemon, free_port, scrape, start_daemon
from squawk.daemon.config import Config, load_policy, parse_config
from squawk.daemon.config.state import StateSettings, Store
from squawk.daemon.server.lifecycle.app import Daemon as InProcessDaemon
from squawk.daemon.server.tracking.fleet_store import FleetStore
from squawk.daemon.server.tracking.registry import Upstreams
from squawk.daemon.settings import ServeSettings
from squawk.policy import BreakerState, Outcome
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

# The server helper lives in bench/, which the fleet simulation shares; bench/
# is a folder at the repository's root, and pytest puts only tests/ on the path.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench.redis_server import RedisServer

# Small numbers so a test opens a breaker in a few calls and waits seconds,
# not minutes. The deadline is generous: these tests check what the fleet
# decides, on a busy 2-core machine; the fault tests check the bound.
POLICY = """
state:
  store: redis
  key_prefix: "test:"
  deadline: 250ms
  min_pods: 2
profiles:
  default:
    circuit_breaker: {minimum_calls: 4, failure_ratio: 0.5, window: 60s,
                      open_for: 2s, half_open_probes: 2, close_ratio: 0.5}
    retry_budget: {kind: ratio, ratio: 0.1, min_per_second: 1, ttl: 10s}
  budget:
    circuit_breaker: {enabled: false}
    retry_budget: {kind: ratio, ratio: 0.1, min_per_second: 1, ttl: 10s}
  steady:   # every Admit and DecideRetry asks the fleet
    circuit_breaker: {enabled: false}
    retry_budget: {kind: ratio, ratio: 1, min_per_second: 100000, ttl: 1s}
"""
BREAKER_OPEN_FOR_S = 2.0
HALF_OPEN_PROBES = 2
# A password in the store's URL: it must never leave the daemon.
CANARY = "pw0canary0fleet0QZ"
FLEET_RETRIES = 10  # min_per_second 1 x ttl 10s, with no calls admitted


class Pod:
    def __init__(self, name: str, daemon: Daemon, metrics_port: int) -> None:
        self.name = name
        self.daemon = daemon
        self.metrics_port = metrics_port
        self.channel = grpc.insecure_channel(daemon.target)
        self.stub = pb_grpc.PolicyServiceStub(self.channel)

    def admit(self, upstream: str, timeout: float = 5, profile: str = "") -> pb.AdmitResponse:
        reply: pb.AdmitResponse = self.stub.Admit(
            pb.AdmitRequest(upstream=upstream, profile=profile), timeout=timeout
        )
        return reply

    def report(self, upstream: str, *statuses: int, headers: dict[str, str] | None = None) -> None:
        outcomes = [
            pb.Outcome(upstream=upstream, success=s < 400, http_status=s, headers=headers or {})
            for s in statuses
        ]
        reply = self.stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=outcomes), timeout=5)
        assert reply.recorded == len(statuses)

    def decide(
        self, upstream: str, status: int = 503, timeout: float = 5, profile: str = ""
    ) -> pb.DecideRetryResponse:
        reply: pb.DecideRetryResponse = self.stub.DecideRetry(
            pb.DecideRetryRequest(
                upstream=upstream, http_status=status, attempt=1, profile=profile
            ),
            timeout=timeout,
        )
        return reply

    def metric(self, name: str) -> float:
        return scrape(self.metrics_port).get(name, 0.0)


def start_pods(url: str, policy: Path, count: int = 3, first: int = 0) -> list[Pod]:
    """`count` daemons on `policy`, named pod-`first`, pod-`first + 1`, ..."""
    pods = []
    for i in range(first, first + count):
        port = free_port()
        name = f"pod-{i}"
        daemon = start_daemon(
            "--policy",
            str(policy),
            "--metrics-listen",
            f"127.0.0.1:{port}",
            env={"SQUAWK_STATE_URL": url, "SQUAWK_STATE_POD": name},
        )
        pods.append(Pod(name, daemon, port))
    return pods


def stop_pods(pods: list[Pod]) -> None:
    for pod in pods:
        pod.channel.close()
        pod.daemon.stop()


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    s = RedisServer().start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fleet") / "policy.yaml"
    path.write_text(POLICY)
    return path


@pytest.fixture(scope="module")
def pods(server: RedisServer, policy_file: Path) -> Iterator[list[Pod]]:
    started = start_pods(server.url, policy_file)
    yield started
    stop_pods(started)


def keys_of(upstream: str, profile: str = "default", prefix: str = "test:") -> dict[str, str]:
    """The upstream's keys, as fleet_store.py names them (a digest of the names)."""
    name = f"{profile}\0{upstream}".encode()
    base = f"{prefix}{{{hashlib.blake2b(name, digest_size=12).hexdigest()}}}"
    return {part: f"{base}:{part}" for part in "scpohrd"}


def fleet_of(
    server: RedisServer, upstream: str, profile: str = "default", prefix: str = "test:"
) -> dict[str, Any]:
    """What Redis holds of one upstream: whether any of its keys exist, its
    breaker's state (the leases), and the counts its window holds."""
    keys = keys_of(upstream, profile, prefix)
    client = redis.Redis(port=server.port)
    try:
        counts: dict[bytes, bytes] = {}
        if client.type(keys["c"]) == b"hash":
            counts = client.hgetall(keys["c"])  # type: ignore[assignment]
        state = "closed"
        if client.exists(keys["o"]):
            state = "open"
        elif client.exists(keys["h"]):
            state = "half_open"
        return {
            "exists": bool(client.exists(*keys.values())),
            "state": state,
            "calls": sum(int(v) for k, v in counts.items() if k.startswith(b"w")),
            "failures": sum(int(v) for k, v in counts.items() if k.startswith(b"x")),
        }
    finally:
        client.close()


def synced_upstreams(server: RedisServer, prefix: str = "test:") -> int:
    """How many upstreams a sync has written (each has a state key)."""
    client = redis.Redis(port=server.port)
    try:
        return sum(1 for _ in client.scan_iter(match=f"{prefix}*:s", count=1000))
    finally:
        client.close()


def eventually(check: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    """Syncs land within an interval or two; wait for one, bounded."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout_s}s: {what}")


def test_one_pods_failures_open_only_its_own_breaker_two_pods_open_the_fleets(
    server: RedisServer, pods: list[Pod]
) -> None:
    a, b, c = pods
    a.report("flights", 503, 503, 503, 503)
    eventually(
        lambda: fleet_of(server, "flights")["calls"] == 4,
        "pod-0's four failures reach the fleet's window",
    )
    # pod-0's own breaker opened on its own failures ...
    assert a.admit("flights").reason == pb.REASON_CIRCUIT_OPEN
    # ... but one pod is no quorum: the others still call.
    for pod in (b, c):
        reply = pod.admit("flights")
        assert reply.allowed, pod.name
        assert reply.breaker_state == pb.BREAKER_STATE_CLOSED
    # One failure from a second pod: two pods, 5 of 5 failed, the fleet opens.
    b.report("flights", 503)
    eventually(lambda: fleet_of(server, "flights")["state"] == "open", "the fleet's breaker opens")
    # Every pod reads it at its next sync (the staleness: one interval).
    eventually(lambda: not c.admit("flights").allowed, "pod-2 reads the fleet's breaker")
    for pod in (b, c):
        reply = pod.admit("flights")
        assert not reply.allowed, pod.name
        assert reply.reason == pb.REASON_CIRCUIT_OPEN
        assert reply.breaker_state == pb.BREAKER_STATE_OPEN
        # Up to open_for, plus a jitter of up to a fifth of the time left.
        assert 0 < reply.retry_after.ToMilliseconds() <= BREAKER_OPEN_FOR_S * 1200
    # pod-2 never saw a failure, yet its DecideRetry knows the fleet's breaker.
    decided = c.decide("flights")
    assert decided.action == pb.ACTION_FAIL
    assert decided.reason == pb.REASON_CIRCUIT_OPEN
    assert "fleet-wide circuit breaker is open" in decided.explanation


def test_half_open_probes_are_counted_across_the_fleet(
    server: RedisServer, pods: list[Pod]
) -> None:
    a, b, c = pods
    # Each pod has called the upstream before: it holds a view of the fleet's
    # state of it (a pod's first call of a name decides without one).
    for pod in pods:
        assert pod.admit("hotels").allowed
    a.report("hotels", 503, 503)
    b.report("hotels", 503, 503)
    eventually(lambda: fleet_of(server, "hotels")["state"] == "open", "the fleet's breaker opens")
    time.sleep(BREAKER_OPEN_FOR_S + 0.1)
    # Every pod asks, many times over several syncs: a probe slot is leased
    # at a sync, and the fleet's round has two.
    allowed: list[tuple[str, bool]] = []
    not_probes: list[str] = []
    lock = threading.Lock()

    def ask(pod: Pod) -> None:
        for _ in range(20):
            reply = pod.admit("hotels")
            with lock:
                allowed.append((pod.name, reply.allowed))
                # Every call admitted while the fleet is half-open is a probe.
                if reply.allowed and not reply.probe:
                    not_probes.append(pod.name)
            time.sleep(0.04)

    threads = [threading.Thread(target=ask, args=(pod,)) for pod in pods]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(allowed) == 60
    probes = [name for name, ok in allowed if ok]
    # Every call admitted, not only those marked as probes: exactly the round's.
    assert len(probes) == HALF_OPEN_PROBES, probes
    assert not_probes == []
    # The probes succeed: reported through the third pod, the fleet closes
    # and every pod calls again.
    c.report("hotels", 200, 200)
    eventually(lambda: fleet_of(server, "hotels")["state"] == "closed", "the fleet closes")
    for pod in (b, c):
        eventually(partial(calls_again, pod, "hotels"), f"{pod.name} calls again")
    # The pods that opened it are forgotten with it: one pod's failures
    # alone do not open it again.
    b.report("hotels", 503, 503, 503, 503)
    eventually(
        lambda: fleet_of(server, "hotels")["calls"] == 4,
        "pod-1's four failures reach the fleet's window",
    )
    time.sleep(0.3)  # a few syncs: none moves it
    assert fleet_of(server, "hotels")["state"] == "closed"
    assert c.admit("hotels").allowed


def calls_again(pod: Pod, upstream: str) -> bool:
    return bool(pod.admit(upstream).allowed)


def cooling(pod: Pod) -> bool:
    return pod.admit("weather").reason == pb.REASON_UPSTREAM_COOLING_DOWN


def test_a_retry_after_seen_by_one_pod_cools_every_pod(pods: list[Pod]) -> None:
    a, b, c = pods
    a.report("weather", 429, headers={"Retry-After": "30"})
    for pod in (b, c):
        eventually(partial(cooling, pod), f"{pod.name} cools down")
        reply = pod.admit("weather")
        assert not reply.allowed
        assert 25_000 < reply.retry_after.ToMilliseconds() <= 35_000  # jittered by 5 s at most
    # A resend another pod asks about waits out the fleet's cool-down.
    decided = c.decide("weather", 503)
    assert decided.action == pb.ACTION_RETRY
    assert decided.delay.ToMilliseconds() > 25_000
    assert "cooling down" in decided.explanation


def test_the_retry_budget_is_one_for_the_fleet(pods: list[Pod]) -> None:
    # No calls admitted: the fleet grants min_per_second x ttl = 10 retries
    # in all, though each pod's own budget would grant 10 by itself. (The
    # profile has no breaker, which would end the retries sooner.) A pod
    # learns another's retries at its next sync, so the asks are a few
    # syncs apart: within one interval each pod could grant from its own.
    answers = []
    for i in range(16):
        answers.append(pods[i % 3].decide("trains", 503, profile="budget"))
        time.sleep(0.25)
    granted = [a for a in answers if a.action == pb.ACTION_RETRY]
    assert len(granted) == FLEET_RETRIES
    refused = answers[FLEET_RETRIES:]
    assert all(a.reason == pb.REASON_RETRY_BUDGET_EXHAUSTED for a in refused)
    assert "fleet-wide retry budget is spent" in refused[0].explanation


def test_a_batch_past_its_deadline_still_reports_every_failure(
    server: RedisServer, pods: list[Pod]
) -> None:
    # 2,000 upstreams in one batch: none waits on Redis, and each one's
    # failure reaches the fleet with the syncs that follow.
    known = synced_upstreams(server)
    items = [
        pb.DecideRetryRequest(upstream=f"batch-{i}", http_status=503, attempt=1, profile="steady")
        for i in range(2000)
    ]
    reply = pods[0].stub.DecideRetryBatch(pb.DecideRetryBatchRequest(requests=items), timeout=30)
    assert all(r.decision.action == pb.ACTION_RETRY for r in reply.results)
    eventually(
        lambda: synced_upstreams(server) - known == 2000,
        "every item's failure reaches the fleet",
        timeout_s=20,
    )
    answered = pods[0].metric('squawk_state_answers_total{rpc="DecideRetryBatch",state="fleet"}')
    answered += pods[0].metric('squawk_state_answers_total{rpc="DecideRetryBatch",state="local"}')
    assert answered == 2000


def test_answers_are_marked_fleet_when_redis_answers(pods: list[Pod]) -> None:
    pod = pods[0]
    before = pod.metric('squawk_state_answers_total{rpc="Admit",state="fleet"}')
    pod.admit("marked")
    after = pod.metric('squawk_state_answers_total{rpc="Admit",state="fleet"}')
    assert after == before + 1
    assert pod.metric("squawk_state_store_up") == 1


def traced_calls(url: str) -> Sequence[ReadableSpan]:
    """Spans of an Admit and a DecideRetry from an in-process daemon whose
    store is at `url`."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    target = f"127.0.0.1:{free_port()}"
    settings = StateSettings(Store.REDIS, url, "test:", timedelta(milliseconds=250))

    async def main() -> None:
        config = Config(load_policy(None, environ={}), state=settings)
        daemon = InProcessDaemon(ServeSettings(config, (target,)), tracing=(provider, None))
        await daemon.start()
        try:
            async with grpc.aio.insecure_channel(target) as channel:
                stub = pb_grpc.PolicyServiceStub(channel)
                await stub.Admit(pb.AdmitRequest(upstream="spans"), timeout=5)
                await stub.DecideRetry(
                    pb.DecideRetryRequest(upstream="spans", http_status=503, attempt=1), timeout=5
                )
        finally:
            await daemon.stop()

    asyncio.run(main())
    return exporter.get_finished_spans()


def test_spans_say_where_the_state_came_from(server: RedisServer) -> None:
    spans = traced_calls(server.url)
    assert [s.attributes and s.attributes.get("squawk.state") for s in spans] == ["fleet"] * 2
    nobody = f"redis://:{CANARY}@127.0.0.1:{free_port()}/0"
    spans = traced_calls(nobody)
    assert [s.attributes and s.attributes.get("squawk.state") for s in spans] == ["local"] * 2


def test_a_daemon_whose_redis_is_away_starts_and_answers(policy_file: Path) -> None:
    url = f"redis://:{CANARY}@127.0.0.1:{free_port()}/0"
    daemon = start_daemon("--policy", str(policy_file), env={"SQUAWK_STATE_URL": url})
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            for _ in range(5):
                assert stub.Admit(pb.AdmitRequest(upstream="away"), timeout=2).allowed
    finally:
        daemon.process.terminate()
        daemon.process.wait(timeout=15)
        log = daemon.output()  # start to exit
        daemon.log.close()
    assert log.count("unreachable") == 1, log
    assert "redis://127.0.0.1:" in log  # where, never who
    assert CANARY not in log


def test_a_key_the_daemon_did_not_write_is_no_outage(server: RedisServer, pods: list[Pod]) -> None:
    pod = pods[0]
    keys = keys_of("corrupt")
    pod.report("corrupt", 503)
    eventually(lambda: fleet_of(server, "corrupt")["exists"], "the upstream's keys are written")
    client = redis.Redis(port=server.port)
    fleet = 'squawk_state_answers_total{rpc="Admit",state="fleet"}'
    synced = "squawk_state_store_up"

    def a_sync_lands() -> bool:
        # A sync that lands rewrites the state key with this pod's settings.
        if client.type(keys["s"]) == b"hash":
            client.hdel(keys["s"], "f")
        eventually(
            lambda: client.type(keys["s"]) == b"hash" and client.hexists(keys["s"], "f"),
            "a sync lands",
            timeout_s=3,
        )
        return True

    try:
        # Another type of key under each of the upstream's names, without an
        # expiry: overwritten at the next sync, or every sync of the upstream
        # would be refused by Redis (WRONGTYPE) and the fleet lost for it.
        for part, kind in (("s", "string"), ("c", "string"), ("p", "hash"), ("o", "hash"),
                           ("h", "hash"), ("r", "string"), ("d", "zset")):  # fmt: skip
            client.delete(keys[part])
            if kind == "string":
                client.set(keys[part], "someone else's")
            elif kind == "hash":
                client.hset(keys[part], "someone", "else")
            else:
                client.zadd(keys[part], {"someone": 1})
            pod.report("corrupt", 200)
            assert a_sync_lands(), part
            assert pod.metric(synced) == 1
            before = pod.metric(fleet)
            assert pod.admit("corrupt").allowed or part in ("o", "h"), part
            assert pod.metric(fleet) == before + 1
            client.delete(keys["o"], keys["h"])
        # Numbers no pod wrote: NaN, text, a billion: bounded, never a lock.
        client.hset(keys["s"], mapping={"e": "NaN", "c": "1e300", "t": "-5", "f": "x"})
        client.hset(keys["c"], mapping={"wNaN": "1", "w99999999999999": "1000000000", "x1": "z"})
        pod.report("corrupt", 200)
        assert a_sync_lands()
        decided = pods[1].decide("corrupt", 503)
        assert decided.action == pb.ACTION_RETRY, decided.explanation
        cooled = pod.admit("corrupt")
        # The planted cool-down end is held to max_cool_down (5 min by default).
        if not cooled.allowed:
            assert cooled.retry_after.ToMilliseconds() <= 2 * 300_000
        client.hset(keys["s"], "c", 0)
        # An OPEN lease without an expiry (planted, or a mistake) is held to
        # open_for: refused for open_for at most, then half-open, not for good.
        client.set(keys["o"], "1")
        client.set(keys["h"], "1")
        eventually(lambda: client.pttl(keys["o"]) > 0, "the lease gets an expiry", timeout_s=3)
        assert client.pttl(keys["o"]) <= BREAKER_OPEN_FOR_S * 1000
        # (Another pod's sync may have given it; this pod reads it at its own.)
        eventually(
            lambda: pod.admit("corrupt").reason == pb.REASON_CIRCUIT_OPEN, "the pod reads it"
        )
        refused = pod.admit("corrupt")
        assert refused.reason == pb.REASON_CIRCUIT_OPEN
        assert refused.retry_after.ToMilliseconds() <= BREAKER_OPEN_FOR_S * 1200  # jittered
        eventually(lambda: not client.exists(keys["o"]), "the lease ends", timeout_s=5)
        assert pod.metric(synced) == 1
    finally:
        client.delete(*keys.values())
        client.close()


def test_a_fleet_refusal_leaves_a_half_open_pods_probe_slot_free(server: RedisServer) -> None:
    # Two pods' stores in-process, as the daemon builds them; the pods' own
    # breakers run on a clock the test moves, the fleet's on Redis's.
    policy = parse_config(
        """
profiles:
  default:
    circuit_breaker: {minimum_calls: 2, failure_ratio: 0.5, open_for: 1s, half_open_probes: 1}
"""
    ).policy
    profile = policy.profile("")
    now = [1000.0]
    failed = Outcome(success=False, http_status=503)

    def pod(name: str) -> FleetStore:
        settings = StateSettings(
            Store.REDIS, server.url, "test:", timedelta(milliseconds=250), pod=name
        )
        return FleetStore(Upstreams(policy, lambda: now[0]), settings)

    async def main() -> tuple[bool, bool, bool]:
        a, b, c = pod("in-a"), pod("in-b"), pod("in-c")
        for store in (a, b, c):
            await store.start()
        try:
            for store in (a, b):
                store.record([(profile, "probe-slot", failed), (profile, "probe-slot", failed)])
            # Pod c saw nothing: it is refused once the background writes open the fleet.
            while (await c.admit(profile, "probe-slot"))[0].allowed:
                await asyncio.sleep(0.01)
            fleet_opened = time.monotonic()
            # Pod a reads the fleet's breaker at its own next sync.
            while a.fleet_views()[("default", "probe-slot")].breaker_state != BreakerState.OPEN:
                await asyncio.sleep(0.01)
            now[0] += 10  # pod a's own breaker is half-open: one probe slot
            refused = not (await a.admit(profile, "probe-slot"))[0].allowed
            refused_again = not (await a.admit(profile, "probe-slot"))[0].allowed
            await asyncio.sleep(max(0.0, fleet_opened + 1.1 - time.monotonic()))
            # The fleet half-opens: pod a's slot is still free for its probe
            # once a sync leased it the fleet's.
            for _ in range(100):
                probe = (await a.admit(profile, "probe-slot"))[0]
                if probe.allowed:
                    break
                await asyncio.sleep(0.02)
            return refused, refused_again, probe.allowed and probe.probe
        finally:
            for store in (a, b, c):
                await store.aclose()

    assert asyncio.run(main()) == (True, True, True)


# -- faults --------------------------------------------------------------


FAULT_POLICY = POLICY.replace("deadline: 250ms", "deadline: 5ms")
CALL_TIMEOUT_S = 0.5


class Traffic:
    """Admit and DecideRetry in a loop from each pod, every call with a
    gRPC deadline; every answer and every error kept."""

    def __init__(self, pods: list[Pod], upstream: str) -> None:
        self.pods = pods
        self.upstream = upstream
        self.answers = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(p,)) for p in pods]

    def _run(self, pod: Pod) -> None:
        while not self._stop.is_set():
            try:
                admitted = pod.admit(self.upstream, CALL_TIMEOUT_S, "steady")
                decided = pod.decide(self.upstream, 503, CALL_TIMEOUT_S, "steady")
                self.answers += 2
                # The profile refuses nothing, so every call asks the fleet.
                if not (admitted.allowed and decided.action == pb.ACTION_RETRY):
                    self.errors.append(f"{pod.name}: refused: {admitted} {decided}")
            except grpc.RpcError as exc:
                self.errors.append(f"{pod.name}: {exc.code().name} {exc.details()}")
            time.sleep(0.005)

    def __enter__(self) -> Traffic:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)


def local_answers(pods: list[Pod]) -> float:
    return sum(
        pod.metric(f'squawk_state_answers_total{{rpc="{rpc}",state="local"}}')
        for pod in pods
        for rpc in ("Admit", "DecideRetry")
    )


@pytest.fixture
def fault_fleet(tmp_path: Path) -> Iterator[tuple[RedisServer, list[Pod]]]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(FAULT_POLICY)
    server = RedisServer().start()
    started = start_pods(server.url, policy)
    yield server, started
    stop_pods(started)
    server.stop()


def test_redis_killed_and_restarted_every_call_is_answered_in_time(
    fault_fleet: tuple[RedisServer, list[Pod]],
) -> None:
    server, pods = fault_fleet
    with Traffic(pods, "payments") as traffic:
        time.sleep(0.5)
        server.kill()
        eventually(lambda: all(p.metric("squawk_state_store_up") == 0 for p in pods), "outage seen")
        during = traffic.answers
        time.sleep(1.0)
        assert traffic.answers > during, "answers go on during the outage"
        assert local_answers(pods) > 0
        # Seen while Redis is away: two pods' failures, kept for the resync.
        pods[0].report("replayed", 503, 503)
        pods[1].report("replayed", 503, 503)
        # And 3,000 upstreams more: the resync must not hold the calls up.
        for start in range(0, 3000, 1000):
            outcomes = [
                pb.Outcome(upstream=f"many-{i}", http_status=503)
                for i in range(start, start + 1000)
            ]
            pods[2].stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=outcomes), timeout=5)
        server.start()
        eventually(
            lambda: all(p.metric("squawk_state_store_up") == 1 for p in pods),
            "every pod back on the fleet",
            timeout_s=10,
        )
        time.sleep(0.3)
    assert traffic.errors == []
    assert traffic.answers > 100
    # The restarted server started empty; the pods' replay alone opens the
    # fleet's breaker for the third pod, which saw nothing.
    eventually(
        lambda: pods[2].admit("replayed").reason == pb.REASON_CIRCUIT_OPEN,
        "the failures seen during the outage reach the fleet",
    )
    # Each of the 3,000 replayed once: one call in its window.
    calls = [fleet_of(server, f"many-{i}")["calls"] for i in range(3000)]
    assert calls == [1] * 3000, sorted(collections.Counter(calls).items())
    # The fleet's state works again on the restarted (empty) server: two
    # pods' failures open the third pod's breaker.
    a, b, c = pods
    a.report("after", 503, 503)
    b.report("after", 503, 503)
    eventually(
        lambda: c.admit("after").reason == pb.REASON_CIRCUIT_OPEN,
        "the fleet's breaker opens after the restart",
    )
    for pod in pods:
        # The kill is one outage; a busy machine can add one (three late
        # answers in a row). Either way, one line when each begins and one
        # when it ends.
        log = pod.daemon.output()
        assert 1 <= log.count("unreachable") == log.count("answers again"), log


def test_a_hung_redis_costs_each_call_at_most_the_deadline(
    fault_fleet: tuple[RedisServer, list[Pod]],
) -> None:
    server, pods = fault_fleet
    assert server.process is not None
    with Traffic(pods, "search") as traffic:
        time.sleep(0.3)
        os.kill(server.process.pid, signal.SIGSTOP)
        try:
            time.sleep(1.5)
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        eventually(
            lambda: all(p.metric("squawk_state_store_up") == 1 for p in pods),
            "every pod back on the fleet",
            timeout_s=10,
        )
    assert traffic.errors == []
    assert local_answers(pods) > 0


def test_a_slow_redis_is_one_outage_not_a_flood_of_them(
    fault_fleet: tuple[RedisServer, list[Pod]],
) -> None:
    server, pods = fault_fleet
    stop = threading.Event()

    def hog() -> None:
        # Redis busy 150 ms at a time, back to back: every sync is late (a
        # round trip past the 100 ms sync interval; nothing else waits).
        client = redis.Redis(port=server.port)
        try:
            while not stop.is_set():
                client.execute_command("DEBUG", "SLEEP", "0.15")  # type: ignore[no-untyped-call]
        finally:
            client.close()

    hogger = threading.Thread(target=hog)
    with Traffic(pods, "slow") as traffic:
        time.sleep(0.3)
        hogger.start()
        try:
            time.sleep(3.0)
        finally:
            stop.set()
            hogger.join(timeout=5)
        eventually(
            lambda: all(p.metric("squawk_state_store_up") == 1 for p in pods),
            "every pod back on the fleet",
            timeout_s=10,
        )
    assert traffic.errors == []
    for pod in pods:
        log = pod.daemon.output()
        # Pings get through between two sleeps now and then; a flapping
        # store would log a line every few tenths of a second.
        assert 1 <= log.count("unreachable") <= 2, log
