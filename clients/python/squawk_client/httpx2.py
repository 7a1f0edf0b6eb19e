"""Squawk as an `httpx2` transport: an SDK that takes an `httpx2.Client` (or
`httpx2.AsyncClient`) as its `http_client` runs every attempt through the
pod's policy (squawk_client._http says how; docs/sdks.md)::

    transport = SquawkTransport(SquawkClient(), upstream="openai")
    client = OpenAI(max_retries=0, http_client=httpx2.Client(transport=transport))

Importing this module needs `httpx2`; squawk-client itself does not.
"""

from __future__ import annotations

import httpx2

from ._http import AsyncTransport, SyncTransport

__all__ = ["AsyncSquawkTransport", "SquawkTransport"]


class SquawkTransport(SyncTransport[httpx2.Request, httpx2.Response], httpx2.BaseTransport):
    """For `httpx2.Client`: each request a step of `run_step_sync` for
    `upstream`, sent by `inner` (default: a new `httpx2.HTTPTransport()`);
    `sdk_retries` counts the SDK's own resends."""

    _default_inner = httpx2.HTTPTransport
    _response = httpx2.Response


class AsyncSquawkTransport(
    AsyncTransport[httpx2.Request, httpx2.Response], httpx2.AsyncBaseTransport
):
    """For `httpx2.AsyncClient`: each request a step of `run_step` (default
    `inner`: a new `httpx2.AsyncHTTPTransport()`)."""

    _default_inner = httpx2.AsyncHTTPTransport
    _response = httpx2.Response
