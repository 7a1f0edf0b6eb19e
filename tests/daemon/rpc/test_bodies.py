"""A large body parsed in slices reads as protobuf reads it whole."""

from __future__ import annotations

import asyncio

import pytest
from google.protobuf.message import DecodeError, Message

from squawk.daemon.server.rpc.bodies import MAX_PARSE_NOW, Malformed, Unparsed, reader
from squawk.daemon.server.rpc.turns import Turns
from squawk.v1 import policy_pb2 as pb


def _sliced(cls: type[Message], body: bytes) -> Message | Malformed:
    read = reader(cls)(body)
    assert isinstance(read, Unparsed)
    return asyncio.run(read.parse(Turns()))


def _batch(items: int = 2_000) -> pb.DecideRetryBatchRequest:
    batch = pb.DecideRetryBatchRequest()
    for i in range(items):
        item = batch.requests.add(attempt=1 + i % 3, http_status=503, upstream=f"u{i % 7}")
        item.headers.update({f"h{j}": "v" * j for j in range(i % 20)})
        if i % 5 == 0:
            item.deadline.seconds = i
        if i % 11 == 0:
            item.response_body = b"x" * 5_000
    return batch


def test_a_large_batch_reads_as_it_does_whole() -> None:
    body = _batch().SerializeToString()
    assert len(body) > 4 * MAX_PARSE_NOW
    assert _sliced(pb.DecideRetryBatchRequest, body) == pb.DecideRetryBatchRequest.FromString(body)


# Top-level fields the message does not have, between and after the items: a
# varint, a fixed64, a fixed32, a length-delimited one and a group (which is
# read whole with what follows it). Unknown fields are kept, as whole.
UNKNOWN = [b"\x98\x06\x2a", b"\x99\x06" + b"\x01" * 8, b"\x9d\x06" + b"\x02" * 4, b"\x9a\x06\x01z"]


@pytest.mark.parametrize("extra", [*UNKNOWN, b"\x9b\x06\x08\x01\x9c\x06"])
def test_fields_it_does_not_know_read_as_they_do_whole(extra: bytes) -> None:
    items = _batch(1_000).SerializeToString()
    body = items + extra + items + extra
    whole = pb.DecideRetryBatchRequest.FromString(body)
    sliced = _sliced(pb.DecideRetryBatchRequest, body)
    assert sliced == whole
    assert isinstance(sliced, Message)
    assert sliced.SerializeToString() == whole.SerializeToString()


@pytest.mark.parametrize(
    "body",
    [
        b"\x0a\x00" * 40_000 + b"\xff",  # broken at the end
        b"\x0a\x00" * 20_000 + b"\x0a\x02\xff\xff" + b"\x0a\x00" * 20_000,  # an item in the middle
        b"\x0a\xff\xff\xff\xff\x0f" + b"\x00" * 70_000,  # a length past the end
    ],
)
def test_a_broken_large_body_is_malformed(body: bytes) -> None:
    with pytest.raises(DecodeError):
        pb.DecideRetryBatchRequest.FromString(body)
    read = _sliced(pb.DecideRetryBatchRequest, body)
    assert isinstance(read, Malformed)
    assert read.type_name == "squawk.v1.DecideRetryBatchRequest"
