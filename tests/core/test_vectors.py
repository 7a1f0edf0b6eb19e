"""The shared vector file, run in-process against the core, over the wire,
and against the Python client's fallback.

In-process goes through the same request conversion as the daemon, so a
failure here and not over the wire points at the server layer, and the other
way round. In-process is also the one place a case's fixed clock ("now")
reaches the Python core; the daemon and the client's fallback read the real
clock and answer the case's "live" expectation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message

from conftest import VECTORS, Reflected, free_port, subset_mismatches
from squawk.daemon.config import load_policy
from squawk.daemon.local import classify_locally, decide_locally
from squawk.policy import PolicyInputError
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc
from squawk_client import SquawkClient

CLASSIFY = [pytest.param(c, id=c["name"]) for c in VECTORS["classify"]]
DECIDE = [pytest.param(c, id=c["name"]) for c in VECTORS["decide"]]
INVALID = [pytest.param(c, id=c["name"]) for c in VECTORS["invalid"]]
REDACTION = [pytest.param(c, id=c["name"]) for c in VECTORS["redaction"]]
FALLBACK = [
    pytest.param(c, id=c["name"]) for c in VECTORS["decide"] if c.get("fallback") is not False
]
POLICY = load_policy(None, environ={})


def clock(case: dict[str, Any]) -> Callable[[], float]:
    """The case's fixed clock when it has one, else the real one."""
    now = case.get("now")
    return time.time if now is None else lambda: float(now)


def expected(case: dict[str, Any], *, live: bool, fallback: bool = False) -> dict[str, Any]:
    """What a reader must see: at the real clock a case's "live" answer wins,
    for a fallback its "fallback" object, else "expect"."""
    if live and "live" in case:
        answer: dict[str, Any] = case["live"]
    elif fallback and isinstance(case.get("fallback"), dict):
        answer = case["fallback"]
    else:
        answer = case["expect"]
    return answer


_ABSENT = object()


def mismatches(expect: Any, actual: Any, path: str = "") -> list[str]:
    """subset_mismatches, where an expected null means "this field is unset"."""
    if not isinstance(expect, dict) or not isinstance(actual, dict):
        return subset_mismatches(expect, actual, path)
    out: list[str] = []
    for key, value in expect.items():
        got = actual.get(key, _ABSENT)
        if value is None:
            if got is not _ABSENT:
                out.append(f"{path}.{key}: expected it unset, got {got!r}")
        elif got is _ABSENT:
            out.append(f"{path}.{key}: expected {value!r}, got nothing")
        else:
            out += mismatches(value, got, f"{path}.{key}")
    return out


def as_dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)


def test_clocked_cases_are_well_formed() -> None:
    for kind in ("classify", "decide"):
        for case in VECTORS[kind]:
            if "now" in case or "live" in case:
                assert isinstance(case.get("now"), int), case["name"]
                assert not isinstance(case.get("fallback"), dict), case["name"]


@pytest.mark.parametrize("case", CLASSIFY)
def test_classify_in_process(case: dict[str, Any]) -> None:
    request = json_format.ParseDict(case["request"], pb.ClassifyRequest())
    reply = as_dict(classify_locally(POLICY, request, clock(case)))
    assert mismatches(expected(case, live="now" not in case), reply) == []


@pytest.mark.parametrize("case", DECIDE)
def test_decide_in_process(case: dict[str, Any]) -> None:
    request = json_format.ParseDict(case["request"], pb.DecideRetryRequest())
    reply = as_dict(decide_locally(POLICY, request, clock(case)))
    assert mismatches(expected(case, live="now" not in case), reply) == []


@pytest.mark.parametrize("case", INVALID)
def test_invalid_in_process(case: dict[str, Any]) -> None:
    with pytest.raises(PolicyInputError) as info:
        if case["rpc"] == "Classify":
            classify_locally(POLICY, json_format.ParseDict(case["request"], pb.ClassifyRequest()))
        else:
            request = json_format.ParseDict(case["request"], pb.DecideRetryRequest())
            decide_locally(POLICY, request)
    assert info.value.field == case["field"]


# Over the wire, the calls are made as a black-box caller (grpcurl) makes
# them: descriptors from server reflection, proto3 JSON in and out, no
# generated code on the calling side.


@pytest.mark.parametrize("case", CLASSIFY)
def test_classify_over_the_wire(reflected: Reflected, case: dict[str, Any]) -> None:
    reply = reflected("Classify", case["request"])
    assert mismatches(expected(case, live=True), reply) == []


@pytest.mark.parametrize("case", DECIDE)
def test_decide_over_the_wire(reflected: Reflected, case: dict[str, Any]) -> None:
    reply = reflected("DecideRetry", case["request"])
    assert mismatches(expected(case, live=True), reply) == []


@pytest.mark.parametrize("case", INVALID)
def test_invalid_over_the_wire(reflected: Reflected, case: dict[str, Any]) -> None:
    with pytest.raises(grpc.RpcError) as info:
        reflected(case["rpc"], case["request"])
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (info.value.details() or "").startswith(case["field"] + ":")


@pytest.mark.parametrize("case", REDACTION)
def test_redaction_over_the_wire(channel: grpc.Channel, case: dict[str, Any]) -> None:
    stub = pb_grpc.PolicyServiceStub(channel)
    reply = stub.Classify(pb.ClassifyRequest(error_message=case["input"]), timeout=5)
    assert reply.redacted_message == case["redacted"]
    for secret in case["secrets"]:
        assert secret not in reply.redacted_message


# The Python client's fallback: the daemon is unreachable, so the client
# answers from the core itself, at the real clock and with corrections off.


@pytest.fixture(scope="module")
def unreachable() -> Iterator[SquawkClient]:
    with SquawkClient(f"127.0.0.1:{free_port()}") as client:
        yield client


@pytest.mark.parametrize("case", FALLBACK)
def test_decide_in_the_client_fallback(unreachable: SquawkClient, case: dict[str, Any]) -> None:
    before = unreachable.fallback_count
    decision = unreachable.decide_retry(
        json_format.ParseDict(case["request"], pb.DecideRetryRequest())
    )
    actual = {
        "action": "ACTION_" + decision.action.name,
        "reason": "REASON_" + decision.reason.name,
        "delay": f"{decision.delay.total_seconds():.6f}s",
        "explanation": decision.explanation,
        "consumesAttempt": decision.consumes_attempt,
        "classification": as_dict(decision.classification),
    }
    assert mismatches(expected(case, live=True, fallback=True), actual) == []
    assert decision.fallback
    assert unreachable.fallback_count == before + 1
