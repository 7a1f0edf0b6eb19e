"""The scale simulation's pods (bench/fleet_scale.py): each the daemon's
own `Upstreams` + `FleetStore`, its executors' calls as rates and counts
(`Fleet`), and their syncs on the server (`Driver`), each pod's by its own
store's code.

`Fleet` keeps the calls as they were made (`truth`, `series`), on this
process's monotonic clock, so that bench/fleet_scale.py can judge the pace
and the breaker against them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import redis

from squawk.daemon.config import Config
from squawk.daemon.server.tracking.fleet_link import Call, SyncLink
from squawk.daemon.server.tracking.fleet_store import FleetStore
from squawk.daemon.server.tracking.fleet_view import share
from squawk.daemon.server.tracking.fleet_wire import SCRIPT
from squawk.daemon.server.tracking.registry import Transition, Upstreams
from squawk.policy import BreakerState, Profile
from squawk.policy.fleet import Delta, state_at
from squawk.policy.retry_budget import BUDGET_BUCKETS, RatioBudgetConfig
from squawk.policy.timing import EMPTY, added, seconds

from .fleet_scale_tally import Truth, whole

__all__ = [
    "GROUPS",
    "OUTAGE_S",
    "PACE_FROM_S",
    "SHIFT_S",
    "SYNC_SCRIPT",
    "UPSTREAM",
    "WARM_S",
    "Costs",
    "Driver",
    "Fleet",
    "Pod",
]

UPSTREAM = "llm-api"
# The fleet store's script, as the daemon loads it.
SYNC_SCRIPT = SCRIPT
# The pods sync in this many groups, one group every interval / GROUPS.
GROUPS = 10
# The timeline, in seconds from the start (bench/fleet_scale.py's docstring).
WARM_S, SHIFT_S, OUTAGE_S = 1.5, 4.5, 6.5
# The pace is judged from here: before it, the cold start (reported apart).
PACE_FROM_S = 1.0


@dataclass(slots=True)
class Pod:
    """One simulated pod: its store, and its executors as rates and counts."""

    store: FleetStore
    # Admits asked per second, and calls started per second (the pacer's).
    demand: float
    started: float = 0.0
    # Running totals (fractions of calls) up to `at`, and the whole calls sent.
    at: float = 0.0
    asked: float = 0.0
    calls: float = 0.0
    failures: float = 0.0
    sent: tuple[int, int, int] = (0, 0, 0)
    open_at: float = math.nan
    # Its view says the fleet's breaker is OPEN: its calls are refused.
    refused: bool = False


class Fleet:
    """The pods, the calls they make as rates, and the calls made as they
    were made (`truth`, `series`), on this process's monotonic clock."""

    def __init__(self, config: Config, demands: Sequence[float], rate: float) -> None:
        self.profile: Profile = config.policy.profile("default")
        self.upstream = self.profile.for_upstream(UPSTREAM)
        self.key = (self.profile.name, UPSTREAM)
        self.rate = rate
        self.pods = [
            Pod(self._store(config, i), demand, demand) for i, demand in enumerate(demands)
        ]
        self.by_link = {id(pod.store.link): pod for pod in self.pods}
        self.interval = seconds(config.state.sync)
        self.truth = Truth(self.upstream.circuit_breaker)
        # The fleet's calls started per second, and what it started when.
        self.started = sum(p.started for p in self.pods)
        # The Admits every pod asks per second before the shift.
        self.demand = sum(demands)
        self.start = self.at = 0.0
        self.series: list[tuple[float, float]] = []
        self.outage_at = math.inf
        self.offset_ms = 0.0
        # Pods still calling whose view has said OPEN, and when the first
        # sync whose reading called for OPEN was read.
        self.opened = 0
        self.read_at = math.nan
        # The readings from PACE_FROM_S to the shift (the sums read after it
        # still hold the pods that stopped), how many, and the sum of the
        # share of the calling pods their demand sums held (`wanting`).
        self.readings = 0
        self.reported = 0.0
        self.calling = len(self.pods)

    def begin(self, now: float) -> float:
        """Every pod starts calling at `now`, before it has a share."""
        self.start = self.at = now
        self.series.append((now, 0.0))
        for pod in self.pods:
            pod.at = now
        self.outage_at = now + OUTAGE_S
        return now

    def shift(self, now: float) -> None:
        """A quarter of the pods stop calling, another quarter triple their demand."""
        self.advance(now)
        for i, pod in enumerate(self.pods):
            self.integrate(pod, now)
            pod.demand *= (0.0, 3.0, 1.0, 1.0)[i % 4]
            self.pace(pod, now)
        self.calling = sum(pod.demand > 0 for pod in self.pods)

    def _store(self, config: Config, i: int) -> FleetStore:
        upstreams = Upstreams(config.policy)
        settings = replace(config.state, pod=f"scale-pod-{i:04d}")
        return FleetStore(upstreams, settings, on_transition=lambda t: self._seen(i, t))

    def _seen(self, i: int, transition: Transition) -> None:
        pod = self.pods[i]
        if transition.after is BreakerState.OPEN and math.isnan(pod.open_at):
            pod.open_at = time.monotonic()
            self.opened += pod.demand > 0

    def advance(self, now: float) -> None:
        """The fleet's calls up to `now`, as made: into the truth and the series."""
        span = now - self.at
        if span <= 0:
            return
        made = self.started * span
        failed = self.started * max(now - max(self.at, self.outage_at), 0.0)
        self.truth.add(now * 1000 + self.offset_ms, made, failed)
        self.series.append((now, made))
        self.at = now

    def integrate(self, pod: Pod, now: float) -> None:
        span = now - pod.at
        if span > 0:
            pod.asked += pod.demand * span
            pod.calls += pod.started * span
            pod.failures += pod.started * max(now - max(pod.at, self.outage_at), 0.0)
            pod.at = now

    def delta(self, pod: Pod, now: float) -> Delta | None:
        """What the pod's executors did since its last sync, as counts; None: nothing."""
        self.integrate(pod, now)
        asked, calls, failures = (whole(t, s) for t, s in zip(
            (pod.asked, pod.calls, pod.failures), pod.sent, strict=True))  # fmt: skip
        failures = min(failures, calls)
        pod.sent = (pod.sent[0] + asked, pod.sent[1] + calls, pod.sent[2] + failures)
        if not asked:
            return None
        cb, budget = self.upstream.circuit_breaker, self.upstream.retry_budget
        breaker = added(EMPTY, now, seconds(cb.window), cb.buckets, calls, failures)
        deposits = EMPTY
        if isinstance(budget, RatioBudgetConfig):
            deposits = added(EMPTY, now, seconds(budget.ttl), BUDGET_BUCKETS, calls, 0)
        if pod.refused:
            # The fleet's breaker refuses them: asked, and no demand for the pace.
            return Delta(breaker=breaker, budget=deposits, asked=asked)
        return Delta(breaker=breaker, budget=deposits, wanted=asked)

    def pace(self, pod: Pod, now: float) -> None:
        """The pod's pacer at the share its store's admit would give it now
        (fleet_view.share: the lease's share while it holds), and
        nothing once the fleet's breaker is OPEN. Read from the store's
        own record of the upstream: fleet_views() would build every field
        of a snapshot for display, a fifth of the simulator's CPU."""
        self.integrate(pod, now)
        tracked = pod.store.link.tracked.get(self.key)
        view = None if tracked is None else tracked.view
        fallback = pod.store.settings.fallback_share
        started = min(pod.demand, share(tracked, now, True, fallback) * self.rate)
        if view is not None and PACE_FROM_S <= now - self.start < SHIFT_S:
            self.readings += 1
            self.reported += view.reading.wanting / self.calling
        pod.refused = view is not None and state_at(view, now) is BreakerState.OPEN
        if pod.refused:
            started = 0.0
        self.started += started - pod.started
        pod.started = started


@dataclass
class Costs:
    """What the pods' side of the syncs cost."""

    pod_syncs: int = 0
    # CPU in the pods' own sync code (the deltas, sync_calls, sync_replies,
    # move_replies), not in the Redis client's encoding and parsing.
    code_cpu_s: float = 0.0
    # One pod's sync alone, sent and read at once: a daemon's round trip.
    solo_rtt_ms: list[float] = field(default_factory=list)
    # How late each tick began, and how long a group's replies were waited
    # for when the next tick read them (0: the server was done by then).
    late_ms: list[float] = field(default_factory=list)
    wait_ms: list[float] = field(default_factory=list)


class Wire:
    """Script calls on one connection of a synchronous client, sent and
    read apart, so the server runs one group's scripts while this process
    does the rest (the replies as redis-py's pipeline gives them with
    raise_on_error=False: an error reply is its exception)."""

    def __init__(self, client: Any, sha: str) -> None:
        self.connection = client.connection_pool.get_connection()
        self.sha = sha

    def send(self, calls: Sequence[Call]) -> None:
        commands = [("EVALSHA", self.sha, len(c.keys), *c.keys, c.words) for c in calls]
        self.connection.send_packed_command(self.connection.pack_commands(commands))

    def read(self, count: int) -> list[object]:
        replies: list[object] = []
        for _ in range(count):
            try:
                replies.append(self.connection.read_response())
            except redis.ResponseError as exc:
                replies.append(exc)
        return replies

    def call(self, calls: Sequence[Call]) -> list[object]:
        self.send(calls)
        return self.read(len(calls))


Batch = list[tuple[SyncLink, list[Call]]]


class Driver:
    """Each group's syncs, each pod's by its own store's code, the group's
    script calls in one pipeline. The calls of a group are made (`prepare`)
    while the server still runs the previous group's scripts, whose replies
    are read next (`finish`), and then the new group's are sent (`send`):
    the server and this process work at the same time instead of taking
    turns, as separate pods would. So a pod reads its view up to one tick
    (interval / GROUPS) later than the round trip would bring it: the
    breaker's figures are that much late, never early."""

    def __init__(self, fleet: Fleet, client: Any, sha: str) -> None:
        self.fleet = fleet
        self.wire = Wire(client, sha)
        # Pod 0's syncs, alone on a connection of their own.
        self.solo = Wire(client, sha)
        self.costs = Costs()
        self._prepared: tuple[Batch, float] | None = None
        self._sent: tuple[Batch, float, int] | None = None

    def prepare(self, group: Sequence[Pod]) -> None:
        fleet = self.fleet
        cpu = time.process_time()
        now = time.monotonic()
        batches: Batch = []
        for pod in group:
            delta = fleet.delta(pod, now)
            if delta is not None:
                pod.store.link.add(fleet.profile, UPSTREAM, delta)
            link = pod.store.link
            batches.append((link, link.sync_calls(link.due(now), now)))
        self.costs.code_cpu_s += time.process_time() - cpu
        self._prepared = (batches, now)
        self.costs.pod_syncs += len(group)

    def send(self) -> None:
        if self._prepared is None:
            return
        (batches, now), self._prepared = self._prepared, None
        if batches[0][0] is self.fleet.pods[0].store.link and batches[0][1]:
            # Pod 0's sync alone, sent and read at once while the server is
            # idle (the group before is read): a daemon's own round trip.
            sent = time.monotonic()
            replies = self.solo.call(batches[0][1])
            self.costs.solo_rtt_ms.append((time.monotonic() - sent) * 1000)
            self._replied(self.solo, batches[:1], replies, now)
            self._paced(batches[:1])
            batches = batches[1:]
        calls = [call for _, batch in batches for call in batch]
        if calls:
            self.wire.send(calls)
        self._sent = (batches, now, len(calls))

    def finish(self) -> None:
        """Read the group sent last, and act on its replies."""
        if self._sent is None:
            return
        (batches, now, count), self._sent = self._sent, None
        waited = time.monotonic()
        replies = self.wire.read(count)
        self.costs.wait_ms.append((time.monotonic() - waited) * 1000)
        self._replied(self.wire, batches, replies, now)
        self._paced(batches)

    def _paced(self, batches: Batch) -> None:
        after = time.monotonic()
        self.fleet.advance(after)
        for link, _ in batches:
            self.fleet.pace(self.fleet.by_link[id(link)], after)

    def _replied(self, wire: Wire, batches: Batch, replies: Sequence[object], now: float) -> None:
        cpu = time.process_time()
        moves: Batch = []
        first = 0
        for link, calls in batches:
            got = replies[first : first + len(calls)]
            moves.append((link, link.sync_replies(calls, got, now)))
            first += len(calls)
        made = [call for _, batch in moves for call in batch]
        if made and math.isnan(self.fleet.read_at):
            self.fleet.read_at = time.monotonic()
        if made:
            answers = wire.call(made)
            first = 0
            for link, calls in moves:
                link.move_replies(calls, answers[first : first + len(calls)])
                first += len(calls)
        self.costs.code_cpu_s += time.process_time() - cpu
