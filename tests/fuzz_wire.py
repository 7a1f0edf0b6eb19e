"""The wire fuzz: a real daemon per RPC, the generator's cases sent as raw
bytes, and every answer judged.

`tests/test_fuzz.py` runs a few thousand cases per RPC in `make test`;
`make fuzz` runs this file as a script for the long run (the same
generator, more cases) and writes the counts to bench/results/fuzz.json.

What counts as a problem (`verdict`): INTERNAL or UNKNOWN; no answer within
the call's deadline; bytes protobuf cannot parse answered with anything
but INVALID_ARGUMENT; a well-formed request refused without naming its
field first; status details over 4 KiB. After the run: the daemon is
alive and SERVING, its log stayed bounded (no traceback at all, a few
lines per thousand requests at most) and no decision-log line is over
4 KiB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from conftest import Daemon, start_daemon
from fuzz_cases import RPCS, Case, cases, is_malformed
from grpc_health.v1 import health_pb2, health_pb2_grpc

__all__ = ["Report", "fuzz_rpc", "verdict"]

ROOT = Path(__file__).resolve().parent.parent
SERVICE = "squawk.v1.PolicyService"
MAX_DETAILS = 4096
MAX_DECISION_LINE = 4096
# The daemon's own log: start-up and shutdown lines, plus at most this many
# per 1,000 requests (a counted, rate-limited line for bad input is fine; a
# line, let alone a traceback, per request is not).
LOG_LINES_PER_1000 = 5
LOG_LINES_BASE = 20
EXAMPLES_PER_KIND = 3
SLOWEST = 5
# A refusal names its field first: `attempt: must be >= 1`, `requests[3].profile: ...`.
_FIELD_FIRST = re.compile(r"^[A-Za-z_][\w.\[\]-]*: ")
_CLIENT_OPTIONS = [("grpc.max_receive_message_length", 64 * 2**20)]
OK = grpc.StatusCode.OK


def verdict(case: Case, code: grpc.StatusCode, details: str, timeout_s: float) -> str | None:
    """What is wrong with this answer to this case, or None."""
    if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
        return f"{code.name}: {details[:300]!r}"
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"no answer within the {timeout_s:g} s deadline"
    if len(details) > MAX_DETAILS:
        return f"{code.name} with {len(details)} characters of details (limit {MAX_DETAILS})"
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None  # over gRPC's message size limit: refused before the servicer
    if is_malformed(case.rpc, case.payload):
        if code is not grpc.StatusCode.INVALID_ARGUMENT:
            return f"malformed protobuf answered {code.name}, not INVALID_ARGUMENT"
        return None
    if code is grpc.StatusCode.INVALID_ARGUMENT and not _FIELD_FIRST.match(details):
        return f"INVALID_ARGUMENT without the field name first: {details[:200]!r}"
    if code not in (OK, grpc.StatusCode.INVALID_ARGUMENT):
        return f"unexpected {code.name}: {details[:200]!r}"
    return None


@dataclass
class Report:
    rpc: str
    seed: int
    statuses: Counter[str] = field(default_factory=Counter)
    # (case kind, status) -> n, kind being "random", "mutation" or "hostile".
    by_kind: Counter[tuple[str, str]] = field(default_factory=Counter)
    problems: Counter[str] = field(default_factory=Counter)
    # Up to EXAMPLES_PER_KIND per problem kind: index, label, size, what.
    examples: list[str] = field(default_factory=list)
    daemon: list[str] = field(default_factory=list)
    not_sent: int = 0
    # The slowest calls: (seconds, "index label").
    slowest: list[tuple[float, str]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def sent(self) -> int:
        return sum(self.statuses.values())

    @property
    def failed(self) -> bool:
        return bool(self.problems or self.daemon or self.not_sent)

    def add(self, case: Case, code: grpc.StatusCode, details: str, problem: str | None) -> None:
        self.statuses[code.name] += 1
        self.by_kind[(case.label.split(":")[0], code.name)] += 1
        if problem is not None:
            kind = re.sub(r"\d+", "N", problem.split(":")[0])[:80]
            self.problems[kind] += 1
            if self.problems[kind] <= EXAMPLES_PER_KIND:
                self.examples.append(
                    f"{self.rpc} seed={self.seed} index={case.index} {case.label} "
                    f"({len(case.payload)} bytes): {problem}"
                )

    def timed(self, case: Case, seconds: float) -> None:
        self.slowest.append(
            (seconds, f"index={case.index} {case.label} ({len(case.payload)} bytes)")
        )
        if len(self.slowest) > 2 * SLOWEST:
            self.slowest = sorted(self.slowest, reverse=True)[:SLOWEST]

    def summary(self) -> str:
        lines = [
            f"{self.rpc}: {self.sent} sent in {self.seconds:.1f} s, statuses {dict(self.statuses)}"
        ]
        if self.not_sent:
            lines.append(f"  {self.not_sent} cases not sent: the time budget ran out")
        lines += [f"  {n} x {kind}" for kind, n in self.problems.most_common()]
        lines += [f"  e.g. {e}" for e in self.examples]
        lines += [f"  daemon: {d}" for d in self.daemon]
        lines += [
            f"  slow: {t:.2f} s {what}" for t, what in sorted(self.slowest, reverse=True)[:SLOWEST]
        ]
        return "\n".join(lines)

    def as_json(self) -> dict[str, object]:
        kinds: dict[str, dict[str, int]] = {}
        for (kind, status), n in sorted(self.by_kind.items()):
            kinds.setdefault(kind, {})[status] = n
        return {
            "sent": self.sent,
            "not_sent": self.not_sent,
            "seconds": round(self.seconds, 1),
            "slowest_calls": [
                f"{t:.3f} s {what}" for t, what in sorted(self.slowest, reverse=True)[:SLOWEST]
            ],
            "statuses": dict(sorted(self.statuses.items())),
            "by_kind": kinds,
            "problems": dict(self.problems.most_common()),
            "examples": self.examples,
            "daemon": self.daemon,
        }


async def _send(
    target: str,
    stream: Iterator[Case],
    report: Report,
    concurrency: int,
    timeout_s: float,
    budget_s: float,
) -> None:
    deadline = time.monotonic() + budget_s
    async with grpc.aio.insecure_channel(target, options=_CLIENT_OPTIONS) as channel:
        # No serializers: the bytes go out exactly as generated.
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            f"/{SERVICE}/{report.rpc}"
        )

        async def worker() -> None:
            for case in stream:
                if time.monotonic() > deadline:
                    return
                started = time.monotonic()
                try:
                    await call(case.payload, timeout=timeout_s)
                    code, details = OK, ""
                except grpc.aio.AioRpcError as exc:
                    code, details = exc.code(), exc.details() or ""
                report.timed(case, time.monotonic() - started)
                report.add(case, code, details, verdict(case, code, details, timeout_s))

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def _serving(target: str) -> str | None:
    try:
        with grpc.insecure_channel(target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            request = health_pb2.HealthCheckRequest(service=SERVICE)
            reply = stub.Check(request, timeout=10)  # type: ignore[attr-defined]
    except grpc.RpcError as exc:
        return f"health check failed: {exc.code().name}"
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        return f"health answers {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}"
    return None


def _log_problems(output: str, requests: int) -> list[str]:
    problems = []
    tracebacks = output.count("Traceback (most recent call last)")
    if tracebacks:
        first = output[output.index("Traceback") :][:1500]
        problems.append(f"{tracebacks} tracebacks in the daemon's log, the first:\n{first}")
    lines = output.count("\n")
    limit = LOG_LINES_BASE + LOG_LINES_PER_1000 * requests // 1000
    if lines > limit:
        problems.append(f"the daemon logged {lines} lines for {requests} requests (limit {limit})")
    return problems


def _decision_log_problems(path: Path) -> list[str]:
    longest, count = 0, 0
    with path.open("rb") as f:
        for line in f:
            longest, count = max(longest, len(line)), count + 1
    if longest > MAX_DECISION_LINE:
        return [
            f"a decision-log line of {longest} bytes (limit {MAX_DECISION_LINE}; {count} lines)"
        ]
    return []


def _stop(daemon: Daemon) -> None:
    if daemon.process.poll() is None:
        daemon.process.terminate()
        try:
            daemon.process.wait(timeout=10)
        except Exception:
            daemon.process.kill()
    daemon.wait()


def fuzz_rpc(
    rpc: str,
    seed: int,
    count: int,
    workdir: Path,
    *,
    concurrency: int = 16,
    timeout_s: float = 10.0,
    budget_s: float = 60.0,
) -> Report:
    """Fuzz one RPC of a fresh daemon (decision log on) and judge the answers and the daemon."""
    report = Report(rpc, seed)
    decision_log = workdir / f"decisions-{rpc}.jsonl"
    daemon = start_daemon("--decision-log", str(decision_log))
    started = time.monotonic()
    try:
        asyncio.run(
            _send(daemon.target, cases(seed, rpc, count), report, concurrency, timeout_s, budget_s)
        )
        report.seconds = time.monotonic() - started
        report.not_sent = count - report.sent
        if daemon.process.poll() is not None:
            report.daemon.append(f"the daemon exited with {daemon.process.returncode}")
        else:
            report.daemon += filter(None, [_serving(daemon.target)])
    finally:
        output = daemon.output()
        _stop(daemon)
    report.daemon += _log_problems(output, report.sent)
    report.daemon += _decision_log_problems(decision_log)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The long wire fuzz (make fuzz).")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=100_000, help="cases per RPC")
    parser.add_argument("--rpc", action="append", choices=RPCS, help="default: every RPC")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per call")
    parser.add_argument("--budget", type=float, default=3600.0, help="seconds per RPC")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    results: dict[str, object] = {
        "seed": args.seed,
        "cases_per_rpc": args.count,
        "concurrency": args.concurrency,
        "call_timeout_s": args.timeout,
    }
    reports = []
    with tempfile.TemporaryDirectory() as tmp:
        for rpc in args.rpc or RPCS:
            report = fuzz_rpc(
                rpc, args.seed, args.count, Path(tmp),
                concurrency=args.concurrency, timeout_s=args.timeout, budget_s=args.budget,
            )  # fmt: skip
            print(report.summary(), flush=True)
            reports.append(report)
    results["ok"] = not any(r.failed for r in reports)
    results["rpcs"] = {r.rpc: r.as_json() for r in reports}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
