"""Squawk as an `httpx` transport: an SDK that takes an `httpx.Client` (or
`httpx.AsyncClient`) as its `http_client` runs every attempt through the
pod's policy (squawk_client._http says how; docs/sdks.md)::

    transport = SquawkTransport(SquawkClient(), upstream="openai")
    client = OpenAI(max_retries=0, http_client=httpx.Client(transport=transport))

Importing this module needs `httpx`; squawk-client itself does not.
"""

from __future__ import annotations

import httpx

from ._http import AsyncTransport, SyncTransport

__all__ = ["AsyncSquawkTransport", "SquawkTransport"]


class SquawkTransport(SyncTransport[httpx.Request, httpx.Response], httpx.BaseTransport):
    """For `httpx.Client`: each request a step of `run_step_sync` for
    `upstream`, sent by `inner` (default: a new `httpx.HTTPTransport()`);
    `sdk_retries` counts the SDK's own resends."""

    _default_inner = httpx.HTTPTransport
    _response = httpx.Response


class AsyncSquawkTransport(AsyncTransport[httpx.Request, httpx.Response], httpx.AsyncBaseTransport):
    """For `httpx.AsyncClient`: each request a step of `run_step` (default
    `inner`: a new `httpx.AsyncHTTPTransport()`)."""

    _default_inner = httpx.AsyncHTTPTransport
    _response = httpx.Response
