"""A loopback PolicyService that a test scripts: each Admit gets the next
answer of a list, DecideRetry answers UNAVAILABLE (so the client's local
fallback decides) and ReportOutcome records what it is sent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any

import grpc
from google.protobuf import json_format

from squawk.v1 import policy_pb2 as pb

__all__ = ["AdmitServer", "admit_servers"]


class AdmitServer:
    """A loopback PolicyService: Admit answers from a list, DecideRetry is
    UNAVAILABLE (so the client's fallback decides), ReportOutcome records."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.answers = [json_format.ParseDict(a, pb.AdmitResponse()) for a in answers]
        self.admit_requests: list[dict[str, Any]] = []
        self.reported: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def admit(self, request: pb.AdmitRequest, context: grpc.ServicerContext) -> pb.AdmitResponse:
        with self.lock:
            self.admit_requests.append(json_format.MessageToDict(request))
            if not self.answers:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "Admit called past the list")
            return self.answers.pop(0)

    def decide_retry(
        self, request: pb.DecideRetryRequest, context: grpc.ServicerContext
    ) -> pb.DecideRetryResponse:
        context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: the fallback decides")

    def report_outcome(
        self, request: pb.ReportOutcomeRequest, context: grpc.ServicerContext
    ) -> pb.ReportOutcomeResponse:
        with self.lock:
            self.reported += [json_format.MessageToDict(o) for o in request.outcomes]
        return pb.ReportOutcomeResponse(recorded=len(request.outcomes))

    def handler(self) -> grpc.GenericRpcHandler:
        def unary(fn: Any, req: Any, resp: Any) -> grpc.RpcMethodHandler[Any, Any]:
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=req.FromString, response_serializer=resp.SerializeToString
            )

        return grpc.method_handlers_generic_handler(
            "squawk.v1.PolicyService",
            {
                "Admit": unary(self.admit, pb.AdmitRequest, pb.AdmitResponse),
                "DecideRetry": unary(
                    self.decide_retry, pb.DecideRetryRequest, pb.DecideRetryResponse
                ),
                "ReportOutcome": unary(
                    self.report_outcome, pb.ReportOutcomeRequest, pb.ReportOutcomeResponse
                ),
            },
        )


@contextmanager
def admit_servers() -> Iterator[Callable[[list[dict[str, Any]]], tuple[str, AdmitServer]]]:
    """Yields a starter of loopback AdmitServers, (target, server); stops them all after."""
    servers: list[grpc.Server] = []

    def start(answers: list[dict[str, Any]]) -> tuple[str, AdmitServer]:
        scripted = AdmitServer(answers)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((scripted.handler(),))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}", scripted

    try:
        yield start
    finally:
        for server in servers:
            server.stop(None)
