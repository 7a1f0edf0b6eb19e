"""An SDK behind Squawk at its HTTP layer: every attempt admitted, reported
and, on a failure, decided by the policy.

The official LLM SDKs (openai, anthropic) send every call through an
httpx-style client they accept as `http_client`; a transport is the one
seam below their own retry loop. `SyncTransport` and `AsyncTransport` are
the `squawk_client.httpx` and `squawk_client.httpx2` transports, written
once for both libraries (they share the transport API): each request is a
step of the runner (`run_step`, `run_step_sync`) for the named upstream,
so a request is admitted by the pod's pace and breaker, a response of 400
or more is a failed attempt that DecideRetry answers (the same payload is
resent after the decided wait on RETRY), and each success is reported with
its rate-limit headers and the tokens its JSON body says it used.

What the SDK gets back is what it would have got without Squawk: the last
response when the policy ends the step on an HTTP failure (its own error
type follows), the transport's exception when no response came, and, when
the pod refuses a dispatch before any call (a pace, a breaker, a
cool-down), a 503 of Squawk's own that says why (`x-squawk-reason`) and
asks the SDK not to retry it (`x-should-retry: false`). Corrections are
the step runner's: a 4xx is never rewritten here.

The SDK's own retries must be off (`max_retries=0`): left on, they resend
what Squawk already decided to end, invisibly to the pace. The SDKs number
their resends in `x-stainless-retry-count`; a request whose count is above
zero is counted (`sdk_retries`) and logged once per transport.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import replace
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from ._client import AsyncSquawkClient, SquawkClient
from ._errors import StepError, StepFailed
from ._runner import (
    CRITICALITY_HEADER,
    StepOptions,
    bounded_headers,
    criticality,
    run_step,
    run_step_sync,
)

__all__ = ["AsyncTransport", "SyncTransport"]

log = logging.getLogger("squawk_client")

# The most of a failed response's body the policy is shown (an envelope, an
# error message); the SDK still gets the whole response.
_MAX_ERROR_BODY = 64 * 1024
# A usage count past this is not a real one (StepOptions.cost's bound).
_MAX_TOKENS = 1e9


class Request(Protocol):
    @property
    def headers(self) -> MutableMapping[str, str]: ...


class Response(Protocol):
    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def content(self) -> bytes: ...
    def read(self) -> bytes: ...
    async def aread(self) -> bytes: ...


Req = TypeVar("Req", bound=Request)
Resp = TypeVar("Resp", bound=Response)


# What DecideRetry reads of a failure's headers; the rest stays with the SDK.
_WAIT_HEADERS = frozenset(
    {"retry-after", "retry-after-ms", "grpc-retry-pushback-ms", "x-should-retry"}
)


def _read_by_policy(lower: str) -> bool:
    return lower in _WAIT_HEADERS or "ratelimit" in lower or "rate-limit" in lower


class _Answered(StepError):
    """An HTTP failure, holding the response the SDK will get if it is the last.
    The upstream's headers are hostile input: only those the policy reads,
    within its bounds, go to DecideRetry."""

    def __init__(self, response: Response, body: bytes) -> None:
        super().__init__(
            f"HTTP {response.status_code}",
            http_status=response.status_code,
            body=body[:_MAX_ERROR_BODY],
            headers=bounded_headers(response.headers, _read_by_policy),
        )
        self.response = response


def used_tokens(response: Response) -> float:
    """The tokens a JSON body's `usage` states: OpenAI's `total_tokens`, else
    Anthropic's input plus output; 0 (unknown) for anything else."""
    if not _is_json(response):
        return 0.0
    try:
        usage = json.loads(response.content).get("usage") or {}
        total = usage.get("total_tokens")
        if total is None:
            total = usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
        tokens = float(total)
    except (ValueError, TypeError, AttributeError):
        return 0.0
    return tokens if 0.0 <= tokens <= _MAX_TOKENS else 0.0


def _is_json(response: Response) -> bool:
    kind = response.headers.get("content-type", "")
    return kind.split(";", 1)[0].strip().lower() == "application/json"


class _Common(Generic[Req, Resp]):
    def __init__(
        self,
        upstream: str,
        options: StepOptions | None,
        refusal: Callable[..., Resp],
    ) -> None:
        if not upstream:
            raise ValueError("upstream: name the upstream this client calls, e.g. 'openai'")
        # The runner's corrections need a hook this layer has not: none here.
        self.options = replace(options or StepOptions(), upstream=upstream)
        self.sdk_retries = 0
        self._refusal = refusal

    def notice(self, request: Req) -> None:
        """Send the criticality in force to the next hop (unless the request
        names one); count (and log once) a request the SDK is resending on
        its own."""
        level = self.options.criticality or criticality()
        if level is not None and CRITICALITY_HEADER not in request.headers:
            request.headers[CRITICALITY_HEADER] = level.name
        count = request.headers.get("x-stainless-retry-count", "0")
        if count.strip() in ("", "0"):
            return
        self.sdk_retries += 1
        if self.sdk_retries == 1:
            log.warning(
                "the SDK calling upstream %r retries on its own: set max_retries=0, so that "
                "only Squawk's policy resends (docs/sdks.md)",
                self.options.upstream,
            )

    def ended(self, request: Req, failed: StepFailed) -> Resp:
        """What the SDK gets when the policy ended the step."""
        cause = failed.__cause__
        if isinstance(cause, _Answered):
            return cause.response  # type: ignore[return-value]
        if cause is not None:
            raise cause  # no response came: the transport's own error
        reason = f"REASON_{failed.decision.reason.name}"
        body = {
            "type": "error",
            "error": {
                "type": "squawk_refused",
                "code": reason,
                "message": failed.decision.explanation,
            },
        }
        headers = {"x-should-retry": "false", "x-squawk-reason": reason}
        return self._refusal(503, headers=headers, json=body, request=request)


class SyncTransport(_Common[Req, Resp]):
    """A blocking transport (`handle_request`) around the library's own,
    `inner`; each library's module names its default and its response class."""

    # Set by squawk_client.httpx and squawk_client.httpx2.
    _default_inner: ClassVar[Callable[[], Any]]
    _response: ClassVar[Callable[..., Any]]

    def __init__(
        self,
        squawk: SquawkClient,
        upstream: str,
        *,
        inner: Any = None,
        options: StepOptions | None = None,
    ) -> None:
        """`inner` sends each request (default: a new HTTPTransport of the
        library); `options` sets the rest of the step (profile, capability,
        deadline, attempts, estimated cost)."""
        super().__init__(upstream, options, type(self)._response)
        self._squawk = squawk
        self._inner = type(self)._default_inner() if inner is None else inner

    def handle_request(self, request: Req) -> Resp:
        self.notice(request)

        def attempt(_: None) -> Resp:
            response: Resp = self._inner.handle_request(request)
            if response.status_code >= 400:
                raise _Answered(response, response.read())
            if _is_json(response):
                response.read()  # the SDK reads it next, from this copy
            return response

        try:
            return run_step_sync(
                self._squawk,
                attempt,
                None,
                options=self.options,
                cost_of=used_tokens,
                headers_of=_headers,
            )
        except StepFailed as failed:
            return self.ended(request, failed)

    def close(self) -> None:
        self._inner.close()


class AsyncTransport(_Common[Req, Resp]):
    """The asyncio twin of SyncTransport (`handle_async_request`)."""

    _default_inner: ClassVar[Callable[[], Any]]
    _response: ClassVar[Callable[..., Any]]

    def __init__(
        self,
        squawk: AsyncSquawkClient,
        upstream: str,
        *,
        inner: Any = None,
        options: StepOptions | None = None,
    ) -> None:
        """As SyncTransport's, with the library's AsyncHTTPTransport."""
        super().__init__(upstream, options, type(self)._response)
        self._squawk = squawk
        self._inner = type(self)._default_inner() if inner is None else inner

    async def handle_async_request(self, request: Req) -> Resp:
        self.notice(request)

        async def attempt(_: None) -> Resp:
            response: Resp = await self._inner.handle_async_request(request)
            if response.status_code >= 400:
                raise _Answered(response, await response.aread())
            if _is_json(response):
                await response.aread()
            return response

        try:
            return await run_step(
                self._squawk,
                attempt,
                None,
                options=self.options,
                cost_of=used_tokens,
                headers_of=_headers,
            )
        except StepFailed as failed:
            return self.ended(request, failed)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _headers(response: Any) -> Mapping[str, str]:
    headers: Mapping[str, str] = response.headers
    return headers
