"""The most expensive AnalyzeError and CheckDispatch requests that fit every bound.

Used by test_analysis_stream.py (the daemon keeps answering health checks
while it serves them) and, run as a script, to measure what each costs:

    .venv/bin/python tests/support/analysis_worst.py

Each request is built to defeat one shortcut at the limits of `bounds`:
as many values as allowed, every one of them examined, every search run
to the end of its budget.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from squawk.daemon.analysis import Analyzer, AnalyzerSettings, check_dispatch, wire
from squawk.daemon.analysis.bounds import MAX_ITEMS, MAX_STRING_CHARS, MAX_VALUES
from squawk.policy import builtin_policy
from squawk.v1 import policy_pb2 as pb

__all__ = ["WORST_ANALYZE_ERROR", "WORST_CHECK_DISPATCH"]


def many_parameters() -> pb.AnalyzeErrorRequest:
    """Every parameter one slip from its enum and named in the error: each is examined."""
    count = (MAX_VALUES - 1) // 5  # a value, and a schema of an enum of two
    names = [f"param_{i}" for i in range(count)]
    request = pb.AnalyzeErrorRequest(http_status=400, error_response="invalid: " + " ".join(names))
    request.original_request.update({n: f"valu{i}" for i, n in enumerate(names)})
    request.parameter_schema.update(
        {"properties": {n: {"enum": [f"value{i}", "x"]} for i, n in enumerate(names)}}
    )
    return request


def near_enum() -> pb.AnalyzeErrorRequest:
    """One value of 64 characters against the most members one enum holds, all one slip off."""
    value = ("abcdefgh" * 8)[:64]
    members: list[Any] = [value[:i] + "~" + value[i + 1 :] for i in range(64)]
    members = (members * (MAX_ITEMS // len(members) + 1))[:MAX_ITEMS]
    request = pb.AnalyzeErrorRequest(http_status=400, error_response=f"bad code {value}")
    request.original_request.update({"code": value})
    request.parameter_schema.update({"properties": {"code": {"enum": members}}})
    return request


def contextual() -> pb.AnalyzeErrorRequest:
    """A failing parameter and every dependency value a candidate for it."""
    request = pb.AnalyzeErrorRequest(
        http_status=400, error_response="Invalid currency code: Switzerland"
    )
    request.original_request.update({"currency": "Switzerland"})
    request.parameter_schema.update(
        {"properties": {"currency": {"type": "string", "pattern": "^[A-Z]{3}[a-z]*$"}}}
    )
    per_step = (MAX_VALUES - 20) // 2
    for step in range(2):
        request.dependency_results[f"step{step}"].update(
            {f"currency_{step}_{i}": f"CH{chr(65 + i % 26)}{'x' * 40}" for i in range(per_step)}
        )
    return request


def long_texts() -> pb.AnalyzeErrorRequest:
    """The largest strings, under patterns, a format and redaction."""
    request = pb.AnalyzeErrorRequest(
        http_status=400, error_response="token=" + "x" * ((1 << 20) - 6)
    )
    text = "2026-04-01T" + "1" * (MAX_STRING_CHARS - 20)
    request.original_request.update({"a": text, "b": text[:-100]})
    request.parameter_schema.update(
        {
            "properties": {
                name: {"type": "string", "format": "date-time", "pattern": "(?:[a-z0-9]{1,999}x)"}
                for name in ("a", "b")
            }
        }
    )
    return request


def many_hints() -> pb.AnalyzeErrorRequest:
    """An error full of suggestions, each one tried against every parameter it names."""
    names = [f"p{i}" for i in range(2_000)]
    mentioned = " ".join(f"'{n}'" for n in names)[:8_000]
    text = (mentioned + ". " + " ".join(f"use V{i};" for i in range(2_000)))[:16_384]
    request = pb.AnalyzeErrorRequest(http_status=400, error_response=text)
    request.original_request.update({n: "x" for n in names})
    request.parameter_schema.update({"properties": {n: {"type": "string"} for n in names}})
    return request


def many_targets() -> pb.AnalyzeErrorRequest:
    """Every parameter failing, and dependency results to re-resolve each from."""
    names = [f"code_{i}" for i in range(1_000)]
    request = pb.AnalyzeErrorRequest(http_status=400, error_response="invalid codes")
    request.original_request.update({n: "lower" for n in names})
    request.parameter_schema.update(
        {"properties": {n: {"type": "string", "pattern": "^[A-Z]+$"} for n in names}}
    )
    for step in range(2):
        request.dependency_results[f"geo{step}"].update(
            {f"code_{i}": f"UPPER{chr(65 + i % 26)}" for i in range(step, 13_000, 2)}
        )
    return request


def dispatch_everything() -> pb.CheckDispatchRequest:
    """As many values as allowed, each scanned for placeholders and found in its enum."""
    members: list[Any] = [f"m{i} {{{{ {'x' * 90}" for i in range(MAX_ITEMS - 6)]
    request = pb.CheckDispatchRequest()
    request.parameters.update({"refs": (members * 2)[: MAX_ITEMS - 1]})
    request.parameter_schema.update(
        {"properties": {"refs": {"type": "array", "items": {"type": "string", "enum": members}}}}
    )
    return request


WORST_ANALYZE_ERROR: dict[str, Callable[[], pb.AnalyzeErrorRequest]] = {
    "many_parameters": many_parameters,
    "near_enum": near_enum,
    "contextual": contextual,
    "long_texts": long_texts,
    "many_hints": many_hints,
    "many_targets": many_targets,
}
WORST_CHECK_DISPATCH: dict[str, Callable[[], pb.CheckDispatchRequest]] = {
    "dispatch_everything": dispatch_everything,
}


def _measure(runs: int = 5) -> None:
    analyzer = Analyzer(AnalyzerSettings(), builtin_policy())
    print(f"{'request':22} {'bytes':>9} {'read ms':>8} {'analyse ms':>11} {'answer ms':>10}")
    for name, build in {**WORST_ANALYZE_ERROR, **WORST_CHECK_DISPATCH}.items():
        message = build()
        reads, works, answers = [], [], []
        for _ in range(runs):
            started = time.thread_time()
            if isinstance(message, pb.CheckDispatchRequest):
                parameters, schema = wire.dispatch_request(message)
                read = time.thread_time()
                violations = check_dispatch(parameters, schema)
                works.append(time.thread_time() - read)
                answering = time.thread_time()
                wire.dispatch_response(violations)
            elif isinstance(message, pb.AnalyzeErrorRequest):
                request = wire.analysis_request(message)
                read = time.thread_time()
                # The analysis runs on the worker thread: its CPU is counted there.
                analysis, worked = asyncio.run(_analyze(analyzer, request))
                works.append(worked)
                answering = time.thread_time()
                wire.analysis_response(analysis)
            answers.append(time.thread_time() - answering)
            reads.append(read - started)
        print(
            f"{name:22} {message.ByteSize():9d} {1e3 * statistics.median(reads):8.1f}"
            f" {1e3 * statistics.median(works):11.1f} {1e3 * statistics.median(answers):10.1f}"
        )


async def _analyze(analyzer: Analyzer, request: Any) -> tuple[Any, float]:
    spent: list[float] = []

    def cpu_now() -> float:
        spent.append(time.thread_time())
        return spent[-1]

    await analyzer.worker.run(cpu_now)
    analysis = await analyzer.analyze(request)
    await analyzer.worker.run(cpu_now)
    return analysis, spent[-1] - spent[0]


if __name__ == "__main__":
    _measure()
