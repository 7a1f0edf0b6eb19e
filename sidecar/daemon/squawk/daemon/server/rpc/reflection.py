"""Server reflection that carries the comments of squawk/v1/*.proto.

A reflection client (`grpcurl describe`, grpcio-reflection's descriptor
database) shows a comment only if the FileDescriptorProto it receives has
source_code_info. The stock servicer never sends it: protoc's Python plugin
embeds each descriptor without source info, and the servicer re-serializes
descriptors with CopyToProto, which under the upb backend drops it anyway.
So `make gen` also writes squawk/v1/descriptors.binpb with source info, and
this wrapper forwards every request to the stock servicer and, in each file
descriptor answer, swaps our files for the ones with comments. Everything
else (the service list, errors, the well-known types, health's and
reflection's own files) stays the stock answer; a servicer of our own would
re-implement a protocol the stock one already gets right.

Only grpc.reflection.v1alpha is served, as grpcio-reflection does: grpcurl
asks for v1 first and falls back to v1alpha on UNIMPLEMENTED.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, MutableSequence
from pathlib import Path
from typing import cast

import grpc
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from squawk.v1 import policy_pb2 as pb

__all__ = ["CommentedReflectionServicer", "commented_files", "enable_reflection"]

SERVICE_NAME = reflection.SERVICE_NAME

Request = reflection_pb2.ServerReflectionRequest
Response = reflection_pb2.ServerReflectionResponse


def commented_files() -> dict[str, bytes]:
    """The serialized FileDescriptorProto of each squawk.v1 file, with its
    comments, by file name."""
    # Beside the generated module rather than through importlib.resources:
    # squawk.v1 is a namespace package, and Python 3.11's namespace reader
    # refuses the path entry of an editable install (NotADirectoryError).
    data = Path(pb.__file__).with_name("descriptors.binpb").read_bytes()
    files = descriptor_pb2.FileDescriptorSet.FromString(data).file
    return {f.name: f.SerializeToString() for f in files}


class CommentedReflectionServicer(reflection_pb2_grpc.ServerReflectionServicer):
    def __init__(self, service_names: Iterable[str], files: dict[str, bytes]) -> None:
        self._stock = reflection.aio.ReflectionServicer(service_names)
        self._files = files

    async def ServerReflectionInfo(
        self,
        request_iterator: AsyncIterable[Request],
        context: grpc.aio.ServicerContext[Request, Response],
    ) -> AsyncIterator[Response]:
        # An async generator at run time; the stubs declare a coroutine.
        answers = cast(
            AsyncIterable[Response], self._stock.ServerReflectionInfo(request_iterator, context)
        )
        async for response in answers:
            if response.HasField("file_descriptor_response"):
                self._swap(response.file_descriptor_response.file_descriptor_proto)
            yield response

    def _swap(self, protos: MutableSequence[bytes]) -> None:
        for i, serialized in enumerate(protos):
            name = descriptor_pb2.FileDescriptorProto.FromString(serialized).name
            commented = self._files.get(name)
            if commented is not None:
                protos[i] = commented


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Serve reflection for `service_names` and for reflection itself."""
    servicer = CommentedReflectionServicer((*service_names, SERVICE_NAME), commented_files())
    # The stubs leave the generated registration function untyped.
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
