"""Outcomes tied to their admissions, and read as of when they were received.

The learned concurrency limit (squawk.policy.aimd) frees a slot and moves
the limit only for an outcome that names a live admission of its upstream
(AdmitResponse.admission_id, Outcome.admission_id): reports a caller made
up, or sent twice, free no other caller's slot and cannot lift the limit.
An outcome's `age` says how long ago its response came: an absolute reset
in its headers is read against that moment, not the report's.

Here: the table of live admissions, and the property on the registry with
a clock of its own; test_admitted_outcomes.py runs a real daemon.
"""

from __future__ import annotations

import itertools
import os
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from squawk.daemon.server.tracking import admissions as table
from squawk.daemon.server.tracking.admissions import Admissions
from squawk.daemon.server.tracking.registry import Upstreams
from squawk.policy import Outcome, builtin_policy
from squawk.policy.aimd import FLIGHT_EPOCH

MS = timedelta(milliseconds=1)


# The table (admissions.py).


def test_an_admission_is_good_for_its_permits_and_its_key_only() -> None:
    live = Admissions()
    lease = live.add(("default", "a"), 1.0, 3)
    assert live.use(("default", "b"), lease, 2.0) is None  # another upstream's
    assert live.use(("llm", "a"), lease, 2.0) is None  # another profile's
    assert [live.use(("default", "a"), lease, 2.0) for _ in range(4)] == [1.0, 1.0, 1.0, None]
    assert live.use(("default", "a"), 0, 2.0) is None  # 0 names none
    assert len(live) == 0


def test_an_admission_expires_when_the_count_forgets_its_call() -> None:
    live = Admissions()
    one = live.add(("default", "a"), 0.0, 1)
    two = live.add(("default", "a"), 1.0, 1)
    # aimd's count keeps a call that never reported at least FLIGHT_EPOCH.
    assert table.LIFETIME == FLIGHT_EPOCH
    assert live.use(("default", "a"), one, FLIGHT_EPOCH) is None
    assert live.use(("default", "a"), two, FLIGHT_EPOCH + 0.5) == 1.0


def test_the_table_is_bounded_per_upstream_and_in_all_forgetting_the_oldest() -> None:
    live = Admissions(max_live=3, max_per_upstream=2)
    a = [live.add(("default", "a"), float(i), 1) for i in range(3)]
    assert live.use(("default", "a"), a[0], 3.0) is None  # a's oldest went
    b = [live.add(("default", "b"), 3.0 + i, 1) for i in range(3)]
    assert len(live) == 3
    # b[1] found 3 live: the oldest of all went (a[1]); b[2] found b at its
    # bound: b's oldest went (b[0]).
    assert live.use(("default", "a"), a[1], 7.0) is None
    assert live.use(("default", "b"), b[0], 7.0) is None
    assert live.use(("default", "a"), a[2], 7.0) == 2.0
    assert [live.use(("default", "b"), x, 7.0) for x in b[1:]] == [4.0, 5.0]


def test_a_key_dropped_takes_its_admissions_with_it() -> None:
    live = Admissions()
    a = live.add(("default", "a"), 0.0, 2)
    b = live.add(("default", "b"), 0.0, 1)
    live.drop(("default", "a"))
    live.drop(("default", "c"))  # none: nothing to do
    assert (live.use(("default", "a"), a, 1.0), len(live)) == (None, 1)
    assert live.use(("default", "b"), b, 1.0) == 0.0


def test_ids_are_64_random_bits() -> None:
    live = Admissions()
    ids = {live.add(("default", "a"), 0.0, 1) for _ in range(1000)}
    assert len(ids) == 1000 and 0 not in ids
    # Not a sequence: no two given one after the other are neighbours.
    ordered = sorted(ids)
    assert min(b - a for a, b in itertools.pairwise(ordered)) > 1
    assert max(ids) > 2**60  # the high bits are used


# The property, on the registry with a clock of its own.


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _limited(upstreams: Upstreams, clock: _Clock, upstream: str) -> None:
    """tests/core/test_pacer.py's _slowing, through admissions: ten 100 ms
    successes, then 1 s ones until the limit comes on."""
    profile = upstreams.policy.profile("default")
    latencies = [100 * MS] * 10 + [1000 * MS] * 10
    for latency in latencies:
        admitted = upstreams.admit(profile, upstream)
        assert admitted.allowed and admitted.admission_id
        done = Outcome(True, latency=latency, admission_id=admitted.admission_id)
        upstreams.record(profile, upstream, done)
        clock.now += 0.01
        if _limit(upstreams, upstream)[0]:
            return
    raise AssertionError("the limit never came on")


def _limit(upstreams: Upstreams, upstream: str) -> tuple[int, int]:
    view = upstreams.view(("default", upstream))
    assert view is not None
    return view.snapshot.pace.concurrency_limit, view.snapshot.pace.in_flight


# One step: admit a call (kept until reported); report one of ours truly
# (its id), or twice; report a made-up one (a random id, none, another
# upstream's); let time pass. Each report is fast or slow, success or not
# (mostly success: failures open the breaker, as they count for it as ever).
_reports = st.tuples(
    st.sampled_from([True, True, True, False]), st.sampled_from([1 * MS, 100 * MS, 2000 * MS, None])
)
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("admit"), st.integers(1, 3)),
        st.tuples(st.just("true"), st.integers(0, 50), _reports),
        st.tuples(st.just("again"), st.integers(0, 50), _reports),
        st.tuples(st.sampled_from(["random", "none", "other"]), st.integers(1, 20), _reports),
        st.tuples(st.just("wait"), st.sampled_from([0.01, 0.5, 5.0, 40.0, 130.0])),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(_steps)
def test_no_reports_lift_the_calls_in_flight_past_the_limit(steps: list[tuple[Any, ...]]) -> None:
    """Whatever is reported, the admitted calls still out that the limit
    counts (admitted while it is on, after it came on, not yet reported,
    not expired) never pass it after a grant, and GetUpstreams' in_flight
    never shows fewer."""
    clock = _Clock()
    upstreams = Upstreams(builtin_policy(), clock)
    profile = upstreams.policy.profile("default")
    _limited(upstreams, clock, "slow")
    other = upstreams.admit(profile, "other").admission_id
    out: list[tuple[int, float]] = []  # (id, admitted at) of our calls still out
    reported: list[int] = []

    def report(admission: int, success: bool, latency: timedelta | None) -> None:
        done = Outcome(success, 0 if success else 503, latency=latency, admission_id=admission)
        upstreams.record(profile, "slow", done)

    def counted() -> int:
        entry = upstreams._find(("default", "slow"))
        assert entry is not None
        on_at = entry.state.pacer.concurrency.on_at
        return sum(1 for _, at in out if at > on_at and clock.now - at < FLIGHT_EPOCH)

    for step in steps:
        kind = step[0]
        if kind == "admit":
            for _ in range(step[1]):
                limit, _ = _limit(upstreams, "slow")
                admitted = upstreams.admit(profile, "slow")
                if admitted.allowed:
                    out.append((admitted.admission_id, clock.now))
                    if limit:
                        assert counted() <= limit
        elif kind in ("true", "again"):
            pool = out if kind == "true" else [(r, 0.0) for r in reported]
            if pool:
                admission, _ = pool[step[1] % len(pool)]
                if kind == "true":
                    out.remove((admission, _))
                    reported.append(admission)
                report(admission, *step[2])
        elif kind == "wait":
            clock.now += step[1]
        else:
            for _ in range(step[1]):
                made_up = {"random": int.from_bytes(os.urandom(8)), "none": 0, "other": other}
                report(made_up[kind], *step[2])
        limit, shown = _limit(upstreams, "slow")
        if limit:
            assert shown >= counted()
