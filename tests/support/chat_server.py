"""A scripted OpenAI-compatible chat-completions server on loopback, for model tests.

`ChatServer` is an http.server on 127.0.0.1 that speaks POST
/v1/chat/completions and answers from a per-test script, or computes each
answer from the request, and can hold every request until the test releases
it; it records every request as it arrived on the socket. Nothing in the path
under test is patched: the backend's httpx client, its retry loop and the
analyzer run as in the daemon. The one seam is the retry sleep, replaced by a
recorder where a test asserts the exact backoff instead of waiting for it.

`LoopbackServer` is the recording HTTP server under it, for the other HTTP
peers a test stands up (an OTLP/HTTP collector).
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
from typing import Any, Self

from squawk.daemon.analysis import (
    Analysis,
    AnalysisRequest,
    Analyzer,
    AnalyzerSettings,
    Backend,
    ModelBackend,
)
from squawk.policy import builtin_policy

POLICY = builtin_policy()
API_KEY = "sk-apikeycanary-0000000000"


@dataclass
class Reply:
    """One answer: a chat completion (dict), text or raw bytes, after `delay_s`."""

    body: dict[str, Any] | str | bytes = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    content_type: str = "application/json"

    def encoded(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        return (self.body if isinstance(self.body, str) else json.dumps(self.body)).encode()


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


class LoopbackServer:
    """An HTTP server on a free loopback port that records every POST as it
    arrived and sends what `answer` returns for it.

    With `hold`, each request waits after it arrived (`arrived` is set) until
    the test sets `release`, or 10 s, so a call stays in flight for as long as
    a test needs one; leaving the context releases every request.
    """

    def __init__(self, *, hold: bool = False) -> None:
        self.seen: list[Seen] = []
        self.hold = hold
        self.arrived = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                seen = Seen(self.path, dict(self.headers.items()), raw)
                with server._lock:  # the answer is picked in arrival order
                    server.seen.append(seen)
                    reply = server.answer(seen)
                if server.hold:
                    server.arrived.set()
                    server.release.wait(10)
                time.sleep(reply.delay_s)
                data = reply.encoded()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.content_type)
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

    def answer(self, seen: Seen) -> Reply:
        """The reply to one request; called under the lock, in arrival order."""
        raise NotImplementedError

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()  # joins handler threads: at most one slow reply
        self.thread.join(5)


class ChatServer(LoopbackServer):
    """An OpenAI-compatible server on a free loopback port: each request gets
    the next scripted reply, then, once the script is spent, what `respond`
    computes from it (500 "script exhausted" without one)."""

    def __init__(
        self,
        *replies: Reply,
        respond: Callable[[Seen], Reply] | None = None,
        hold: bool = False,
    ) -> None:
        super().__init__(hold=hold)
        self.script = list(replies)
        self.respond = respond

    def answer(self, seen: Seen) -> Reply:
        reply = self.script.pop(0) if self.script else None
        if seen.path != "/v1/chat/completions":
            return Reply("no such route", status=404)
        if reply is None and self.respond is not None:
            reply = self.respond(seen)
        return reply if reply is not None else Reply("script exhausted", status=500)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def daemon_env(self, api_key: str | None = API_KEY) -> dict[str, str]:
        """The environment that points a daemon's analyzer at this server."""
        env = {
            "SQUAWK_ANALYZER_BACKEND": "openai",
            "SQUAWK_ANALYZER_BASE_URL": self.base_url,
            "SQUAWK_ANALYZER_MODEL": "scripted",
        }
        if api_key is not None:
            env["SQUAWK_ANALYZER_API_KEY"] = api_key
        return env


class ScriptedAPI(LoopbackServer):
    """Any API on loopback (OpenAI's, Anthropic's...): every request, whatever
    its path, gets the next scripted reply, then 500 once the script is spent."""

    def __init__(self, *replies: Reply) -> None:
        super().__init__()
        self.script = list(replies)

    def answer(self, seen: Seen) -> Reply:
        return self.script.pop(0) if self.script else Reply("script exhausted", status=500)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


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
