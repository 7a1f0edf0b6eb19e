"""The model backend: the only module that does network I/O.

It POSTs the prompt from `prompt` to an OpenAI-compatible
`{base_url}/chat/completions` with httpx, and reads back the `changes`
object. Failed calls are retried exactly as Squawk tells its own executors
to retry LLM calls: each failure becomes an AttemptState for the policy's
"llm" profile (429/500/502/503/504/529 and transport failures, 3 attempts,
sine-jittered backoff, Retry-After honoured) and the core's `decide()` says
whether and when to resend. The settings' `deadline` is passed as the
attempt's deadline, so no retry is made whose wait would outlast it.

It never raises to its caller: a timeout, an exhausted retry, a refusal or
an answer that is not strict JSON comes back as an empty Proposal whose
`why_not` says what happened, and the analyzer falls back to the offline
layer. Log lines name statuses and exception classes only, never the
prompt, the answer or the key.

The answer is hostile input. Its body is read raw and decoded here, never
past MAX_RESPONSE_BYTES: the request asks for gzip or nothing, a gzip body
is inflated step by step with a cap on its output (a 256 KB body that
inflates to 256 MB stops at the cap), and any other encoding is refused.
Parsing it (and building the prompt) runs on the analysis worker thread,
and the answer's text and `changes` are bounded in size and depth (see
`prompt.parse_answer`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta

import httpx

from squawk.policy import Action, AttemptState, Profile, decide

from .cache import TTLCache
from .heuristic import show
from .prompt import Mode, answer_content, messages, parse_answer
from .settings import AnalyzerSettings
from .types import AnalysisRequest, Json, Proposal, Source
from .worker import Worker

__all__ = ["ACCEPT_ENCODING", "MAX_RESPONSE_BYTES", "ModelBackend"]

log = logging.getLogger(__name__)

# The answer's body, after decoding; the bytes on the wire get a little
# room over it (gzip of incompressible data is slightly larger).
MAX_RESPONSE_BYTES = 1 << 20
_MAX_WIRE_BYTES = MAX_RESPONSE_BYTES + (64 << 10)
# The only encodings whose decoded size is capped here, so the only ones asked for.
ACCEPT_ENCODING = "gzip, identity"

Sleep = Callable[[float], Awaitable[None]]


_HINTS = ("retry-after", "grpc-retry-pushback-ms")
_MAX_HINT_CHARS = 256


class _Failed(Exception):
    """One model call that gave no answer; `status` (0 = none arrived) feeds decide()."""

    def __init__(
        self,
        what: str,
        cause: str,
        status: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(what)
        self.what = what
        self.cause = cause
        self.status = status
        # Only the wait hints: decide() bounds the headers it is given, and
        # a model server's other headers are no business of the policy.
        self.headers = {
            name: value[:_MAX_HINT_CHARS]
            for name, value in (headers or {}).items()
            if name.lower() in _HINTS
        }


class _Body:
    """An answer's body, decoded as it arrives and never past MAX_RESPONSE_BYTES."""

    def __init__(self, encoding: str) -> None:
        coding = encoding.strip().lower()
        if coding not in ("", "identity", "gzip"):
            raise _Failed("an answer in an encoding it was not asked for", "bad_response", 200)
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if coding == "gzip" else None
        self._wire = 0
        self.data = bytearray()

    def _keep(self, data: bytes) -> None:
        self.data += data
        if len(self.data) > MAX_RESPONSE_BYTES:
            raise _Failed(f"an answer over {MAX_RESPONSE_BYTES} bytes", "bad_response", 200)

    def feed(self, chunk: bytes) -> None:
        self._wire += len(chunk)
        if self._wire > _MAX_WIRE_BYTES:
            raise _Failed(f"an answer over {MAX_RESPONSE_BYTES} bytes", "bad_response", 200)
        if self._inflate is None:
            self._keep(chunk)
            return
        try:
            while chunk and not self._inflate.eof:
                # At most one byte past the cap per step: that byte is the refusal.
                room = MAX_RESPONSE_BYTES - len(self.data) + 1
                self._keep(self._inflate.decompress(chunk, room))
                chunk = self._inflate.unconsumed_tail
        except zlib.error:
            raise _Failed("an answer that is not valid gzip", "bad_response", 200) from None

    def finish(self) -> bytes:
        if self._inflate is not None and not self._inflate.eof:
            raise _Failed("an answer that is not valid gzip", "bad_response", 200)
        return bytes(self.data)


def _completion(body: bytes) -> str | _Failed:
    """The assistant's text from a chat-completions body (on the worker thread)."""
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        return _Failed("an answer that is not JSON", "bad_response", 200)
    if not isinstance(decoded, dict):
        return _Failed("an answer that is not a chat completion", "bad_response", 200)
    content = answer_content(decoded)
    if content is None:
        return _Failed("a refusal or an empty answer", "refusal", 200)
    return content


class ModelBackend:
    def __init__(
        self,
        settings: AnalyzerSettings,
        profile: Profile,
        *,
        sleep: Sleep = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        worker: Worker | None = None,
    ) -> None:
        self._settings = settings
        self._profile = profile
        self._sleep = sleep
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        # The analyzer passes its own; a backend built alone gets one it closes.
        self._owns_worker = worker is None
        self._worker = worker or Worker()
        self._cache: TTLCache[dict[str, Json]] = TTLCache(
            settings.cache_ttl.total_seconds(), settings.cache_size, monotonic
        )
        self._client: httpx.AsyncClient | None = None

    @property
    def url(self) -> str:
        return self._settings.base_url.rstrip("/") + "/chat/completions"

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._owns_worker:
            self._worker.close()

    def _payload(self, chat: list[dict[str, str]]) -> dict[str, object]:
        payload: dict[str, object] = {
            "model": self._settings.model,
            "messages": chat,
            "temperature": 0,
            "max_tokens": self._settings.max_tokens,
        }
        if self._settings.json_mode:
            payload["response_format"] = {"type": "json_object"}
        return payload

    async def _post(self, payload: dict[str, object]) -> bytes:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=self._settings.timeout.total_seconds(), follow_redirects=False
            )
        headers = {"Accept": "application/json", "Accept-Encoding": ACCEPT_ENCODING}
        if self._settings.api_key:
            headers["Authorization"] = f"Bearer {self._settings.api_key}"
        async with self._client.stream("POST", self.url, json=payload, headers=headers) as resp:
            if resp.status_code != 200:
                status = resp.status_code
                cause = (
                    "rate_limited"
                    if status == 429
                    else "server_error"
                    if status >= 500
                    else "http_error"
                )
                raise _Failed(f"HTTP {status}", cause, status, resp.headers)
            # Raw bytes: httpx would inflate a gzip body whole before any
            # size check could see it.
            body = _Body(resp.headers.get("Content-Encoding", ""))
            async for chunk in resp.aiter_raw():
                body.feed(chunk)
            return body.finish()

    async def _complete(self, chat: list[dict[str, str]]) -> str | _Failed:
        """The assistant's text, retried under the "llm" profile; a _Failed when none came."""
        payload = self._payload(chat)
        budget = self._settings.deadline.total_seconds()
        started = self._monotonic()
        attempt = 0
        while True:
            attempt += 1
            left = budget - (self._monotonic() - started)
            try:
                async with asyncio.timeout(min(self._settings.timeout.total_seconds(), left)):
                    raw = await self._post(payload)
            except TimeoutError:
                failure = _Failed(
                    f"no answer within {self._settings.timeout.total_seconds():g}s", "timeout"
                )
            except httpx.HTTPError as exc:
                failure = _Failed(f"a transport error ({type(exc).__name__})", "transport")
            except _Failed as exc:
                failure = exc
            else:
                return await self._worker.run(_completion, raw)
            if failure.status == 200:
                return failure  # the server answered; resending the same prompt will not help
            left = budget - (self._monotonic() - started)
            state = AttemptState(
                attempt=attempt,
                http_status=failure.status,
                transport_failure=failure.status == 0,
                headers=failure.headers,
                deadline=timedelta(seconds=max(0.0, left)),
            )
            decision = decide(state, self._profile, self._wall_clock)
            if decision.action is not Action.RETRY:
                failure.what += f"; {decision.explanation}"
                return failure
            log.info(
                "model call failed with %s; retrying in %d ms (attempt %d)",
                failure.what,
                decision.delay // timedelta(milliseconds=1),
                attempt + 1,
            )
            await self._sleep(decision.delay.total_seconds())

    def _prompt(
        self, request: AnalysisRequest, error_text: str, mode: Mode
    ) -> tuple[list[dict[str, str]], str]:
        """The chat, and its cache key (on the worker thread: it reads the whole request)."""
        chat = messages(request, error_text, mode)
        text = json.dumps([self.url, self._settings.model, mode.value, chat], sort_keys=True)
        return chat, hashlib.sha256(text.encode()).hexdigest()

    async def propose(self, request: AnalysisRequest, error_text: str, mode: Mode) -> Proposal:
        """The model's proposal; an empty one (with why_not) when the model failed or declined."""
        source = Source.LLM if mode is Mode.CORRECT else Source.CONTEXTUAL
        chat, key = await self._worker.run(self._prompt, request, error_text, mode)
        changes = self._cache.get(key)
        if changes is None:
            try:
                content = await self._complete(chat)
            except Exception as exc:  # a model must never fail the RPC
                # The class only: an exception's text may quote the prompt.
                log.error("model analyzer failed unexpectedly: %s", type(exc).__name__)
                content = _Failed(f"an unexpected {type(exc).__name__}", "error")
            if isinstance(content, _Failed):
                log.warning(
                    "model analyzer unavailable (%s); using the offline analyzer", content.what
                )
                return Proposal(
                    source, why_not=f"the model gave {content.what}", failure=content.cause
                )
            changes = await self._worker.run(parse_answer, content)
            if changes is None:
                log.warning("model answer is not strict JSON; using the offline analyzer")
                return Proposal(
                    source, why_not="the model's answer was not strict JSON", failure="unparsable"
                )
            self._cache.put(key, changes)
        if not changes:
            return Proposal(source, why_not="the model found no correction")
        return await self._worker.run(_proposal, source, request, changes)


def _proposal(source: Source, request: AnalysisRequest, changes: Mapping[str, Json]) -> Proposal:
    params = request.original_request
    notes = {
        name: f"{name} {show(params[name]) if name in params else '(unset)'} -> {show(value)}"
        for name, value in changes.items()
    }
    return Proposal(source, dict(changes), notes)
