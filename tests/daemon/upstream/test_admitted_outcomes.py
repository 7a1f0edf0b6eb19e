"""Outcomes tied to their admissions, over the wire, with a real daemon.

The audit's two findings, each failing before the fix: another client's
made-up reports freed slots of the learned concurrency limit (one executor
then held 60 calls against a limit of 10) and lifted it (10 to 722 in
3.9 s); and an absolute reset was read when the batched report came, not
when the response did. test_admissions.py holds the table's rules and the
property on the registry.

The daemon's clock is real here, so the limit's value is read from
GetUpstreams, never assumed; what is asserted is what must hold whatever
it is.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from conftest import start_daemon
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

Stub = pb_grpc.PolicyServiceStub
MS = timedelta(milliseconds=1)

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
