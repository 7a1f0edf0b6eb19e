"""One executor of the outcome benchmark through an official LLM SDK: the
`openai` or `anthropic` package (async), against the upstream's loopback
mock of its API (POST /v1/chat/completions, /v1/messages).

Mode "none" is the SDK alone, with its own retries (the default
max_retries=2: the same 3 attempts as the other executors' budget); mode
"pod" is the SDK with max_retries=0 over Squawk's transport
(`squawk_client.httpx2.AsyncSquawkTransport` for the upstream, docs/sdks.md).
Arrivals, the config and the JSON written are those of bench.outcome.executor;
a step's attempts are counted below both retry loops, on the HTTP transport
that sends them.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import random
import sys
import time
from datetime import timedelta
from typing import Any

import anthropic
import httpx2
import openai

from squawk_client import StepOptions
from squawk_client.httpx2 import AsyncSquawkTransport

from .executor import STEP_UNDECIDED, CountingClient, arrivals

# The step an HTTP request belongs to: [its attempts so far].
STEP_ATTEMPTS: contextvars.ContextVar[list[int]] = contextvars.ContextVar("step_attempts")
API_KEY = "sk-bench-0000000000000000"
SDK_DEFAULT_RETRIES = 2  # both SDKs' default


class CountingTransport(httpx2.AsyncBaseTransport):
    """The HTTP transport, counting each request it sends for its step."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if (attempts := STEP_ATTEMPTS.get(None)) is not None:
            attempts[0] += 1
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def reason_of(exc: BaseException) -> str:
    """Why a step failed: Squawk's reason on its own refusal, else the status."""
    if isinstance(exc, openai.APIStatusError | anthropic.APIStatusError):
        refused = exc.response.headers.get("x-squawk-reason")
        return refused or f"HTTP {exc.status_code}"
    return type(exc).__name__


async def main(cfg: dict[str, Any]) -> None:
    ident: str = cfg["id"]
    mode: str = cfg["mode"]
    api: str = cfg["api"]
    deadline_s = float(cfg["deadline_s"])
    rng = random.Random(cfg["seed"])
    steps: list[list[Any]] = []
    limits = httpx2.Limits(max_connections=1024, max_keepalive_connections=1024)
    sent = CountingTransport(httpx2.AsyncHTTPTransport(limits=limits))
    squawk = CountingClient(cfg["daemon"]) if mode != "none" else None
    transport: httpx2.AsyncBaseTransport = sent
    if squawk is not None:
        options = StepOptions(
            max_attempts=int(cfg["max_attempts"]), deadline=timedelta(seconds=deadline_s)
        )
        transport = AsyncSquawkTransport(
            squawk, upstream=cfg["upstream"], inner=sent, options=options
        )
    http = httpx2.AsyncClient(transport=transport, timeout=deadline_s)
    common: dict[str, Any] = {
        "api_key": API_KEY,
        "base_url": cfg["url"],
        "max_retries": SDK_DEFAULT_RETRIES if squawk is None else 0,
        "timeout": deadline_s,
        "default_headers": {"x-executor": ident},
        "http_client": http,
    }
    chat = openai.AsyncOpenAI(**common) if api == "openai" else None
    messages = anthropic.AsyncAnthropic(**common) if api == "anthropic" else None

    async def ask(step_id: str) -> None:
        # The step's id in the prompt: each step a distinct request.
        if chat is not None:
            await chat.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"step {step_id}"}]
            )
        else:
            assert messages is not None
            await messages.messages.create(
                model="m", max_tokens=16, messages=[{"role": "user", "content": f"step {step_id}"}]
            )

    async def one(step_id: str) -> None:
        start = time.time()
        attempts, undecided = [0], [False]
        STEP_ATTEMPTS.set(attempts)  # this task's own context
        STEP_UNDECIDED.set(undecided)
        ok, reason = True, ""
        try:
            await asyncio.wait_for(ask(step_id), deadline_s)
        except TimeoutError:
            ok, reason = False, "DEADLINE_EXCEEDED"
        except Exception as exc:
            ok, reason = False, reason_of(exc)
        steps.append([start, time.time(), ok, reason, attempts[0], undecided[0]])

    await arrivals(cfg, rng, one)
    await http.aclose()
    calls: dict[int, list[int]] = {}
    if squawk is not None:
        calls = dict(squawk.calls)
        await squawk.close()
    with open(cfg["out"], "w") as f:
        json.dump({"id": ident, "steps": steps, "calls": calls}, f)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
