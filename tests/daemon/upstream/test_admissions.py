"""Outcomes tied to their admissions, and read as of when they were received.

The learned concurrency limit (squawk.policy.aimd) frees a slot and moves
the limit only for an outcome that names a live admission of its upstream
(AdmitResponse.admission_id, Outcome.admission_id): reports a caller made
up, or sent twice, free no other caller's slot and cannot lift the limit.
An outcome's `age` says how long ago its response came: an absolute reset
in its headers is read against that moment, not the report's.

The daemon's clock is real here, so the limit's value is read from
GetUpstreams, never assumed; what is asserted is what must hold whatever
it is.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import start_daemon
from squawk.daemon.server.tracking import admissions as table
from squawk.daemon.server.tracking.admissions import Admissions
from squawk.daemon.server.tracking.registry import Upstreams
from squawk.policy import Outcome, builtin_policy
from squawk.policy.aimd import FLIGHT_EPOCH
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

Stub = pb_grpc.PolicyServiceStub
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


# Over the wire.

POLICY = """\
profiles:
  default:
    upstreams:
      slow: {}
      lifted: {}
      reused: {}
      announced: {}
"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stub, Stub]]:
    """One daemon and two callers of it: an executor, and another client."""
    path: Path = tmp_path_factory.mktemp("policy") / "policy.yaml"
    path.write_text(POLICY)
    daemon = start_daemon("--policy", str(path))
    try:
        with (
            grpc.insecure_channel(daemon.target) as executor,
            grpc.insecure_channel(daemon.target) as other,
        ):
            yield Stub(executor), Stub(other)
    finally:
        daemon.stop()


def _state(stub: Stub, upstream: str) -> pb.UpstreamState:
    reply = stub.GetUpstreams(pb.GetUpstreamsRequest(upstream=upstream), timeout=5)
    (state,) = reply.upstreams
    return state


def _admit(stub: Stub, upstream: str) -> pb.AdmitResponse:
    return stub.Admit(pb.AdmitRequest(upstream=upstream), timeout=5)


def _done(upstream: str, admission: str, latency: timedelta, **fields: object) -> pb.Outcome:
    done = pb.Outcome(upstream=upstream, success=True, admission_id=admission, **fields)  # type: ignore[arg-type]
    done.latency.FromTimedelta(latency)
    return done


def _on(stub: Stub, upstream: str) -> int:
    """Bring the learned limit on with true reports (ten 100 ms calls,
    then 1 s ones); the limit."""
    for latency in [100 * MS] * 10 + [1000 * MS] * 20:
        admitted = _admit(stub, upstream)
        assert admitted.allowed and len(admitted.admission_id) == 16
        report = pb.ReportOutcomeRequest(outcomes=[_done(upstream, admitted.admission_id, latency)])
        stub.ReportOutcome(report, timeout=5)
        if limit := _state(stub, upstream).concurrency_limit:
            return limit
    raise AssertionError("the limit never came on")


def _fill(stub: Stub, upstream: str, limit: int) -> list[str]:
    """Admit until the limit refuses: the ids of the calls now out."""
    ids = []
    while (admitted := _admit(stub, upstream)).allowed:
        ids.append(admitted.admission_id)
        assert len(ids) <= limit
    assert admitted.reason == pb.REASON_UPSTREAM_SATURATED
    return ids


def _made_up(upstream: str, count: int, latency: timedelta) -> pb.ReportOutcomeRequest:
    """Reports nobody admitted: random ids, and none."""
    ids = [os.urandom(8).hex() if i % 2 else "" for i in range(count)]
    return pb.ReportOutcomeRequest(outcomes=[_done(upstream, i, latency) for i in ids])


def test_made_up_reports_from_another_client_free_no_slot(daemon: tuple[Stub, Stub]) -> None:
    executor, other = daemon
    limit = _on(executor, "slow")
    out = _fill(executor, "slow", limit)
    assert len(out) == limit
    # Another client's 100 reports of calls nobody admitted.
    other.ReportOutcome(_made_up("slow", 100, 1000 * MS), timeout=5)
    assert not _admit(executor, "slow").allowed
    assert _state(executor, "slow").in_flight == limit
    # The executor's own report frees its call's slot, once.
    executor.ReportOutcome(
        pb.ReportOutcomeRequest(outcomes=[_done("slow", out[0], 1000 * MS)]), timeout=5
    )
    assert _state(executor, "slow").in_flight == limit - 1


def test_made_up_fast_successes_cannot_lift_the_limit(daemon: tuple[Stub, Stub]) -> None:
    executor, other = daemon
    limit = _on(executor, "lifted")
    _fill(executor, "lifted", limit)  # every slot taken: half full, as +1 needs
    for _ in range(10):
        other.ReportOutcome(_made_up("lifted", 1000, 1 * MS), timeout=5)
    state = _state(executor, "lifted")
    assert (state.concurrency_limit, state.in_flight) == (limit, limit)


def test_an_id_reported_twice_frees_one_slot(daemon: tuple[Stub, Stub]) -> None:
    executor, other = daemon
    limit = _on(executor, "reused")
    out = _fill(executor, "reused", limit)
    twice = pb.ReportOutcomeRequest(outcomes=[_done("reused", out[0], 1000 * MS)] * 2)
    executor.ReportOutcome(twice, timeout=5)
    # ... and another client that saw the id can free nothing with it.
    other.ReportOutcome(twice, timeout=5)
    assert _state(executor, "reused").in_flight == limit - 1
    # A failure DecideRetry is told of frees its call's slot too, once.
    failed = pb.DecideRetryRequest(
        attempt=1, http_status=503, upstream="reused", admission_id=out[1]
    )
    executor.DecideRetry(failed, timeout=5)
    executor.DecideRetry(failed, timeout=5)
    assert _state(executor, "reused").in_flight == limit - 2


def test_an_absolute_reset_is_read_as_of_when_the_response_came(
    daemon: tuple[Stub, Stub],
) -> None:
    """Anthropic's reset is an RFC 3339 time. 90 of 100 calls used, reset
    2 s after the report is sent, the response received 1 s before that:
    the quota refills 89 calls (the least the rounding allows) over the 3 s
    from receipt to reset (docs/upstreams.md §Pacing), about 29.7/s; read at
    the report, over 2 s, it would be 44.5/s."""
    executor, _ = daemon
    reset = datetime.now(UTC) + timedelta(seconds=2)
    headers = {
        "anthropic-ratelimit-requests-limit": "100",
        "anthropic-ratelimit-requests-remaining": "10",
        "anthropic-ratelimit-requests-reset": reset.isoformat(),
    }
    done = _done("announced", "", 100 * MS, headers=headers, age=Duration(seconds=1))
    executor.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[done]), timeout=5)
    state = _state(executor, "announced")
    assert state.pace_source == pb.PACE_SOURCE_HEADERS
    # The report reaches the daemon a little after `reset` was computed.
    assert 89 / 3.0 <= state.rate <= 89 / 2.8


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"admission_id": "0123456789abcdeg"}, "outcomes[0].admission_id"),
        ({"admission_id": "0123456789ABCDEF"}, "outcomes[0].admission_id"),
        ({"admission_id": "0123456789abcde"}, "outcomes[0].admission_id"),
        ({"age": Duration(seconds=-1)}, "outcomes[0].age"),
        ({"age": Duration(seconds=60, nanos=1_000)}, "outcomes[0].age"),
    ],
    ids=["not hex", "upper case", "15 digits", "negative age", "age over 60 s"],
)
def test_a_bad_admission_id_or_age_is_refused_naming_it(
    daemon: tuple[Stub, Stub], fields: dict[str, object], field: str
) -> None:
    executor, _ = daemon
    bad = pb.Outcome(upstream="slow", success=True, **fields)  # type: ignore[arg-type]
    with pytest.raises(grpc.RpcError) as refused:
        executor.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[bad]), timeout=5)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert (refused.value.details() or "").startswith(field + ": ")
    # At the bounds: accepted.
    fine = pb.Outcome(upstream="slow", success=True, age=Duration(seconds=60))
    fine.admission_id = "0123456789abcdef"
    executor.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[fine]), timeout=5)


def test_decide_retry_refuses_a_bad_admission_id_naming_it(daemon: tuple[Stub, Stub]) -> None:
    executor, _ = daemon
    bad = pb.DecideRetryRequest(attempt=1, http_status=503, upstream="slow", admission_id="x")
    with pytest.raises(grpc.RpcError) as refused:
        executor.DecideRetry(bad, timeout=5)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert (refused.value.details() or "").startswith("admission_id: ")
    batch = executor.DecideRetryBatch(pb.DecideRetryBatchRequest(requests=[bad]), timeout=5)
    assert batch.results[0].error.startswith("requests[0].admission_id: ")
