"""One table of cases, two paths: a single pod that sees every event, and a
fleet of two pods on one real Redis-compatible server that each see half.

Each case is a sequence of steps: outcomes reported, time passing, and the
Admits and DecideRetries whose answers the table expects, as the servicer
makes them (squawk.wire's conversions, the core's decide(), the store).
The pod path runs them through one memory store (one `Upstreams` registry)
on a clock the test moves. The fleet path runs them through two
FleetStores, pods A and B (min_pods 1, then 2), in real time (Redis's
clock is real, so the windows are short and every time in the table is
large next to a sync): each outcome goes to the pod that has seen fewer events so far
(A on a tie) and each question to the pod that has seen fewer (B on a
tie), so no answer comes from a pod that saw most of what it is about. The
fleet path must give the single pod's answers. A third run, the two pods
alone (memory stores, no Redis), must not: every case asks something that
only the fleet's counts answer.

The staleness the fleet allows is one sync interval (plus a round trip): a
pod learns what the others saw at its next sync. The table accounts for it
in the fleet runner's syncs, each sync of both pods standing for one
interval: before every question both pods sync, the asked pod last, so it
has read everything the steps before sent; after every question and
before every wait both sync again, as the interval after a call or during
a pause would. Where the staleness shows, the table says so:

- an Admit with `stale` is asked once more before its sync, and must give
  the answer of a pod that has not heard yet of the steps before it;
- a DecideRetry with `fleet` must give that answer on the fleet path: the
  failure it reports is the one that trips a breaker, which one pod's own
  state counts at once and the fleet's at the next sync;
- an Admit the fleet refuses "ask again after the next sync" (a half-open
  fleet whose probe slots this pod does not hold yet: CIRCUIT_OPEN, at
  most two sync intervals) is asked again after one more sync of both
  pods, as an executor that waits out the refusal asks again.

Nothing else is asked twice: any other answer that differs is a
disagreement (KNOWN lists those the store has today).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple

import pytest

from squawk.daemon.config import parse_config
from squawk.daemon.config.state import StateSettings, Store
from squawk.daemon.server.tracking.fleet_store import FleetStore
from squawk.daemon.server.tracking.pod_store import PodStore
from squawk.daemon.server.tracking.registry import Upstreams
from squawk.policy import Action, Admission, BreakerState, Decision, Policy, Reason, decide
from squawk.policy.fleet import NO_DELTA
from squawk.v1 import policy_pb2 as pb
from squawk.wire import AdmitArgs, attempt_state, failed_attempt, outcome

# The server helper lives in bench/, at the repository's root (see test_fleet.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench.redis_server import RedisServer

POLICY = """
profiles:
  breaker:
    circuit_breaker: {minimum_calls: 8, failure_ratio: 0.5, window: 10s, open_for: 1s,
                      half_open_probes: 2, close_ratio: 0.5}
    retry_budget: {kind: ratio, ratio: 1, min_per_second: 100, ttl: 1s}
  budget:
    circuit_breaker: {enabled: false}
    retry_budget: {kind: ratio, ratio: 0.5, min_per_second: 1, ttl: 1s}
  tokens:
    circuit_breaker: {enabled: false}
    retry_budget: {kind: token_bucket, max_tokens: 4, token_ratio: 0.5}
  cooling:
    circuit_breaker: {enabled: false}
    retry_budget: {kind: ratio, ratio: 1, min_per_second: 100, ttl: 1s}
"""
SYNC = timedelta(milliseconds=100)
OUTAGES: list[bool] = []


# -- the table ---------------------------------------------------------------


class Report(NamedTuple):
    """`calls` outcomes of `status` (below 400: a success), each with a
    Retry-After of `retry_after` seconds when given, and `headers` (a
    quota's, say) besides."""

    calls: int
    status: int
    retry_after: int | None = None
    headers: tuple[tuple[str, str], ...] = ()


# A quota far from spent (GitHub's x-ratelimit-* of a primary limit with
# 4990 of 5000 left): a throttle that carries it is a secondary limit.
UNSPENT = (
    ("x-ratelimit-limit", "5000"),
    ("x-ratelimit-remaining", "4990"),
    ("x-ratelimit-reset", "3590"),
)


class Wait(NamedTuple):
    seconds: float


class Admit(NamedTuple):
    """An Admit, and its answer: "allowed <breaker state>", "probe
    HALF_OPEN" (allowed as one of the round's probes) or "refused <reason>
    <breaker state>". `stale`: the fleet's answer before the pods sync what
    the steps before it saw (the fleet path asks it first, then syncs)."""

    expect: str
    stale: str | None = None


class Decide(NamedTuple):
    """A DecideRetry of a first attempt that failed with `status`, and its
    answer: "<action> <reason>", with " after>=<s>s" (or "after<<s>s") when
    `at_least` asks whether the RETRY waits at least that long. `fleet`:
    the fleet's answer, where the failure this DecideRetry reports is what
    would change it (the fleet counts it at the next sync)."""

    status: int
    expect: str
    deadline: float | None = None
    at_least: float | None = None
    fleet: str | None = None


Step = Report | Wait | Admit | Decide


class Case(NamedTuple):
    name: str
    profile: str
    steps: tuple[Step, ...]


CASES = (
    Case(
        "the breaker opens at minimum_calls once failure_ratio is met",
        "breaker",
        (
            Report(4, 200),
            Report(3, 503),
            Admit("allowed CLOSED"),  # 7 calls: below minimum_calls
            Report(1, 503),  # 8 calls, half of them failures
            Admit("refused CIRCUIT_OPEN OPEN", stale="allowed CLOSED"),
            Decide(503, "FAIL CIRCUIT_OPEN"),
        ),
    ),
    Case(
        "the breaker stays closed below failure_ratio",
        "breaker",
        (
            Report(6, 200),
            Report(2, 503),
            Decide(503, "RETRY TRANSIENT_STATUS"),  # 9 calls, 3 failures: 0.33 < 0.5
            Admit("allowed CLOSED"),
            Report(3, 503),  # 6 of 12
            Admit("refused CIRCUIT_OPEN OPEN"),
        ),
    ),
    Case(
        "a DecideRetry's own failure opens one pod's breaker at once, the fleet's at its sync",
        "breaker",
        (
            Report(4, 200),
            Report(3, 503),
            # The 8th call, the 4th failure: a pod's own breaker opens on it
            # and refuses its RETRY; the fleet's counts it at the next sync.
            Decide(503, "FAIL CIRCUIT_OPEN", fleet="RETRY TRANSIENT_STATUS"),
            Admit("refused CIRCUIT_OPEN OPEN"),
        ),
    ),
    Case(
        "after open_for, half_open_probes probes, then a round that closes at close_ratio",
        "breaker",
        (
            Report(8, 503),
            Admit("refused CIRCUIT_OPEN OPEN"),
            Wait(0.5),
            Admit("refused CIRCUIT_OPEN OPEN"),  # open_for is 1 s
            Wait(0.7),
            Admit("probe HALF_OPEN"),
            Admit("probe HALF_OPEN"),
            Admit("refused CIRCUIT_OPEN HALF_OPEN"),  # both slots taken
            Report(1, 200),
            Report(1, 503),  # 1 of 2 succeeded: close_ratio 0.5
            Admit("allowed CLOSED"),
            Decide(503, "RETRY TRANSIENT_STATUS"),  # a fresh window
        ),
    ),
    Case(
        "a half-open round below close_ratio opens the breaker again for open_for",
        "breaker",
        (
            Report(8, 503),
            Wait(1.2),
            Admit("probe HALF_OPEN"),
            Admit("probe HALF_OPEN"),
            Report(2, 503),
            Admit("refused CIRCUIT_OPEN OPEN"),
            Decide(503, "FAIL CIRCUIT_OPEN"),
            Wait(1.2),
            Admit("probe HALF_OPEN"),
        ),
    ),
    Case(
        "the ratio budget grants ratio x calls + min_per_second x ttl, over the last ttl",
        "budget",
        (
            Admit("allowed CLOSED"),
            Admit("allowed CLOSED"),
            Admit("allowed CLOSED"),
            Admit("allowed CLOSED"),
            # 0.5 x 4 calls + 1/s x 1 s: three retries.
            Decide(503, "RETRY TRANSIENT_STATUS"),
            Decide(503, "RETRY TRANSIENT_STATUS"),
            Decide(503, "RETRY TRANSIENT_STATUS"),
            Decide(503, "FAIL RETRY_BUDGET_EXHAUSTED"),
            Wait(1.2),  # every call and retry has left the ttl
            Decide(503, "RETRY TRANSIENT_STATUS"),  # min_per_second's one
            Decide(503, "FAIL RETRY_BUDGET_EXHAUSTED"),
        ),
    ),
    Case(
        "the token bucket refuses at half its tokens, and successes refill it",
        "tokens",
        (
            Report(1, 503),  # 3 of 4 tokens
            Decide(503, "FAIL RETRY_BUDGET_EXHAUSTED"),  # its own failure: 2 of 4
            Report(4, 200),  # 0.5 each: 4 of 4
            Decide(503, "RETRY TRANSIENT_STATUS"),  # 3 of 4
        ),
    ),
    Case(
        "a shared Retry-After refuses Admits, lengthens a RETRY, fails one past its deadline",
        "cooling",
        (
            Report(1, 429, retry_after=2),
            Admit("refused UPSTREAM_COOLING_DOWN CLOSED", stale="allowed CLOSED"),
            Decide(503, "RETRY TRANSIENT_STATUS after>=1.5s", at_least=1.5),
            Decide(503, "FAIL DEADLINE_EXCEEDED", deadline=1.0),
            Wait(2.1),
            Admit("allowed CLOSED"),
            Decide(503, "RETRY TRANSIENT_STATUS after<1.5s", at_least=1.5),
        ),
    ),
    Case(
        # GitHub's secondary rate limits: a 403 or 429 with Retry-After while
        # x-ratelimit-remaining is not 0; "if the retry-after response header
        # is present, you should not retry your request until after that many
        # seconds has elapsed" (docs.github.com, "Rate limits for the REST API").
        "a throttle's Retry-After wins over the unspent quota it carries",
        "cooling",
        (
            Report(1, 429, retry_after=2, headers=UNSPENT),
            Admit("refused UPSTREAM_COOLING_DOWN CLOSED", stale="allowed CLOSED"),
            Wait(2.1),
            Admit("allowed CLOSED"),
            Report(1, 503, retry_after=2, headers=UNSPENT),
            Admit("refused UPSTREAM_COOLING_DOWN CLOSED", stale="allowed CLOSED"),
        ),
    ),
)


# Disagreements the table finds in the fleet store as it is, by case, with
# why: each runs as a strict xfail, so the fix of one fails the run until
# it leaves this list (the conformance suite's failure list).
KNOWN: dict[str, str] = {}


def answers(case: Case) -> list[str]:
    return [s.expect for s in case.steps if isinstance(s, Admit | Decide)]


def fleet_answers(case: Case) -> tuple[list[str], list[str]]:
    """The fleet path's answers, and its stale ones (see fleet_path)."""
    got = [
        s.fleet or s.expect if isinstance(s, Decide) else s.expect
        for s in case.steps
        if isinstance(s, Admit | Decide)
    ]
    return got, [s.stale for s in case.steps if isinstance(s, Admit) and s.stale is not None]


# -- what a pod is asked, on either path ---------------------------------------


class Asker:
    """The servicer's few lines for Report, Admit and DecideRetry, over one store."""

    def __init__(self, store: PodStore, policy: Policy, profile: str, upstream: str) -> None:
        self.store, self.policy = store, policy
        self.profile = policy.profile(profile)
        self.upstream = upstream
        self.rng = random.Random(0)
        self.seen = 0

    def report(
        self, status: int, retry_after: int | None, more: tuple[tuple[str, str], ...] = ()
    ) -> None:
        headers = dict(more)
        if retry_after is not None:
            headers["Retry-After"] = str(retry_after)
        message = pb.Outcome(
            upstream=self.upstream, success=status < 400, http_status=status, headers=headers
        )
        self.store.record([(self.profile, self.upstream, outcome(message, time.time))])

    async def admit(self) -> Admission:
        args = AdmitArgs(None, 0.0, 1)
        return (await self.store.admit(self.profile, self.upstream, args))[0]

    async def decide(self, status: int, deadline: float | None) -> Decision:
        request = pb.DecideRetryRequest(upstream=self.upstream, attempt=1, http_status=status)
        if deadline is not None:
            request.deadline.FromTimedelta(timedelta(seconds=deadline))
        state = attempt_state(request)
        decision = decide(state, self.profile, time.time, self.rng, self.policy.max_body_bytes)
        failed = failed_attempt(state, decision, time.time)
        after, _ = await self.store.after_failure(
            self.profile, self.upstream, failed, decision, state.deadline
        )
        return after


def admit_answer(a: Admission) -> str:
    if a.allowed:
        return f"{'probe' if a.probe else 'allowed'} {a.breaker_state.name}"
    assert a.reason is not None
    return f"refused {a.reason.name} {a.breaker_state.name}"


def decide_answer(d: Decision, at_least: float | None) -> str:
    text = f"{d.action.name} {d.reason.name}"
    if at_least is not None and d.action is Action.RETRY:
        longer = d.delay >= timedelta(seconds=at_least)
        text += f" after{'>=' if longer else '<'}{at_least:g}s"
    return text


class Pods:
    """Two pods, and which of them each step goes to (see the module docstring)."""

    def __init__(self, a: Asker, b: Asker) -> None:
        self.a, self.b = a, b

    def for_event(self) -> Asker:
        pod = self.b if self.b.seen < self.a.seen else self.a
        pod.seen += 1
        return pod

    def for_question(self) -> Asker:
        pod = self.a if self.a.seen < self.b.seen else self.b
        pod.seen += 1
        return pod


# -- the paths ---------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def pod_path(case: Case, policy: Policy) -> list[str]:
    """One pod sees every step."""
    clock = FakeClock()
    pod = Asker(PodStore(Upstreams(policy, clock)), policy, case.profile, case.name)
    got = []
    for step in case.steps:
        if isinstance(step, Report):
            for _ in range(step.calls):
                pod.report(step.status, step.retry_after, step.headers)
        elif isinstance(step, Wait):
            clock.now += step.seconds
        elif isinstance(step, Admit):
            got.append(admit_answer(await pod.admit()))
        else:
            got.append(decide_answer(await pod.decide(step.status, step.deadline), step.at_least))
    return got


async def alone_path(case: Case, policy: Policy) -> list[str]:
    """The fleet path's two pods with no fleet: each sees only its own half."""
    clock = FakeClock()
    pods = Pods(
        *(Asker(PodStore(Upstreams(policy, clock)), policy, case.profile, case.name) for _ in "ab")
    )
    got = []
    for step in case.steps:
        if isinstance(step, Report):
            for _ in range(step.calls):
                pods.for_event().report(step.status, step.retry_after, step.headers)
        elif isinstance(step, Wait):
            clock.now += step.seconds
        elif isinstance(step, Admit):
            got.append(admit_answer(await pods.for_question().admit()))
        else:
            decided = await pods.for_question().decide(step.status, step.deadline)
            got.append(decide_answer(decided, step.at_least))
    return got


def fleet_store(url: str, policy: Policy, name: str, min_pods: int = 1) -> FleetStore:
    settings = StateSettings(
        Store.REDIS,
        url,
        f"tables{min_pods}:",
        # Generous: the syncs here are the test's own, on a busy machine.
        deadline=timedelta(seconds=1),
        sync=SYNC,
        min_pods=min_pods,
        pod=name,
    )
    return FleetStore(Upstreams(policy), settings, on_up=OUTAGES.append)


async def fleet_path(
    case: Case, policy: Policy, url: str, min_pods: int
) -> tuple[list[str], list[str]]:
    """Two pods, each seeing half, syncing through Redis (see the module
    docstring): the answers, and the stale answers asked before a sync."""
    a, b = (fleet_store(url, policy, name, min_pods) for name in "ab")
    pods = Pods(*(Asker(store, policy, case.profile, case.name) for store in (a, b)))

    async def synced(last: Asker = pods.b) -> None:
        # Each pod syncs once, `last` last: it reads what every pod sent.
        for store in (b, a) if last is pods.a else (a, b):
            await store.sync()

    for store in (a, b):
        # Pods that know the upstream already: a newcomer's first call is
        # answered from its own state (test_a_newcomer_knows_the_fleet_from_its_first_sync).
        store.link.add(pods.a.profile, case.name, NO_DELTA)
    got, stale = [], []
    try:
        for step in case.steps:
            if isinstance(step, Report):
                for _ in range(step.calls):
                    pods.for_event().report(step.status, step.retry_after, step.headers)
                continue  # synced before the next question or wait
            if isinstance(step, Wait):
                await synced()
                await asyncio.sleep(step.seconds)
            elif isinstance(step, Admit):
                pod = pods.for_question()
                if step.stale is not None:
                    stale.append(admit_answer(await pod.admit()))
                await synced(pod)
                admitted = await pod.admit()
                if next_sync(admitted):
                    await synced(pod)
                    admitted = await pod.admit()
                got.append(admit_answer(admitted))
            else:
                pod = pods.for_question()
                await synced(pod)
                decided = await pod.decide(step.status, step.deadline)
                got.append(decide_answer(decided, step.at_least))
            await synced()
    finally:
        for store in (a, b):
            await store.aclose()
    return got, stale


def next_sync(admitted: Admission) -> bool:
    """Whether a refusal says only "ask again after the next sync"."""
    return (
        admitted.breaker_state is BreakerState.HALF_OPEN
        and admitted.reason is Reason.CIRCUIT_OPEN
        and admitted.retry_after is not None
        and admitted.retry_after <= 2 * SYNC
    )


# -- the tests ---------------------------------------------------------------


@pytest.fixture(scope="module")
def policy() -> Policy:
    return parse_config(POLICY).policy


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


IDS = [c.name for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_one_pod_that_sees_everything_gives_the_tables_answers(case: Case, policy: Policy) -> None:
    assert asyncio.run(pod_path(case, policy)) == answers(case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_each_pod_alone_answers_otherwise(case: Case, policy: Policy) -> None:
    # A case whose answers each half gives alone proves nothing of the fleet.
    assert asyncio.run(alone_path(case, policy)) != answers(case)


# min_pods 2 too: every case's failures reach both pods, so the quorum is
# met wherever one pod's breaker would open.
@pytest.mark.parametrize("min_pods", [1, 2], ids=["min_pods=1", "min_pods=2"])
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=KNOWN[c.name]))
        if c.name in KNOWN
        else c
        for c in CASES
    ],
    ids=IDS,
)
def test_two_pods_syncing_through_redis_give_the_same_answers(
    case: Case, min_pods: int, policy: Policy, server: RedisServer
) -> None:
    got = asyncio.run(fleet_path(case, policy, server.url, min_pods))
    assert got == fleet_answers(case)
    assert not OUTAGES


def test_a_newcomer_knows_the_fleet_from_its_first_sync(
    policy: Policy, server: RedisServer
) -> None:
    # The one answer the table's runner keeps out (it starts both pods
    # knowing the upstream): a pod's first call about an upstream it has
    # never synced is answered from its own state alone; the sync after it
    # brings the fleet's view.
    async def main() -> list[str]:
        a, b = fleet_store(server.url, policy, "a"), fleet_store(server.url, policy, "b")
        seen, new = (Asker(store, policy, "cooling", "a newcomer") for store in (a, b))
        try:
            seen.report(429, 2)
            await a.sync()
            first = admit_answer(await new.admit())
            await b.sync()
            return [first, admit_answer(await new.admit())]
        finally:
            for store in (a, b):
                await store.aclose()

    assert asyncio.run(main()) == ["allowed CLOSED", "refused UPSTREAM_COOLING_DOWN CLOSED"]


def test_a_probe_slot_is_leased_for_a_call_that_waits_not_for_one_admitted(
    policy: Policy, server: RedisServer
) -> None:
    # A sync asked for a slot per Admit since the last, the admitted probe's
    # own included: one call on pod B leased the round's second slot as
    # well, and held it unused for an interval, while pod A found the round
    # full and was refused until the round restarted (open_for), not for a
    # sync.
    async def main() -> tuple[str, bool, str]:
        a, b = fleet_store(server.url, policy, "a"), fleet_store(server.url, policy, "b")
        pods = [Asker(store, policy, "breaker", "probe slots") for store in (a, b)]
        try:
            for pod in pods:
                for _ in range(4):
                    pod.report(503, None)
            await a.sync()
            await b.sync()  # 8 failures: B's sync opens the fleet's breaker
            await asyncio.sleep(1.1)  # open_for
            await a.sync()
            await b.sync()  # half-open: two probe slots, none leased yet
            assert not (await pods[1].admit()).allowed  # ask again after the next sync
            await b.sync()
            assert admit_answer(await pods[1].admit()) == "probe HALF_OPEN"
            await b.sync()  # B's call has its slot: it asks for none
            await a.sync()
            refused = await pods[0].admit()
            assert refused.retry_after is not None
            await a.sync()
            return (
                admit_answer(refused),
                refused.retry_after <= SYNC * 2,
                admit_answer(await pods[0].admit()),
            )
        finally:
            for store in (a, b):
                await store.aclose()

    assert asyncio.run(main()) == ("refused CIRCUIT_OPEN HALF_OPEN", True, "probe HALF_OPEN")
