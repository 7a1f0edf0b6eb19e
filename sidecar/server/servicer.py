"""The PolicyService servicer: convert the request, call the core, convert back.

Domain errors become INVALID_ARGUMENT naming the field; anything unexpected
becomes INTERNAL with a generic message and the traceback in the log, so a
request can never crash the daemon.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from ..convert import attempt_state, classification_message, decision_message, failure
from ..policy import Policy, PolicyInputError, classify, decide
from ..proto import policy_pb2 as pb
from ..proto import policy_pb2_grpc as pb_grpc

__all__ = ["MAX_BATCH", "PolicyServicer"]

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Method = Callable[["PolicyServicer", Req, grpc.aio.ServicerContext[Req, Resp]], Awaitable[Resp]]

MAX_BATCH = 10_000


def _boundary(method: Method[Req, Resp]) -> Method[Req, Resp]:
    @functools.wraps(method)
    async def wrapper(
        self: PolicyServicer, request: Req, context: grpc.aio.ServicerContext[Req, Resp]
    ) -> Resp:
        try:
            return await method(self, request, context)
        except PolicyInputError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except grpc.aio.AbortError:
            raise
        except Exception:
            log.exception("internal error in %s", method.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the daemon's log")
        raise AssertionError("unreachable: abort raises")

    return wrapper


class PolicyServicer(pb_grpc.PolicyServiceServicer):
    def __init__(
        self,
        policy: Policy,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self._policy = policy
        self._clock = clock
        self._rng = rng or random.Random()

    def classify(self, request: pb.ClassifyRequest) -> pb.ClassifyResponse:
        profile = self._policy.profile(request.profile)
        return classification_message(classify(failure(request), profile, self._clock))

    def decide(self, request: pb.DecideRetryRequest) -> pb.DecideRetryResponse:
        profile = self._policy.profile(request.profile)
        decision = decide(
            attempt_state(request),
            profile,
            self._clock,
            self._rng,
            self._policy.max_body_bytes,
        )
        return decision_message(decision)

    @_boundary
    async def Classify(
        self,
        request: pb.ClassifyRequest,
        context: grpc.aio.ServicerContext[pb.ClassifyRequest, pb.ClassifyResponse],
    ) -> pb.ClassifyResponse:
        return self.classify(request)

    @_boundary
    async def DecideRetry(
        self,
        request: pb.DecideRetryRequest,
        context: grpc.aio.ServicerContext[pb.DecideRetryRequest, pb.DecideRetryResponse],
    ) -> pb.DecideRetryResponse:
        return self.decide(request)

    @_boundary
    async def DecideRetryBatch(
        self,
        request: pb.DecideRetryBatchRequest,
        context: grpc.aio.ServicerContext[pb.DecideRetryBatchRequest, pb.DecideRetryBatchResponse],
    ) -> pb.DecideRetryBatchResponse:
        if len(request.requests) > MAX_BATCH:
            raise PolicyInputError(
                "requests", f"{len(request.requests)} requests is over the limit of {MAX_BATCH}"
            )
        results = []
        for i, item in enumerate(request.requests):
            try:
                results.append(pb.DecideRetryBatchResult(decision=self.decide(item)))
            except PolicyInputError as exc:
                results.append(pb.DecideRetryBatchResult(error=f"requests[{i}].{exc}"))
        return pb.DecideRetryBatchResponse(results=results)

    @_boundary
    async def AnalyzeError(
        self,
        request: pb.AnalyzeErrorRequest,
        context: grpc.aio.ServicerContext[pb.AnalyzeErrorRequest, pb.AnalyzeErrorResponse],
    ) -> pb.AnalyzeErrorResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "AnalyzeError is not implemented yet")
        raise AssertionError("unreachable")

    @_boundary
    async def CheckDispatch(
        self,
        request: pb.CheckDispatchRequest,
        context: grpc.aio.ServicerContext[pb.CheckDispatchRequest, pb.CheckDispatchResponse],
    ) -> pb.CheckDispatchResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "CheckDispatch is not implemented yet")
        raise AssertionError("unreachable")
