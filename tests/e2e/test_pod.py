"""One view of every upstream per pod, end to end: one daemon, executors in
three processes and languages (tests/support/pod_executors.py: two workers each,
every worker running its client's step runner), and one fake upstream on
loopback (tests/support/flaky_upstream.py) that fails on the schedule each scenario
sets. Each scenario has its own upstream name and route.

What the pod promises, checked where the rule is exact:

- the breaker opens after `minimum_calls` failures from several executors,
  no dispatch admitted while it is open reaches the upstream for
  `open_for`, then exactly `half_open_probes` probes do, and their
  successes close it for everyone;
- the retries of all executors together never pass the ratio budget, and
  reach it exactly;
- one executor's 429 with Retry-After: 2 holds every executor back for 2 s.

Three records are read: the fake upstream's hits, GetUpstreams, and each
executor's JSON lines. The breaker's order across processes is the daemon's
alone, so its decision log (`--decision-log`, one line per Admit and
DecideRetry in the order it decided them) tells which Admit let each hit
through: the n-th hit of a worker is its n-th admitted dispatch.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import Daemon, start_daemon
from flaky_upstream import FakeUpstream, Hit, Route, serve
from pod_executors import WORKERS, Executors, Scenario, go_executor, node_executor
from squawk.v1 import policy_pb2 as pb
from squawk_client import SquawkClient

MINIMUM_CALLS = 6
OPEN_FOR_S = 2.0
PROBES = 3
RATIO = 0.5
RETRY_AFTER_S = 2

POLICY = f"""\
profiles:
  pod:
    base: default
    # Resends soon, but later than any daemon answer takes: the first
    # failures are every worker's first dispatch.
    backoff: {{initial_delay: 100ms, max_delay: 200ms}}
    upstreams:
      pod-breaker:
        circuit_breaker: {{minimum_calls: {MINIMUM_CALLS}, window: 10s,
          open_for: {OPEN_FOR_S:g}s, half_open_probes: {PROBES}, close_ratio: 0.6}}
      pod-budget:
        circuit_breaker: {{enabled: false}}
        # No floor, so the cap is the ratio alone; the ttl outlasts the run.
        retry_budget: {{kind: ratio, ratio: {RATIO}, min_per_second: 0, ttl: 60s}}
      pod-cooldown:
        share_retry_after: true
"""

ALL_WORKERS = [w for workers in WORKERS.values() for w in workers]
LANGUAGE = {w: name for name, workers in WORKERS.items() for w in workers}
Event = dict[str, Any]


@dataclass
class Pod:
    daemon: Daemon
    decision_log: Path
    executors: Executors
    client: SquawkClient


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    folder = tmp_path_factory.mktemp("pod")
    node = node_executor()
    go = go_executor(folder / "pod-executor")
    policy = folder / "policy.yaml"
    policy.write_text(POLICY)
    log = folder / "decisions.jsonl"
    daemon = start_daemon("--policy", str(policy), "--decision-log", str(log))
    client = SquawkClient(daemon.target, call_timeout=timedelta(seconds=5))
    yield Pod(daemon, log, Executors(go, node), client)
    client.close()
    daemon.stop()


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with serve() as fake:
        yield fake


def _state(pod: Pod, upstream: str) -> pb.UpstreamState | None:
    return next((u for u in pod.client.get_upstreams("pod") if u.upstream == upstream), None)


def _wait_for_state(
    pod: Pod, upstream: str, what: str, ready: Callable[[pb.UpstreamState], bool]
) -> tuple[float, pb.UpstreamState]:
    """Poll GetUpstreams until `ready`: (when the call was sent, the state)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        sent = time.monotonic()
        state = _state(pod, upstream)
        if state is not None and ready(state):
            return sent, state
        time.sleep(0.01)
    raise AssertionError(f"{upstream}: timed out waiting for {what}; last state {state}")


def _decision_log(pod: Pod, upstream: str) -> list[Event]:
    # Read while the daemon writes: a line is whole once its newline is.
    *lines, _ = pod.decision_log.read_text().split("\n")
    return [e for e in map(json.loads, lines) if e.get("squawk.upstream") == upstream]


def _open_gate(upstream: FakeUpstream, path: str, workers: set[str] | None = None) -> None:
    """Once every worker waits at the route's gate, let `workers` (None: all) start."""
    route = upstream.route(path)
    upstream.wait_for("every executor at the gate", lambda: len(route.at_gate) == len(ALL_WORKERS))

    def let_in(r: Route) -> None:
        if workers is None:
            r.gate_open_to_all = True
        else:
            r.gate_open_for = (r.gate_open_for or set()) | workers

    upstream.change(path, let_in)


def _of(events: list[Event], ev: str, worker: str | None = None) -> list[Event]:
    return [e for e in events if e["ev"] == ev and (worker is None or e["w"] == worker)]


def _no_fallbacks(events: list[Event]) -> None:
    exits = _of(events, "exit")
    assert sorted(e["exec"] for e in exits) == sorted(WORKERS)
    # Every answer came from the daemon, none from a client's fallback.
    assert [e["fallbacks"] for e in exits] == [0, 0, 0]


def test_the_breaker_opens_refuses_probes_and_closes_for_the_whole_pod(
    pod: Pod, upstream: FakeUpstream
) -> None:
    name, path = "pod-breaker", "/breaker"
    # 503 until the breaker opens; every worker's first dispatch is held
    # until all six have sent one, so the first failures come together.
    upstream.route(path)
    upstream.change(path, lambda r: setattr(r, "barrier", len(ALL_WORKERS)))
    scenario = Scenario(name, path, max_steps=50, max_attempts=5)
    with pod.executors.start(pod.daemon.target, upstream.base, scenario) as run:
        _open_gate(upstream, path)
        sent, opened = _wait_for_state(
            pod, name, "the breaker to open", lambda s: s.breaker_state == pb.BREAKER_STATE_OPEN
        )
        # The daemon's clock is this one (CLOCK_MONOTONIC): the breaker
        # opened `age` before the daemon answered, so no earlier than
        # sent - age, and it half-opens open_for after.
        age = opened.breaker_state_age.ToTimedelta().total_seconds()
        half_open_at = sent - age + OPEN_FOR_S

        def recover(r: Route) -> None:
            # The upstream is well again. Hold the probes (every hit from
            # the half-open moment on) until a fourth worker was refused,
            # so that more workers ask than there are probe slots.
            r.status = 200
            r.hold_from = half_open_at

        upstream.change(path, recover)
        route = upstream.route(path)
        upstream.wait_for("the probes to arrive", lambda: route.held == PROBES)
        refused_while_half_open = _wait_in_log(
            pod,
            name,
            lambda e: e["squawk.action"] == "REFUSE" and e["squawk.breaker_state"] == "HALF_OPEN",
        )
        upstream.change(path, lambda r: setattr(r, "let_go", True))
        _wait_for_state(
            pod, name, "the breaker to close", lambda s: s.breaker_state == pb.BREAKER_STATE_CLOSED
        )
        upstream.change(path, lambda r: setattr(r, "stop", True))
        events = run.finish()

    _no_fallbacks(events)
    log = _decision_log(pod, name)
    hits = upstream.hits_on(path)

    # Opening: the sixth failure the pod recorded opened the breaker, the
    # five before it were resent; every later failure (a dispatch admitted
    # before the opening, answered 503) is refused a resend.
    decisions = [e for e in log if e["rpc"] == "DecideRetry"]
    verdicts = [(e["squawk.action"], e["squawk.reason"]) for e in decisions]
    resent, refused = ("RETRY", "TRANSIENT_STATUS"), ("FAIL", "CIRCUIT_OPEN")
    assert verdicts[:MINIMUM_CALLS] == [resent] * (MINIMUM_CALLS - 1) + [refused]
    assert set(verdicts[MINIMUM_CALLS:]) <= {refused}
    opening = log.index(decisions[MINIMUM_CALLS - 1])
    from_executors = {LANGUAGE[e["squawk.capability"]] for e in decisions[:MINIMUM_CALLS]}
    assert len(from_executors) >= 2, f"the opening failures came from {from_executors} alone"
    assert len([h for h in hits if h.status == 503]) == len(decisions)

    # Each hit and the Admit that let it through.
    admitted = _pair_hits_with_admissions(log, hits)
    before = [(i, e, h) for i, e, h in admitted if i < opening]
    after = [(i, e, h) for i, e, h in admitted if i > opening]
    assert {e["squawk.breaker_state"] for _, e, _ in before} == {"CLOSED"}
    assert {h.status for _, _, h in before} >= {503}

    # Open: every Admit until the half-open moment is refused, and every
    # dispatch admitted after the opening reaches the upstream only after
    # open_for: the only hits in the open period were admitted before it.
    probes = [(i, e, h) for i, e, h in after if e["squawk.probe"]]
    first_probe = min(i for i, _, _ in probes)
    while_open = [e for e in log[opening:first_probe] if e["rpc"] == "Admit"]
    assert while_open, "no executor asked while the breaker was open"
    assert {(e["squawk.action"], e["squawk.reason"]) for e in while_open} == {
        ("REFUSE", "CIRCUIT_OPEN")
    }
    early = [h for _, _, h in after if h.arrived < half_open_at]
    assert not early, f"admitted after the opening, arrived before open_for had passed: {early}"

    # Half-open: exactly the configured probes reach the upstream, though
    # more workers asked; the rest are refused until the round's verdict.
    assert len(probes) == PROBES
    assert [e["squawk.probe"] for _, e, _ in after[:PROBES]] == [True] * PROBES
    assert {e["squawk.breaker_state"] for _, e, _ in probes} == {"HALF_OPEN"}
    assert [h.status for _, _, h in probes] == [200] * PROBES
    assert refused_while_half_open, "no worker was refused while the probes were out"

    # Closed: the probes' successes closed it, and every worker's traffic
    # resumed, admitted CLOSED.
    resumed = after[PROBES:]
    assert {e["squawk.breaker_state"] for _, e, _ in resumed} == {"CLOSED"}
    assert {h.status for _, _, h in resumed} == {200}
    assert {h.worker for _, _, h in resumed} == set(ALL_WORKERS)
    state = _state(pod, name)
    assert state is not None and state.breaker_state == pb.BREAKER_STATE_CLOSED

    # What the executors saw: the same dispatches, five resends, then
    # refusals; every worker waited for admission while the breaker was open.
    for worker in ALL_WORKERS:
        dispatched = [e["status"] for e in _of(events, "dispatch", worker)]
        assert dispatched == [h.status for h in hits if h.worker == worker], worker
        waits = [e["ms"] for e in _of(events, "wait", worker) if e["kind"] == "admission"]
        # Up to open_for, plus the jitter of up to a fifth of the time left.
        assert waits and all(0 < ms <= OPEN_FOR_S * 1200 for ms in waits), (worker, waits)
        assert _of(events, "step", worker)[-1]["ok"] is True
    seen = [(e["action"], e["reason"]) for e in _of(events, "decision")]
    assert seen.count(("ACTION_RETRY", "REASON_TRANSIENT_STATUS")) == MINIMUM_CALLS - 1
    assert set(seen) == {
        ("ACTION_RETRY", "REASON_TRANSIENT_STATUS"),
        ("ACTION_FAIL", "REASON_CIRCUIT_OPEN"),
    }


def _wait_in_log(pod: Pod, upstream: str, found: Callable[[Event], bool]) -> bool:
    """Whether the daemon logs a matching Admit within a second: well
    inside the half-open round, which starts over after `open_for`."""
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        if any(e["rpc"] == "Admit" and found(e) for e in _decision_log(pod, upstream)):
            return True
        time.sleep(0.01)
    return False


def _pair_hits_with_admissions(log: list[Event], hits: list[Hit]) -> list[tuple[int, Event, Hit]]:
    """(the Admit's place in the log, the Admit, the hit) for every hit: a
    worker dispatches one call at a time, each right after its admission."""
    out = []
    for worker in ALL_WORKERS:
        admits = [
            (i, e)
            for i, e in enumerate(log)
            if e["rpc"] == "Admit"
            and e["squawk.action"] == "ADMIT"
            and e["squawk.capability"] == worker
        ]
        its_hits = [h for h in hits if h.worker == worker]
        assert len(admits) == len(its_hits), (
            f"{worker}: {len(admits)} admitted, {len(its_hits)} hits"
        )
        out += [(i, e, h) for (i, e), h in zip(admits, its_hits, strict=True)]
    return sorted(out, key=lambda x: x[0])


def test_retries_across_every_executor_are_capped_by_the_budget(
    pod: Pod, upstream: FakeUpstream
) -> None:
    name, path = "pod-budget", "/budget"
    upstream.route(path)  # always 503
    steps_each = 3
    # More attempts than there can be retries: only the budget ends a step.
    scenario = Scenario(name, path, max_steps=steps_each, max_attempts=len(ALL_WORKERS) * 4)
    with pod.executors.start(pod.daemon.target, upstream.base, scenario) as run:
        _open_gate(upstream, path)
        events = run.finish()

    _no_fallbacks(events)
    hits = upstream.hits_on(path)
    steps = _of(events, "step")
    assert len(steps) == steps_each * len(ALL_WORKERS)
    assert {(s["ok"], s["reason"]) for s in steps} == {(False, "REASON_RETRY_BUDGET_EXHAUSTED")}
    assert {h.status for h in hits} == {503}

    # Every dispatch after a step's first is a retry.
    retries = len(hits) - len(steps)
    granted = [e for e in _of(events, "decision") if e["action"] == "ACTION_RETRY"]
    assert len(granted) == retries
    # Each dispatch was admitted and deposited: retries <= ratio x calls.
    # The pod's last decision refused one more (every step ended on the
    # budget), so the budget was reached exactly.
    assert retries <= RATIO * len(hits), f"{retries} retries in {len(hits)} calls"
    assert retries == math.floor(RATIO * len(hits)), f"{retries} retries in {len(hits)} calls"
    state = _state(pod, name)
    assert state is not None and state.budget_balance == 0

    # And at each decision, in the order the daemon took them.
    calls = resent = 0
    for e in _decision_log(pod, name):
        if e["rpc"] == "Admit":
            assert e["squawk.action"] == "ADMIT"
            calls += 1
        elif e["squawk.action"] == "RETRY":
            resent += 1
            assert resent <= RATIO * calls
        else:
            assert e["squawk.reason"] == "RETRY_BUDGET_EXHAUSTED"
            assert resent + 1 > RATIO * calls
    assert (calls, resent) == (len(hits), retries)


def test_one_executors_retry_after_holds_back_every_executor(
    pod: Pod, upstream: FakeUpstream
) -> None:
    name, path = "pod-cooldown", "/cooldown"
    first = "go-1"

    def schedule(r: Route) -> None:
        r.once.append((429, {"Retry-After": str(RETRY_AFTER_S)}))
        r.status, r.stop = 200, True

    upstream.route(path)
    upstream.change(path, schedule)
    scenario = Scenario(name, path, max_steps=3, max_attempts=3)
    with pod.executors.start(pod.daemon.target, upstream.base, scenario) as run:
        _open_gate(upstream, path, {first})
        _wait_for_state(
            pod, name, "the cool-down", lambda s: s.cool_down_left.ToTimedelta() > timedelta(0)
        )
        _open_gate(upstream, path, set(ALL_WORKERS) - {first})
        events = run.finish()

    _no_fallbacks(events)
    told, *rest = upstream.hits_on(path)
    assert (told.worker, told.status) == (first, 429)
    # Each worker's one success ended its loop.
    assert sorted(h.worker for h in rest) == sorted(ALL_WORKERS)
    assert {h.status for h in rest} == {200}
    # The cool-down began when the daemon heard of the 429, after it was
    # sent; a hit arrives after its Admit. Both times are read from the
    # daemon's clock (CLOCK_MONOTONIC), so no allowance for skew is needed.
    earliest = min(h.arrived for h in rest)
    assert earliest - told.answered >= RETRY_AFTER_S, earliest - told.answered

    # The executor that got the 429 waited the server's Retry-After.
    assert [(e["action"], e["delay_ms"]) for e in _of(events, "decision", first)] == [
        ("ACTION_RETRY", RETRY_AFTER_S * 1000)
    ]
    waits = [(e["kind"], e["ms"]) for e in _of(events, "wait", first)]
    assert waits[0] == ("retry", RETRY_AFTER_S * 1000), waits
    # Every other worker's runner was refused and waited for admission,
    # never dispatching before.
    for worker in set(ALL_WORKERS) - {first}:
        its = [e for e in events if e["w"] == worker]
        assert its[0]["ev"] == "wait" and its[0]["kind"] == "admission", (worker, its)
        assert 0 < its[0]["ms"] <= RETRY_AFTER_S * 2000  # the time left, jittered by up to as much
        assert [e["status"] for e in _of(events, "dispatch", worker)] == [200]
        assert not _of(events, "decision", worker)
