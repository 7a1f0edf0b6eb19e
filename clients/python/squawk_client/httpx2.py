"""Squawk as an `httpx2` transport: an SDK that takes an `httpx2.Client` (or
`httpx2.AsyncClient`) as its `http_client` runs every attempt through the
pod's policy (see squawk_client._http; docs/sdks.md)::

    transport = SquawkTransport(SquawkClient(), upstream="openai")
    client = OpenAI(max_retries=0, http_client=httpx2.Client(transport=transport))

Importing this module needs `httpx2`; squawk-client itself does not.
"""

from __future__ import annotations

import httpx2

from ._client import AsyncSquawkClient, SquawkClient
from ._http import AsyncSender, Sender
from ._runner import StepOptions

__all__ = ["AsyncSquawkTransport", "SquawkTransport"]


class SquawkTransport(httpx2.BaseTransport):
    """A blocking transport: each request a step of `run_step_sync` for
    `upstream`, sent by `inner` (default: a new `httpx2.HTTPTransport()`).
    `options` sets the rest of the step (profile, capability, deadline,
    attempts, estimated cost); `sdk_retries` counts the SDK's own resends."""

    def __init__(
        self,
        squawk: SquawkClient,
        upstream: str,
        *,
        inner: httpx2.BaseTransport | None = None,
        options: StepOptions | None = None,
    ) -> None:
        self._inner = inner or httpx2.HTTPTransport()
        self._send: Sender[httpx2.Request, httpx2.Response] = Sender(
            squawk, upstream, self._inner.handle_request, httpx2.Response, options
        )

    @property
    def sdk_retries(self) -> int:
        return self._send.sdk_retries

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        return self._send(request)

    def close(self) -> None:
        self._inner.close()


class AsyncSquawkTransport(httpx2.AsyncBaseTransport):
    """The asyncio twin of SquawkTransport, for `httpx2.AsyncClient`."""

    def __init__(
        self,
        squawk: AsyncSquawkClient,
        upstream: str,
        *,
        inner: httpx2.AsyncBaseTransport | None = None,
        options: StepOptions | None = None,
    ) -> None:
        self._inner = inner or httpx2.AsyncHTTPTransport()
        self._send: AsyncSender[httpx2.Request, httpx2.Response] = AsyncSender(
            squawk, upstream, self._inner.handle_async_request, httpx2.Response, options
        )

    @property
    def sdk_retries(self) -> int:
        return self._send.sdk_retries

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return await self._send(request)

    async def aclose(self) -> None:
        await self._inner.aclose()
