"""The shared vector file, run in-process against the core and over the wire.

In-process goes through the same request conversion as the daemon, so a
failure here and not over the wire points at the server layer, and the other
way round.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message

from conftest import VECTORS, Reflected, subset_mismatches
from squawk.daemon.config import load_policy
from squawk.daemon.server.servicer import PolicyServicer
from squawk.policy import PolicyInputError
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

CLASSIFY = [pytest.param(c, id=c["name"]) for c in VECTORS["classify"]]
DECIDE = [pytest.param(c, id=c["name"]) for c in VECTORS["decide"]]
INVALID = [pytest.param(c, id=c["name"]) for c in VECTORS["invalid"]]
LOCAL = PolicyServicer(load_policy(None, environ={}))


def as_dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)


@pytest.mark.parametrize("case", CLASSIFY)
def test_classify_in_process(case: dict[str, Any]) -> None:
    request = json_format.ParseDict(case["request"], pb.ClassifyRequest())
    assert subset_mismatches(case["expect"], as_dict(LOCAL.classify(request))) == []


@pytest.mark.parametrize("case", DECIDE)
def test_decide_in_process(case: dict[str, Any]) -> None:
    request = json_format.ParseDict(case["request"], pb.DecideRetryRequest())
    assert subset_mismatches(case["expect"], as_dict(LOCAL.decide(request))) == []


@pytest.mark.parametrize("case", INVALID)
def test_invalid_in_process(case: dict[str, Any]) -> None:
    rpc = LOCAL.classify if case["rpc"] == "Classify" else LOCAL.decide
    request_type = pb.ClassifyRequest if case["rpc"] == "Classify" else pb.DecideRetryRequest
    with pytest.raises(PolicyInputError) as info:
        rpc(json_format.ParseDict(case["request"], request_type()))  # type: ignore[arg-type]
    assert info.value.field == case["field"]


# Over the wire, the calls are made as a black-box caller (grpcurl) makes
# them: descriptors from server reflection, proto3 JSON in and out, no
# generated code on the calling side.


@pytest.mark.parametrize("case", CLASSIFY)
def test_classify_over_the_wire(reflected: Reflected, case: dict[str, Any]) -> None:
    assert subset_mismatches(case["expect"], reflected("Classify", case["request"])) == []


@pytest.mark.parametrize("case", DECIDE)
def test_decide_over_the_wire(reflected: Reflected, case: dict[str, Any]) -> None:
    assert subset_mismatches(case["expect"], reflected("DecideRetry", case["request"])) == []


@pytest.mark.parametrize("case", INVALID)
def test_invalid_over_the_wire(reflected: Reflected, case: dict[str, Any]) -> None:
    with pytest.raises(grpc.RpcError) as info:
        reflected(case["rpc"], case["request"])
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (info.value.details() or "").startswith(case["field"] + ":")


@pytest.mark.parametrize("case", VECTORS["redaction"], ids=lambda c: c["name"])
def test_redaction(channel: grpc.Channel, case: dict[str, Any]) -> None:
    stub = pb_grpc.PolicyServiceStub(channel)
    reply = stub.Classify(pb.ClassifyRequest(error_message=case["input"]), timeout=5)
    for secret in case["secrets"]:
        assert secret not in reply.redacted_message
    assert "[REDACTED]" in reply.redacted_message
