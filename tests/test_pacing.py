"""The pod's pacer over the wire: Admit's deadline, cost and permits, the
paced wait, the deadline's refusal, and what GetUpstreams shows of it.

One daemon runs a policy with a declared rate (`rate_limit: {rate: 20,
burst: 1}`: a call every 50 ms) and an upstream nothing limits. The
daemon's clock is real, so a wait is asserted against the rule's bound
(0 < wait <= 50 ms for the second of two quick calls), never against how
fast this machine is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from conftest import serving
from squawk.daemon.server.spans import SERVICE
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc
from test_telemetry import run_in_process  # isort: split

Stub = pb_grpc.PolicyServiceStub
# The Admit span's pace attributes (README, "Tracing").
PACE_ATTRIBUTES = (
    "squawk.pace.wait_ms",
    "squawk.pace.source",
    "squawk.pace.rate",
    "squawk.admit.permits",
)


POLICY = """\
profiles:
  default:
    upstreams:
      open: {}
"""


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stub]:
    with serving(tmp_path_factory, POLICY) as channel:
        yield Stub(channel)


def _seconds(seconds: int, nanos: int = 0) -> Duration:
    return Duration(seconds=seconds, nanos=nanos)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"deadline": _seconds(-1)}, "deadline"),
        ({"deadline": _seconds(0, -5)}, "deadline"),
        ({"deadline": _seconds(86_401)}, "deadline"),
        ({"deadline": _seconds(10**12)}, "deadline.seconds"),
        ({"cost": -1.0}, "cost"),
        ({"cost": float("nan")}, "cost"),
        ({"cost": float("inf")}, "cost"),
        ({"cost": 1e9 + 1}, "cost"),
        ({"permits": -1}, "permits"),
        ({"permits": 101}, "permits"),
    ],
    ids=[
        "negative deadline",
        "negative nanos",
        "deadline over a day",
        "deadline past Duration's range",
        "negative cost",
        "NaN cost",
        "infinite cost",
        "cost over 1e9",
        "negative permits",
        "permits over 100",
    ],
)
@pytest.mark.parametrize("upstream", ["open", ""], ids=["tracked", "no upstream"])
def test_a_bad_admit_is_refused_naming_the_field(
    stub: Stub, fields: dict[str, Any], field: str, upstream: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        stub.Admit(pb.AdmitRequest(upstream=upstream, **fields), timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith(f"{field}:")


@pytest.mark.parametrize(
    "fields",
    [
        {"deadline": _seconds(86_400)},
        {"deadline": _seconds(0)},
        {"cost": 1e9},
        {"cost": 0.0},
        {"permits": 100},
        {"permits": 0},
    ],
    ids=["a day", "zero deadline", "cost 1e9", "cost 0", "100 permits", "0 permits"],
)
def test_admit_accepts_every_bound_itself(stub: Stub, fields: dict[str, Any]) -> None:
    reply = stub.Admit(pb.AdmitRequest(upstream="open", **fields), timeout=5)
    assert reply.reason in (pb.REASON_ADMITTED, pb.REASON_UPSTREAM_SATURATED)


@pytest.mark.parametrize(
    ("outcome", "field"),
    [
        (pb.Outcome(upstream="open", success=True, cost=-1.0), "outcomes[1].cost"),
        (pb.Outcome(upstream="open", success=True, cost=float("nan")), "outcomes[1].cost"),
        (pb.Outcome(upstream="open", success=True, cost=2e9), "outcomes[1].cost"),
        (pb.Outcome(upstream="open", success=True, latency=_seconds(-1)), "outcomes[1].latency"),
        (
            pb.Outcome(upstream="open", success=True, latency=_seconds(86_401)),
            "outcomes[1].latency",
        ),
    ],
    ids=["negative cost", "NaN cost", "cost over 1e9", "negative latency", "latency over a day"],
)
def test_a_bad_outcome_cost_or_latency_is_refused_naming_it(
    stub: Stub, outcome: pb.Outcome, field: str
) -> None:
    fine = pb.Outcome(upstream="open", success=True, cost=1e9, latency=_seconds(86_400))
    with pytest.raises(grpc.RpcError) as caught:
        stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[fine, outcome]), timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith(f"{field}:")


LEASE_MS = 200  # squawk.policy.pacer.LEASE


@pytest.mark.parametrize("upstream", ["open", "a-caller-name", ""])
def test_an_unlimited_upstream_grants_the_permits_asked_with_a_lease(
    stub: Stub, upstream: str
) -> None:
    reply = stub.Admit(pb.AdmitRequest(upstream=upstream, permits=7), timeout=5)
    assert (reply.allowed, reply.permits, reply.wait.ToMilliseconds()) == (True, 7, 0)
    assert reply.HasField("lease")
    assert reply.lease.ToMilliseconds() == LEASE_MS


@pytest.mark.parametrize("permits", [0, 1])
def test_one_permit_is_granted_without_a_lease(stub: Stub, permits: int) -> None:
    for upstream in ("open", ""):
        reply = stub.Admit(pb.AdmitRequest(upstream=upstream, permits=permits), timeout=5)
        assert (reply.allowed, reply.permits, reply.HasField("lease")) == (True, 1, False)


def test_the_admit_span_carries_the_pace() -> None:
    admits = [
        ("Admit", pb.AdmitRequest(upstream="api", permits=3)),
        ("Admit", pb.AdmitRequest(permits=2)),
    ]
    spans = run_in_process(calls=admits)
    assert [s.name for s in spans] == [f"/{SERVICE}/Admit"] * 2
    for span, permits in zip(spans, (3, 2), strict=True):
        attributes = dict(span.attributes or {})
        assert {k: attributes[k] for k in PACE_ATTRIBUTES} == {
            "squawk.pace.wait_ms": 0,
            "squawk.pace.source": "NONE",
            "squawk.pace.rate": 0.0,
            "squawk.admit.permits": permits,
        }
