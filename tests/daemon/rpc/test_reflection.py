"""Server reflection carries policy.proto's comments, so `grpcurl describe`
shows every field's default, unit and bounds, read from the running daemon
exactly as a reflection client reads them."""

from __future__ import annotations

import re
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from conftest import ROOT
from squawk.v1 import policy_pb2 as pb

PROTO = (ROOT / "protos" / "squawk" / "v1" / "policy.proto").read_text().splitlines()

# Field numbers of descriptor.proto, which SourceCodeInfo paths are made of.
FILE_MESSAGE, FILE_ENUM, FILE_SERVICE = 4, 5, 6
MESSAGE_FIELD, MESSAGE_NESTED = 2, 3
ENUM_VALUE = 2
SERVICE_METHOD = 2

Path = tuple[int, ...]


@pytest.fixture(scope="module")
def served(channel: grpc.Channel) -> descriptor_pb2.FileDescriptorProto:
    return ProtoReflectionDescriptorDatabase(channel).FindFileContainingSymbol(
        "squawk.v1.PolicyService"
    )


def leading_comments(file: descriptor_pb2.FileDescriptorProto) -> dict[Path, str]:
    return {tuple(loc.path): loc.leading_comments for loc in file.source_code_info.location}


def messages(
    types: list[descriptor_pb2.DescriptorProto], prefix: str, path: Path
) -> Iterator[tuple[str, Path, descriptor_pb2.DescriptorProto]]:
    """Every message the .proto declares; map entries are protoc's, uncommented."""
    for i, message in enumerate(types):
        if message.options.map_entry:
            continue
        yield prefix + message.name, (*path, i), message
        yield from messages(
            list(message.nested_type), f"{prefix}{message.name}.", (*path, i, MESSAGE_NESTED)
        )


def element_paths(file: descriptor_pb2.FileDescriptorProto) -> dict[str, Path]:
    """Where each named element's comment sits, by name as the .proto writes it."""
    paths: dict[str, Path] = {}
    for si, service in enumerate(file.service):
        paths[service.name] = (FILE_SERVICE, si)
        for mi, method in enumerate(service.method):
            paths[f"{service.name}.{method.name}"] = (FILE_SERVICE, si, SERVICE_METHOD, mi)
    for ei, enum in enumerate(file.enum_type):
        paths[enum.name] = (FILE_ENUM, ei)
        for vi, value in enumerate(enum.value):
            paths[value.name] = (FILE_ENUM, ei, ENUM_VALUE, vi)
    for name, path, message in messages(list(file.message_type), "", (FILE_MESSAGE,)):
        paths[name] = path
        for fi, field in enumerate(message.field):
            paths[f"{name}.{field.name}"] = (*path, MESSAGE_FIELD, fi)
    return paths


def comment_in_proto(declaration: str, inside: str = "") -> str:
    """The `//` lines right above the first line starting with `declaration`
    (after the line `inside`, when given), as protoc keeps them: the text
    after each `//`, one line each."""
    start = PROTO.index(inside) if inside else 0
    line = next(i for i in range(start, len(PROTO)) if PROTO[i].strip().startswith(declaration))
    comment: list[str] = []
    while PROTO[line - 1].strip().startswith("//"):
        line -= 1
        comment.insert(0, PROTO[line].strip().removeprefix("//") + "\n")
    assert comment, f"no comment above {declaration!r} in policy.proto"
    return "".join(comment)


@pytest.mark.parametrize(
    ("element", "declaration", "inside"),
    [
        ("PolicyService", "service PolicyService {", ""),
        ("PolicyService.DecideRetry", "rpc DecideRetry(", ""),
        ("DecideRetryRequest", "message DecideRetryRequest {", ""),
        (
            "DecideRetryRequest.max_attempts",
            "optional int32 max_attempts =",
            "message DecideRetryRequest {",
        ),
        ("ClassifyRequest.headers", "map<string, string> headers =", "message ClassifyRequest {"),
        ("REASON_DEADLINE_EXCEEDED", "REASON_DEADLINE_EXCEEDED =", ""),
    ],
)
def test_reflection_serves_the_proto_comment(
    served: descriptor_pb2.FileDescriptorProto, element: str, declaration: str, inside: str
) -> None:
    comments = leading_comments(served)
    path = element_paths(served)[element]
    assert comments.get(path) == comment_in_proto(declaration, inside)


def test_every_message_field_has_its_comment(served: descriptor_pb2.FileDescriptorProto) -> None:
    comments = leading_comments(served)
    uncommented = [
        f"{name}.{field.name}"
        for name, path, message in messages(list(served.message_type), "", (FILE_MESSAGE,))
        for fi, field in enumerate(message.field)
        if not comments.get((*path, MESSAGE_FIELD, fi), "").strip()
    ]
    assert served.message_type, "reflection served no messages"
    assert uncommented == []


def test_the_commented_file_describes_the_messages_the_daemon_decodes(
    served: descriptor_pb2.FileDescriptorProto,
) -> None:
    # The comments come from a second protoc output; a stale one would
    # describe fields the daemon does not have.
    contract = descriptor_pb2.FileDescriptorProto()
    contract.CopyFrom(served)
    contract.ClearField("source_code_info")
    clear_default_json_names(list(contract.message_type))
    compiled = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(compiled)
    assert contract == compiled


def clear_default_json_names(types: list[descriptor_pb2.DescriptorProto]) -> None:
    """protoc's descriptor set spells out every field's JSON name, which the
    embedded descriptor leaves to the default lowerCamelCase."""
    for message in types:
        for field in message.field:
            assert field.json_name == re.sub(r"_([a-z])", lambda m: m[1].upper(), field.name)
            field.ClearField("json_name")
        clear_default_json_names(list(message.nested_type))


def test_reflection_still_lists_and_serves_the_other_services(channel: grpc.Channel) -> None:
    database = ProtoReflectionDescriptorDatabase(channel)
    assert database.get_services() == [
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "squawk.v1.PolicyService",
    ]
    health = database.FindFileContainingSymbol("grpc.health.v1.Health")
    assert [s.name for s in health.service] == ["Health"]
    with pytest.raises(KeyError):
        database.FindFileContainingSymbol("squawk.v1.NoSuchService")
