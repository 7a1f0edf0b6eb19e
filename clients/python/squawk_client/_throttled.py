"""The daemon's stub, with every call passed through the client's throttle.

A call the throttle refuses raises NotSent, an RpcError with the status the
daemon gives a call it has no room for (RESOURCE_EXHAUSTED), so the client's
one table of "not decided" answers it as it would the daemon's refusal: the
fallback decides, Admit and ReportOutcome fail open, the other calls raise.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from ._throttle import WINDOW_S, Throttle

__all__ = ["AsyncThrottledStub", "NotSent", "ThrottledStub"]


class NotSent(grpc.RpcError):
    """A call the client refused itself, sparing an overloaded daemon."""

    def __init__(self, method: str, requests: int, accepts: int) -> None:
        super().__init__()
        self._details = (
            f"squawk: not sent: the daemon answered {accepts} of the last {requests} "
            f"{method} calls in time ({WINDOW_S} s; client-side throttling)"
        )

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.RESOURCE_EXHAUSTED

    def details(self) -> str:
        return self._details

    def __str__(self) -> str:
        return self._details


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class _Gate:
    def __init__(self, stub: object, throttle: Throttle) -> None:
        self._stub = stub
        self._throttle = throttle

    def _ask(self, method: str) -> None:
        sent, requests, accepts = self._throttle.allow(method, _now_ms(), random.random())
        if not sent:
            raise NotSent(method, requests, accepts)

    def _ended(self, method: str, code: grpc.StatusCode) -> None:
        self._throttle.ended(method, _now_ms(), code)


class ThrottledStub(_Gate):
    """A blocking PolicyServiceStub behind the throttle."""

    def __getattr__(self, method: str) -> Callable[..., Any]:
        call = getattr(self._stub, method)

        def invoke(*args: Any, **kwargs: Any) -> Any:
            self._ask(method)
            try:
                reply = call(*args, **kwargs)
            except grpc.RpcError as exc:
                self._ended(method, exc.code())
                raise
            self._ended(method, grpc.StatusCode.OK)
            return reply

        return invoke


class AsyncThrottledStub(_Gate):
    """An asyncio PolicyServiceStub behind the throttle. The caller's own
    cancellation (CancelledError) counts the call as asked, nothing more."""

    def __getattr__(self, method: str) -> Callable[..., Awaitable[Any]]:
        call = getattr(self._stub, method)

        async def invoke(*args: Any, **kwargs: Any) -> Any:
            self._ask(method)
            try:
                reply = await call(*args, **kwargs)
            except grpc.RpcError as exc:
                self._ended(method, exc.code())
                raise
            self._ended(method, grpc.StatusCode.OK)
            return reply

        return invoke
