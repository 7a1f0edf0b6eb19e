"""No secret a caller sends comes out anywhere: the secrets canary.

One real daemon with every output on: spans exported over OTLP to a
collector on loopback, the decision log, Prometheus metrics, logging at
DEBUG, and AnalyzeError asking a model server on loopback that records
every prompt. Every slot of tests/support/canaries.py (each string field of each
RPC, in valid and refused calls) gets every secret shape, and no canary
marker may appear in any span, log line, decision-log line, metric,
prompt, status message or response field. The exceptions are the fields
that echo the caller's own names by contract: a violation's `parameter`
path, and AnalyzeError's suggested and rejected change names and values.
"""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf.message import Message

from canaries import MARKER, SHAPES, SLOTS, Call, calls, where
from chat_server import ChatServer, Reply, Seen, answer
from conftest import free_port, start_daemon
from loopback_sinks import OtlpReceiver, span_texts
from squawk.v1 import policy_pb2 as pb

SERVICE = "squawk.v1.PolicyService"
MODEL_KEY = "sk-modelkey-5f4e3d2c1b0a99887766"
RESPONSES: dict[str, type[Message]] = {
    "Classify": pb.ClassifyResponse,
    "DecideRetry": pb.DecideRetryResponse,
    "DecideRetryBatch": pb.DecideRetryBatchResponse,
    "AnalyzeError": pb.AnalyzeErrorResponse,
    "CheckDispatch": pb.CheckDispatchResponse,
    "GetEvents": pb.GetEventsResponse,
}


def _propose(seen: Seen) -> Reply:
    """One proposed change for parameter correction and another for
    re-resolution from dependency results (the system message says which is
    asked)."""
    try:
        system = seen.json["messages"][0]["content"]
    except (ValueError, LookupError, TypeError):
        system = ""
    currency = "CHF" if "dependency_results" in system else "Switzerland"
    return answer({"currency": currency}, "the error names this value")


@dataclass
class Answer:
    call: Call
    code: grpc.StatusCode
    details: str
    response: bytes


async def _ask(target: str, todo: list[Call]) -> list[Answer]:
    answers: list[Answer] = []
    limit = asyncio.Semaphore(8)
    async with grpc.aio.insecure_channel(target) as channel:

        async def one(call: Call) -> None:
            rpc: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                f"/{SERVICE}/{call.rpc}"
            )
            async with limit:
                try:
                    reply = await rpc(call.request, timeout=30)
                    answers.append(Answer(call, grpc.StatusCode.OK, "", reply))
                except grpc.aio.AioRpcError as exc:
                    answers.append(Answer(call, exc.code(), exc.details() or "", b""))

        await asyncio.gather(*(one(c) for c in todo))
    return answers


def _without_echoes(rpc: str, raw: bytes) -> bytes:
    """The response with the fields that name the caller's own parameters cleared."""
    response = RESPONSES[rpc].FromString(raw)
    if isinstance(response, pb.CheckDispatchResponse):
        for violation in response.violations:
            violation.parameter = ""
    elif isinstance(response, pb.AnalyzeErrorResponse):
        response.suggested_changes.Clear()
        for rejected in response.rejected_changes:
            rejected.parameter = ""
            rejected.proposed_value.Clear()
    return response.SerializeToString()


class Leaks:
    """Where each canary turned up: sink -> slot -> shapes."""

    def __init__(self) -> None:
        self.found: defaultdict[str, defaultdict[str, set[str]]] = defaultdict(
            lambda: defaultdict(set)
        )
        self.example: dict[str, str] = {}

    def scan(self, sink: str, text: str) -> None:
        for found in MARKER.finditer(text):
            slot, shape = where(found)
            self.found[sink][slot].add(shape)
            if sink not in self.example:
                start = max(0, found.start() - 120)
                self.example[sink] = text[start : found.end() + 60]
        if MODEL_KEY in text:
            self.found[sink]["the model API key"].add("sk-")

    def report(self) -> str:
        lines = []
        for sink, slots in sorted(self.found.items()):
            lines.append(f"{sink}: {sum(len(s) for s in slots.values())} leaks")
            for slot, shapes in sorted(slots.items()):
                every = len(shapes) == len(SHAPES)
                lines.append(f"  {slot}: {'every shape' if every else ', '.join(sorted(shapes))}")
            lines.append(f"  e.g. ...{self.example.get(sink, '')!r}...")
        return "\n".join(lines)


def test_no_canary_reaches_any_output(tmp_path: Path) -> None:
    todo = calls()
    decision_log = tmp_path / "decisions.jsonl"
    metrics_port = free_port()
    with (
        OtlpReceiver() as collector,
        ChatServer(respond=_propose) as model,
    ):
        daemon = start_daemon(
            "--decision-log",
            str(decision_log),
            "--metrics-listen",
            f"127.0.0.1:{metrics_port}",
            env={
                "SQUAWK_LOG_LEVEL": "DEBUG",
                **model.daemon_env(api_key=MODEL_KEY),
                "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_BSP_SCHEDULE_DELAY": "100",
            },
        )
        try:
            answers = asyncio.run(_ask(daemon.target, todo))
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as reply:
                metrics = reply.read().decode()
        finally:
            # SIGTERM flushes the span queue to the collector before exit.
            daemon.process.terminate()
            daemon.process.wait(timeout=20)
            output = daemon.output()
            daemon.log.close()
        exports = list(collector.requests)
        prompts = list(model.seen)

    wrong_status = [
        f"{a.call.slot} / {a.call.shape}: {a.code.name} {a.details[:160]!r}"
        for a in answers
        if a.code.name not in a.call.expect
    ]
    leaks = Leaks()
    for a in answers:
        if a.response:
            leaks.scan(
                "response fields", _without_echoes(a.call.rpc, a.response).decode(errors="replace")
            )
        leaks.scan("status details", a.details)
    for export in exports:
        for text in span_texts(export):
            leaks.scan("exported spans", text)
    leaks.scan("daemon stdout/stderr", output)
    leaks.scan("decision log", decision_log.read_text(errors="replace"))
    leaks.scan("metrics", metrics)
    for prompt in prompts:
        leaks.scan("model prompts", prompt.raw.decode(errors="replace"))
        headers = {k: v for k, v in prompt.headers.items() if k.lower() != "authorization"}
        leaks.scan("model request headers", repr(headers))

    # Every sink was really fed, or "no leak" would prove nothing.
    spans = sum(len(s.spans) for e in exports for r in e.resource_spans for s in r.scope_spans)
    analyzed = sum(1 for a in answers if a.call.rpc == "AnalyzeError" and a.code.name == "OK")
    assert spans >= len(todo), f"{spans} spans exported for {len(todo)} calls"
    assert len(prompts) >= analyzed > 0, f"{len(prompts)} prompts for {analyzed} analyses"
    assert "squawk_decisions_total{" in metrics
    assert decision_log.stat().st_size > 0
    if wrong_status or leaks.found:
        pytest.fail(
            f"{len(wrong_status)} calls answered an unexpected status:\n"
            + "\n".join(wrong_status[:40])
            + f"\n\n{len(todo)} calls, {len(SLOTS)} slots x {len(SHAPES)} shapes; canaries found:\n"
            + leaks.report(),
            pytrace=False,
        )


def test_every_canary_is_a_secret_to_the_eye_and_unique() -> None:
    """Each canary reads as its shape, and each marker names one slot and shape."""
    todo = calls()
    seen = [(c.slot, c.shape) for c in todo]
    assert len(set(seen)) == len(todo) == len(SLOTS) * len(SHAPES)
    shapes = {
        "bearer": r"Bearer \S{16,}",
        "openai sk-": r"\bsk-proj-[A-Za-z0-9]{20,}",
        "stripe sk_live_": r"\bsk_live_[A-Za-z0-9]{24}",
        "github ghp_": r"\bghp_[A-Za-z0-9]{36}\b",
        "aws AKIA": r"\bAKIA[0-9A-Z]{16}\b",
        "google AIza": r"\bAIza[0-9A-Za-z_-]{35}\b",
        "jwt": r"\beyJ[\w-]+\.eyJ[\w-]+\.[\w-]+",
        "slack xoxb-": r"\bxoxb-\d+-[\w-]+",
        "url credentials": r"https://[^:/]+:[^@/]+@",
        "?access_token=": r"[?&]access_token=\w+",
    }
    for name, build in SHAPES:
        text = build("QZ000X00QZ")
        assert MARKER.search(text), name
        if name in shapes:
            assert re.search(shapes[name], text), (name, text)
