"""Fair shares of a binding pace (squawk.policy.fair) and the pacer's use of
them, on a fake clock.

The expected shares are max-min fairness by weight worked out by hand
(water-filling: the keys asking least are served first; the rest split
what is left by weight), the rate each key gets under weighted fair
queuing (Demers, Keshav and Shenker; Kubernetes API Priority and Fairness
shares its seats the same way).
"""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squawk.policy import (
    Outcome,
    Pacer,
    RateLimitConfig,
    UpstreamConfig,
    UpstreamState,
    admit,
    pace,
    record_outcome,
)
from squawk.policy.fair import (
    DEMAND_S,
    MAX_KEYS,
    NO_KEYS,
    OVERFLOW,
    Fair,
    Fairness,
    Tenant,
    asked,
    share,
    water_level,
)
from squawk.policy.shed import ShedCause, explain


@pytest.mark.parametrize(
    ("demands", "total", "level"),
    [
        # Two light keys asking 1 each keep it; the flood gets 4 - 2 = 2.
        ([(1, 1), (1, 1), (10, 1)], 4, 2.0),
        # Both flood at weights 3:1: 3 and 1 of 4.
        ([(10, 3), (10, 1)], 4, 1.0),
        # Equal floods split equally.
        ([(5, 1), (5, 1)], 4, 2.0),
        # Demands that fit: nobody is limited.
        ([(1, 1), (2, 1)], 4, None),
        # A key asking exactly its part is not over it: 2 + 2 fit in 4.
        ([(2, 1), (2, 1)], 4, None),
        # A weight-2 light key (asks 1 of its 4 / 3 x 2) keeps it; the rest
        # (3) goes to the flood.
        ([(1, 2), (9, 1)], 4, 3.0),
    ],
)
def test_water_level(demands: list[tuple[float, float]], total: float, level: float | None) -> None:
    got = water_level(demands, total)
    assert got == (None if level is None else pytest.approx(level))


def _keys(now: float, **demands: tuple[float, float]) -> Fair:
    """Keys with the given (demand, weight) as of `now`."""
    return Fair({k: Tenant(d, now, w) for k, (d, w) in demands.items()})


def test_only_a_key_over_its_share_is_limited() -> None:
    keys = _keys(0.0, a=(1.0, 1.0), b=(1.0, 1.0), flood=(10.0, 1.0))
    assert share(keys, "flood", 4.0, 0.0) == pytest.approx(2.0)
    assert share(keys, "a", 4.0, 0.0) is None
    # Over its share of 2 by less than SLACK (1.5) times: not limited; past
    # it: limited to the share.
    assert share(_keys(0.0, a=(2.9, 1.0), b=(9.0, 1.0)), "a", 4.0, 0.0) is None
    assert share(_keys(0.0, a=(3.1, 1.0), b=(9.0, 1.0)), "a", 4.0, 0.0) == pytest.approx(2.0)
    # The pace serves every demand: nobody is limited.
    assert share(keys, "flood", 20.0, 0.0) is None


def test_a_lone_key_is_never_limited_by_fairness() -> None:
    assert share(_keys(0.0, flood=(100.0, 1.0)), "flood", 4.0, 0.0) is None


def test_demand_is_a_running_mean_of_asks_that_fades() -> None:
    keys = NO_KEYS
    for i in range(40):  # 10 asks/s for 4 s
        keys, _ = asked(keys, "a", 1.0, i / 10)
    d = keys.tenants["a"].demand_at(4.0)
    # A running mean over DEMAND_S: 10 x (1 - e^(-4 / DEMAND_S)) after 4 s.
    assert d == pytest.approx(10 * (1 - math.exp(-4 / DEMAND_S)), rel=0.05)
    # ... that fades by e in DEMAND_S once the asks stop.
    assert keys.tenants["a"].demand_at(4.0 + DEMAND_S) == pytest.approx(d / math.e)


def test_keys_are_bounded_and_the_rest_share_one() -> None:
    keys = NO_KEYS
    for i in range(MAX_KEYS + 10):
        keys, counted = asked(keys, f"tenant-{i}", 1.0, 0.0)
    assert len(keys.tenants) == MAX_KEYS
    assert counted == OVERFLOW
    # Once the first ones fall idle, a new key takes one's place.
    keys, counted = asked(keys, "late", 1.0, 60.0)
    assert counted == "late"
    assert len(keys.tenants) <= MAX_KEYS


# The pacer: rate 10/s (the queue's limit 1 s), asks on a fixed schedule.
RATE = 10.0


def _run(
    asks: dict[str, tuple[float, float, float]], seconds: float, keyed: bool = True
) -> dict[str, tuple[int, int]]:
    """Each key asks at a steady (asks/s, weight, phase s) for `seconds`;
    the (asked, granted) per key over the last half (after the shares
    settle). The phases keep the light keys' asks off the flood's."""
    schedule = sorted(
        (phase + i / per_s, key)
        for key, (per_s, _, phase) in asks.items()
        for i in range(int(seconds * per_s))
    )
    p, counts = Pacer(), {k: [0, 0] for k in asks}
    config = RateLimitConfig(rate=RATE)
    for at, key in schedule:
        fairness = Fairness(key, asks[key][1]) if keyed else None
        p, granted = pace(p, config, at, fairness=fairness)
        if at >= seconds / 2:
            counts[key][0] += 1
            counts[key][1] += granted.allowed
    return {k: (a, g) for k, (a, g) in counts.items()}


# Three light tenants at 2/s each and one at 50/s, against 10/s.
FOUR = {
    "a": (2.0, 1.0, 0.011),
    "b": (2.0, 1.0, 0.173),
    "c": (2.0, 1.0, 0.337),
    "flood": (50.0, 1.0, 0.0),
}


def test_a_flooding_tenant_takes_what_the_light_ones_leave() -> None:
    # Each light one keeps all it asks, the flood gets the 4/s left.
    served = _run(FOUR, 40.0)
    for light in "abc":
        asked_, granted = served[light]
        assert granted >= 0.95 * asked_, served
    granted_total = sum(g for _, g in served.values())
    assert granted_total <= RATE * 20 + 1  # the pace still holds
    assert served["flood"][1] == pytest.approx(4.0 * 20, rel=0.1)


def test_without_keys_the_flood_takes_the_light_tenants_share() -> None:
    # The same arrivals with no fairness key: first come, first served, so
    # the flood's calls fill the queue and the light tenants lose most.
    served = _run(FOUR, 40.0, keyed=False)
    assert all(served[k][1] < 0.5 * served[k][0] for k in "abc"), served


def test_weights_three_to_one_share_three_to_one() -> None:
    served = _run({"heavy": (50.0, 3.0, 0.0), "light": (50.0, 1.0, 0.007)}, 40.0)
    ratio = served["heavy"][1] / served["light"][1]
    assert 2.7 <= ratio <= 3.3, served


def test_a_refusal_by_the_share_says_so() -> None:
    config = RateLimitConfig(rate=RATE)
    p, causes, refusal = Pacer(), set(), None
    schedule = sorted(
        (phase + i / per_s, key)
        for key, (per_s, _, phase) in FOUR.items()
        for i in range(40 * int(per_s))
    )
    for at, key in schedule:
        p, got = pace(p, config, at, fairness=Fairness(key))
        if got.shed is not None:
            causes.add((key, got.shed.cause))
            if got.shed.cause is ShedCause.SHARE:
                refusal = got.shed
    # Only the flood is ever refused for its share.
    assert {key for key, cause in causes if cause is ShedCause.SHARE} == {"flood"}
    assert refusal is not None
    assert refusal.limit == pytest.approx(4.0, rel=0.1)
    assert refusal.rate == RATE
    assert explain(refusal) == (
        "The call's fairness key asks more than its share of the pace of 10/s "
        f"(declared in the policy): it starts at most {refusal.limit:.3g}/s "
        "and does not queue ahead of keys asking less."
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 0.2),
            st.sampled_from(["", "a", "b", "c"]),
            st.floats(0.01, 100.0),
        ),
        min_size=1,
        max_size=300,
    )
)
def test_fairness_never_lets_more_through_than_the_pace(
    asks: list[tuple[float, str, float]],
) -> None:
    """Whatever keys and weights callers send, the starts granted in any
    window of T seconds stay within rate x T + 1 (GCRA's bound at burst 1):
    fairness only delays a key, never adds to the pace."""
    config = RateLimitConfig(rate=RATE)
    p, now, starts = Pacer(), 0.0, []
    for gap, key, weight in asks:
        now += gap
        p, got = pace(p, config, now, fairness=Fairness(key, weight))
        if got.allowed:
            starts.append(now + got.wait.total_seconds())
    starts.sort()
    for i, first in enumerate(starts):
        for j in range(i, len(starts)):
            # A wait is rounded up to the millisecond: a start may read up
            # to 1 ms late, and a window's first one shorten it by that.
            assert j - i + 1 <= RATE * (starts[j] - first + 0.001) + 1


def test_the_shares_hold_from_the_first_release_after_a_cool_down() -> None:
    # The onset of an overload as the outcome benchmark's weights variant
    # meets it: keys at 3 : 1 ask 5/s each while nothing paces (all served,
    # and each success reported), then 40/s each from 2.0; the first call
    # of the overload is answered 429 with Retry-After 1 s, which cools the
    # pod until 3.0, and then the pace releases calls at the rate served
    # before. Each key's demand was measured all along, so the release's
    # first second already serves them 3 : 1. Before, nothing was measured
    # until the pace bound, and the light key took half of that second: a
    # demand over DEMAND_S (4 s) lagged it.
    config = UpstreamConfig()
    heavy, light = Fairness("heavy", 3.0), Fairness("light", 1.0)
    state = UpstreamState()
    asks = [(i / 5 + k / 10, key) for i in range(10) for k, key in enumerate((heavy, light))]
    asks += [
        (2.0 + i / 40 + k / 80, key) for i in range(80) for k, key in enumerate((heavy, light))
    ]
    granted = {heavy: 0, light: 0}
    throttle = Outcome(False, 429, retry_after=timedelta(seconds=1))
    for at, key in asks:
        state, admission = admit(state, config, at, fairness=key)
        if at < 2.0:
            state = record_outcome(state, config, at, Outcome(True))
        elif at == 2.0:
            state = record_outcome(state, config, at, throttle)
        elif 3.0 <= at < 4.0 and admission.allowed:
            granted[key] += 1
    assert granted[light] >= 1
    assert granted[heavy] / granted[light] >= 2.5, granted


def test_demand_is_measured_while_nothing_paces() -> None:
    # 20 asks/s for 2 s with no pace: every call starts at once, and the
    # key's demand is the running mean of its asks (a lease of 4 counts 4).
    p = Pacer()
    for i in range(40):
        p, got = pace(p, RateLimitConfig(), i / 20, fairness=Fairness("a"))
        assert got.allowed and got.wait == timedelta(0)
    expected = 20 * (1 - math.exp(-2 / DEMAND_S))
    assert p.fair.tenants["a"].demand_at(2.0) == pytest.approx(expected, rel=0.05)
    p, got = pace(p, RateLimitConfig(), 2.0, fairness=Fairness("a"), permits=4)
    assert got.permits == 4
    assert p.fair.tenants["a"].demand_at(2.0) == pytest.approx(expected + 1.0, rel=0.05)
    # Without a key, nothing is kept.
    assert pace(Pacer(), RateLimitConfig(), 0.0)[0].fair.tenants == {}
