"""A scripted OpenAI-compatible chat-completions server on loopback, for model tests.

`ChatServer` is an http.server on 127.0.0.1 that speaks POST
/v1/chat/completions and answers from a per-test script; it records every
request as it arrived on the socket. Nothing in the path under test is
patched: the backend's httpx client, its retry loop and the analyzer run
as in the daemon. The one seam is the retry sleep, replaced by a recorder
where a test asserts the exact backoff instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sidecar.analysis import (
    Analysis,
    AnalysisRequest,
    Analyzer,
    AnalyzerSettings,
    Backend,
    ModelBackend,
)
from sidecar.policy import builtin_policy

POLICY = builtin_policy()
API_KEY = "sk-apikeycanary-0000000000"


@dataclass
class Reply:
    """One scripted answer: a chat completion (dict), text or raw bytes, after `delay_s`."""

    body: dict[str, Any] | str | bytes = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def completion(content: str | None, refusal: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if refusal is not None:
        message["refusal"] = refusal
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }


def answer(changes: dict[str, Any], reason: str = "fixed") -> Reply:
    return Reply(completion(json.dumps({"changes": changes, "reason": reason})))


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    raw: bytes

    @property
    def json(self) -> dict[str, Any]:
        decoded: dict[str, Any] = json.loads(self.raw)
        return decoded

    @property
    def prompt(self) -> str:
        return "\n".join(m["content"] for m in self.json["messages"])


class ChatServer:
    """A scripted OpenAI-compatible server on a free loopback port."""

    def __init__(self, *replies: Reply) -> None:
        self.script = list(replies)
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with server._lock:
                    server.seen.append(Seen(self.path, dict(self.headers.items()), raw))
                    reply = server.script.pop(0) if server.script else None
                if self.path != "/v1/chat/completions":
                    reply = Reply("no such route", status=404)
                if reply is None:
                    reply = Reply("script exhausted", status=500)
                time.sleep(reply.delay_s)
                if isinstance(reply.body, bytes):
                    data = reply.body
                else:
                    text = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                    data = text.encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (the timeout test); nothing to answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()  # joins handler threads: at most one slow reply
        self.thread.join(5)


def settings_for(server: ChatServer, **overrides: Any) -> AnalyzerSettings:
    base = AnalyzerSettings(
        backend=Backend.OPENAI,
        base_url=server.base_url,
        model="scripted",
        api_key=API_KEY,
        # Generous for a loaded machine; the tests about timeouts set their own.
        timeout=timedelta(seconds=2),
        deadline=timedelta(seconds=4),
    )
    return AnalyzerSettings(**{**{f: getattr(base, f) for f in base.__slots__}, **overrides})


def analyze(
    settings: AnalyzerSettings,
    *requests: AnalysisRequest,
    sleeps: list[float] | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> list[Analysis]:
    """Run requests through one Analyzer (one client, one cache) and close it."""

    async def fake_sleep(seconds: float) -> None:
        assert sleeps is not None
        sleeps.append(seconds)

    async def main() -> list[Analysis]:
        model = ModelBackend(
            settings,
            POLICY.profile("llm"),
            sleep=asyncio.sleep if sleeps is None else fake_sleep,
            monotonic=monotonic,
        )
        analyzer = Analyzer(settings, POLICY, model=model)
        try:
            return [await analyzer.analyze(r) for r in requests]
        finally:
            await analyzer.aclose()

    return asyncio.run(main())
