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
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

Stub = pb_grpc.PolicyServiceStub


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
