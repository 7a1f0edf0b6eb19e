"""A throttle is not always a quota (squawk.policy.cubic): the learned pace
tells a quota, whose throttles stop once the pod sends less, from an
overload that rejects a share of the calls whatever their rate.

Each test drives the pure core as the daemon does (admit() for every
attempt, record_outcome() for its outcome a little later) against an
upstream written out here: a token bucket of C calls/s, or one that rejects
half of all calls at random. The expected figures come from the upstream,
not from the pacer: a quota's capacity, an overload's rejected share.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from datetime import timedelta

from squawk.policy import Outcome, PaceSource, UpstreamConfig, UpstreamState, admit, record_outcome
from squawk.policy.upstream import upstream_snapshot

Answer = Callable[[float, random.Random], Outcome]
CONFIG = UpstreamConfig()
DEMAND = 20.0  # attempts/s the executors offer
REPORT_S = 0.02  # an outcome reaches the daemon this long after its start


def _run(
    answer: Answer, seconds: float, demand: float = DEMAND, seed: int = 1
) -> tuple[int, int, UpstreamState, list[tuple[float, PaceSource]]]:
    """(attempts started, successes, final state, pace source each second):
    `demand` attempts/s, evenly spaced, for `seconds`; `answer(now, rng)`
    returns the Outcome of an attempt started at `now`."""
    rng = random.Random(seed)
    state = UpstreamState()
    events: list[tuple[float, int, Outcome | None]] = []
    n = int(seconds * demand)
    for i in range(n):
        heapq.heappush(events, (i / demand, i, None))
    started = successes = 0
    sources: list[tuple[float, PaceSource]] = []
    next_look = 1.0
    order = n
    while events:
        now, _, outcome = heapq.heappop(events)
        while now >= next_look:
            sources.append((next_look, upstream_snapshot(state, CONFIG, next_look).pace.source))
            next_look += 1.0
        if outcome is not None:
            state = record_outcome(state, CONFIG, now, outcome)
            continue
        state, admission = admit(state, CONFIG, now, deadline=timedelta(seconds=10))
        if not admission.allowed:
            continue  # shed: the step fails at once, as the runners do
        start = now + admission.wait.total_seconds()
        result = answer(start, rng)
        started += 1
        successes += result.success
        order += 1
        heapq.heappush(events, (start + REPORT_S, order, result))
    return started, successes, state, sources


def _bucket(capacity: float, burst: float = 2.0) -> Answer:
    level = [burst, 0.0]

    def answer(now: float, rng: random.Random) -> Outcome:
        level[0] = min(burst, level[0] + (now - level[1]) * capacity)
        level[1] = now
        if level[0] >= 1.0:
            level[0] -= 1.0
            return Outcome(True)
        return Outcome(False, 429)

    return answer


def _storm(status: int, share: float = 0.5) -> Answer:
    def answer(now: float, rng: random.Random) -> Outcome:
        return Outcome(False, status) if rng.random() < share else Outcome(True)

    return answer


def test_a_quota_is_learned_and_held_near_its_capacity() -> None:
    # Demand 20/s on a quota of 10/s: the pace must come on and stay on,
    # sending about the capacity (the upstream's own figure, 10/s).
    started, successes, _, sources = _run(_bucket(10.0), 20.0)
    assert {s for t, s in sources if t >= 5.0} == {PaceSource.LEARNED}
    assert started <= 1.3 * 10.0 * 20.0
    assert successes >= 0.85 * 10.0 * 20.0


def test_random_429s_that_cutting_does_not_lower_switch_the_learned_pace_off() -> None:
    # Half of all calls rejected whatever the rate: a cut lowers what is
    # served, not the share rejected. The pace may test one cut, then must
    # stay off for the rest of the storm: about every attempt the
    # executors offer is sent (a pace cutting on every throttle sends a
    # fraction of it and sheds the rest).
    started, _, _, sources = _run(_storm(429), 30.0)
    assert {s for t, s in sources if t >= 5.0} == {PaceSource.NONE}
    assert started >= 0.9 * DEMAND * 30.0


def test_a_529_overload_is_never_paced() -> None:
    # Anthropic's 529 overloaded_error says the API is overloaded for every
    # caller, not that this one is over a quota: no pace at all, every
    # attempt sent, and the breaker (which ignores throttling) stays closed.
    started, successes, state, sources = _run(_storm(529), 30.0)
    assert {s for _, s in sources} == {PaceSource.NONE}
    assert started == int(DEMAND * 30.0)
    assert 0.4 * started <= successes <= 0.6 * started
    assert upstream_snapshot(state, CONFIG, 30.0).breaker_state.name == "CLOSED"


def test_a_quota_reached_during_an_overload_is_learned() -> None:
    # Random 429s at a quarter of the calls (the overload), and on top a
    # quota of 8/s that the demand of 20/s exceeds from 20 s on: the share
    # rejected climbs far above the overload's, and the pace comes on again.
    quota = _bucket(8.0)

    def answer(now: float, rng: random.Random) -> Outcome:
        if now >= 20.0:
            outcome = quota(now, rng)
            if not outcome.success:
                return outcome
        return Outcome(False, 429) if rng.random() < 0.25 else Outcome(True)

    _, _, _, sources = _run(answer, 40.0)
    assert {s for t, s in sources if 10.0 <= t < 20.0} == {PaceSource.NONE}
    assert PaceSource.LEARNED in {s for t, s in sources if t >= 25.0}


def test_a_cut_reads_500s_as_served_not_as_a_capacity_lost() -> None:
    # A quota of 10/s whose upstream also fails 30 % of what it lets
    # through with a 500: the quota still lets 10/s through, and the pace
    # must learn that (successes alone, 7/s, would pace it at 0.7 C and
    # lose 30 % of the capacity to the pace on top of the 500s).
    bucket = _bucket(10.0)

    def answer(now: float, rng: random.Random) -> Outcome:
        outcome = bucket(now, rng)
        if outcome.success and rng.random() < 0.3:
            return Outcome(False, 500)
        return outcome

    started, _, _, sources = _run(answer, 20.0)
    assert {s for t, s in sources if t >= 5.0} == {PaceSource.LEARNED}
    # Attempts let through by the quota: the bucket's 10/s over 15 s.
    assert started >= 0.85 * 10.0 * 20.0
