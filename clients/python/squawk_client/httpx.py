"""Squawk as an `httpx` transport: an SDK that takes an `httpx.Client` (or
`httpx.AsyncClient`) as its `http_client` runs every attempt through the
pod's policy (see squawk_client._http; docs/sdks.md)::

    transport = SquawkTransport(SquawkClient(), upstream="openai")
    client = OpenAI(max_retries=0, http_client=httpx.Client(transport=transport))

Importing this module needs `httpx`; squawk-client itself does not.
"""

from __future__ import annotations

import httpx

from ._client import AsyncSquawkClient, SquawkClient
from ._http import AsyncSender, Sender
from ._runner import StepOptions

__all__ = ["AsyncSquawkTransport", "SquawkTransport"]


class SquawkTransport(httpx.BaseTransport):
    """A blocking transport: each request a step of `run_step_sync` for
    `upstream`, sent by `inner` (default: a new `httpx.HTTPTransport()`).
    `options` sets the rest of the step (profile, capability, deadline,
    attempts, estimated cost); `sdk_retries` counts the SDK's own resends."""

    def __init__(
        self,
        squawk: SquawkClient,
        upstream: str,
        *,
        inner: httpx.BaseTransport | None = None,
        options: StepOptions | None = None,
    ) -> None:
        self._inner = inner or httpx.HTTPTransport()
        self._send: Sender[httpx.Request, httpx.Response] = Sender(
            squawk, upstream, self._inner.handle_request, httpx.Response, options
        )

    @property
    def sdk_retries(self) -> int:
        return self._send.sdk_retries

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._send(request)

    def close(self) -> None:
        self._inner.close()


class AsyncSquawkTransport(httpx.AsyncBaseTransport):
    """The asyncio twin of SquawkTransport, for `httpx.AsyncClient`."""

    def __init__(
        self,
        squawk: AsyncSquawkClient,
        upstream: str,
        *,
        inner: httpx.AsyncBaseTransport | None = None,
        options: StepOptions | None = None,
    ) -> None:
        self._inner = inner or httpx.AsyncHTTPTransport()
        self._send: AsyncSender[httpx.Request, httpx.Response] = AsyncSender(
            squawk, upstream, self._inner.handle_async_request, httpx.Response, options
        )

    @property
    def sdk_retries(self) -> int:
        return self._send.sdk_retries

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._send(request)

    async def aclose(self) -> None:
        await self._inner.aclose()
