"""The wire fuzz: a real daemon per RPC, the generator's cases sent to it as
raw bytes with a bounded number in flight, every answer judged
(fuzz_report.verdict), then the daemon itself.

`tests/e2e/test_fuzz.py` runs a few thousand cases per RPC in `make test`;
`make fuzz` runs this file as a script for the long run (the same
generator, more cases) and writes the counts to bench/results/fuzz.json.

The daemon must stay alive and SERVING, log no traceback and at most a few
lines per thousand requests (a counted, rate-limited line for bad input is
fine; a line per request is not), write no decision-log line over 4 KiB,
and serve a /metrics with no control character but its line ends (a
caller's name reaches the breaker series' labels). A daemon that stops
answering (a call misses its deadline and a health check then fails) is a
problem; it is killed and a new one takes the rest of the cases, a bounded
number of times, so one stall does not hide every later finding.

Every daemon runs fuzz_upstreams.POLICY, and is sent its RPC's prelude
(fuzz_upstreams.PRELUDES) before the first case: the upstream RPCs act on
state that earlier calls left.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from conftest import ROOT, Daemon, free_port, start_daemon
from fuzz_cases import RPCS, Case, cases, is_malformed
from fuzz_report import Report
from fuzz_upstreams import POLICY, PRELUDES

__all__ = ["fuzz_rpc", "main"]

SERVICE = "squawk.v1.PolicyService"
MAX_DECISION_LINE = 4096
LOG_LINES_BASE = 20
LOG_LINES_PER_1000 = 5
_CLIENT_OPTIONS = [("grpc.max_receive_message_length", 64 * 2**20)]
_SERVING = health_pb2.HealthCheckResponse.SERVING


class _Session:
    """The daemon under fuzz, replaced when it stops answering."""

    def __init__(self, rpc: str, workdir: Path, report: Report, restarts: int) -> None:
        self.rpc, self.workdir, self.report = rpc, workdir, report
        self.policy = workdir / "policy.yaml"
        self.policy.write_text(POLICY)
        self.prelude = PRELUDES[rpc]() if rpc in PRELUDES else []
        self.restarts_left = restarts
        self.generation = 0
        self.spent = False  # stalled with no restart left
        self.ready = asyncio.Event()
        self.outputs: list[str] = []
        self.decision_logs: list[Path] = []
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        path = self.workdir / f"decisions-{self.rpc}-{len(self.decision_logs)}.jsonl"
        self.decision_logs.append(path)
        self.metrics_port = free_port()
        self.daemon: Daemon = await asyncio.to_thread(
            start_daemon,
            "--decision-log",
            str(path),
            "--policy",
            str(self.policy),
            "--metrics-listen",
            f"127.0.0.1:{self.metrics_port}",
        )
        self.channel = grpc.aio.insecure_channel(self.daemon.target, options=_CLIENT_OPTIONS)
        # No serializers: the bytes go out exactly as generated.
        self.call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(
            f"/{SERVICE}/{self.rpc}"
        )
        report: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(
            f"/{SERVICE}/ReportOutcome"
        )
        for payload in self.prelude:
            if isinstance(payload, float):
                await asyncio.sleep(payload)  # for time to move a breaker on
                continue
            try:
                await report(payload, timeout=30.0)
            except grpc.aio.AioRpcError as exc:
                problem = f"{exc.code().name}: {(exc.details() or '')[:300]!r}"
                self.report.daemon.append(f"a report of the prelude was refused, {problem}")
                break
        self.ready.set()

    async def serving(self, timeout_s: float) -> str | None:
        """None when health answers SERVING in time, else what it did."""
        stub = health_pb2_grpc.HealthStub(self.channel)
        request = health_pb2.HealthCheckRequest(service=SERVICE)
        try:
            reply = await stub.Check(request, timeout=timeout_s)  # type: ignore[attr-defined]
        except grpc.aio.AioRpcError as exc:
            return f"health check {exc.code().name}"
        if reply.status != _SERVING:
            return f"health {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}"
        return None

    async def missed_deadline(self, generation: int, index: int) -> None:
        async with self._lock:
            if generation != self.generation or self.spent:
                return  # another call's miss already replaced this daemon
            problem = await self.serving(3.0)
            if problem is None:
                return  # slow, not stuck: the miss itself is the finding
            self.ready.clear()
            self.report.daemon.append(
                f"the daemon stopped answering ({problem}) after a call missed its "
                f"deadline; the earliest case in flight was about index {index}"
            )
            await self.close(kill=True)
            if self.restarts_left == 0:
                self.spent = True
                self.ready.set()
                return
            self.restarts_left -= 1
            self.generation += 1
            await self.open()

    async def close(self, kill: bool = False) -> None:
        process = self.daemon.process
        if not kill and process.poll() is None:  # the run's end: judge its /metrics
            self.report.daemon += await asyncio.to_thread(_metrics_problems, self.metrics_port)
        await self.channel.close()
        if process.poll() is None:
            if kill:
                process.kill()
            else:
                process.terminate()
            try:
                await asyncio.to_thread(process.wait, 15)
            except Exception:
                process.kill()
                await asyncio.to_thread(process.wait, 15)
        self.outputs.append(self.daemon.output())
        self.daemon.log.close()


async def _run(
    session: _Session, stream: Iterator[Case], concurrency: int, timeout_s: float, budget_s: float
) -> None:
    report = session.report
    stop_at = time.monotonic() + budget_s
    in_flight: set[int] = set()

    async def worker() -> None:
        for case in stream:
            await session.ready.wait()
            if session.spent or time.monotonic() > stop_at:
                return
            generation, call = session.generation, session.call
            in_flight.add(case.index)
            started = time.monotonic()
            try:
                await call(case.payload, timeout=timeout_s)
                code, details = grpc.StatusCode.OK, ""
            except grpc.aio.AioRpcError as exc:
                code, details = exc.code(), exc.details() or ""
            earliest = min(in_flight)
            in_flight.discard(case.index)
            if generation != session.generation:
                report.lost += 1  # its daemon was killed under it
                continue
            report.timed(case, time.monotonic() - started)
            report.add(case, code, details, is_malformed(case.rpc, case.payload))
            if code is grpc.StatusCode.DEADLINE_EXCEEDED:
                await session.missed_deadline(generation, earliest)

    await session.open()
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        if not session.spent:
            if session.daemon.process.poll() is not None:
                code = session.daemon.process.returncode
                report.daemon.append(f"the daemon exited with {code} during the run")
            elif (problem := await session.serving(10.0)) is not None:
                report.daemon.append(f"after the run: {problem}")
    finally:
        if not session.spent:
            await session.close()


# Where a traceback's files live on this machine: left out of the results.
_FILE_PREFIX = re.compile(
    r'File "(?:[^"]*/(?=site-packages/|python3\.\d+/)|' + re.escape(str(ROOT)) + "/)"
)


def _log_problems(output: str, requests: int) -> list[str]:
    problems = []
    tracebacks = output.count("Traceback (most recent call last)")
    if tracebacks:
        first = _FILE_PREFIX.sub('File "', output[output.index("Traceback") :][:1200])
        problems.append(f"{tracebacks} tracebacks in the daemon's log; the first:\n{first}")
    lines = output.count("\n")
    limit = LOG_LINES_BASE + LOG_LINES_PER_1000 * requests // 1000
    if lines > limit:
        problems.append(f"the daemon logged {lines} lines for {requests} requests (limit {limit})")
    return problems


# What a line-splitting or terminal reader of /metrics would act on.
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def _metrics_problems(port: int) -> list[str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    except (OSError, UnicodeDecodeError) as exc:
        return [f"/metrics did not answer with UTF-8 text: {exc!r}"[:300]]
    found = _CONTROL.search(text)
    if found is None:
        return []
    start = text.rfind("\n", 0, found.start()) + 1
    return [f"/metrics holds {found.group()!r}: {text[start : start + 200]!r}"]


def _decision_log_problems(paths: list[Path]) -> list[str]:
    longest, count = 0, 0
    for path in paths:
        if path.exists():
            with path.open("rb") as f:
                for line in f:
                    longest, count = max(longest, len(line)), count + 1
    if longest > MAX_DECISION_LINE:
        return [
            f"a decision-log line of {longest} bytes (limit {MAX_DECISION_LINE}; {count} lines)"
        ]
    return []


def fuzz_rpc(
    rpc: str,
    seed: int,
    count: int,
    workdir: Path,
    *,
    concurrency: int = 16,
    timeout_s: float = 5.0,
    budget_s: float = 60.0,
    restarts: int = 2,
) -> Report:
    """Send `count` cases of `rpc` to a fresh daemon (decision log on); judge them and it."""
    report = Report(rpc, seed)
    session = _Session(rpc, workdir, report, restarts)
    started = time.monotonic()
    asyncio.run(_run(session, cases(seed, rpc, count), concurrency, timeout_s, budget_s))
    report.seconds = time.monotonic() - started
    report.not_sent = count - report.judged - report.lost
    report.daemon += _log_problems("".join(session.outputs), report.judged + report.lost)
    report.daemon += _decision_log_problems(session.decision_logs)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The long wire fuzz (make fuzz).")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=100_000, help="cases per RPC")
    parser.add_argument("--rpc", action="append", choices=RPCS, help="default: every RPC")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per call")
    parser.add_argument("--budget", type=float, default=1800.0, help="seconds per RPC")
    parser.add_argument("--restarts", type=int, default=200, help="stalled daemons replaced")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    reports = []
    with tempfile.TemporaryDirectory() as tmp:
        for rpc in args.rpc or RPCS:
            report = fuzz_rpc(
                rpc, args.seed, args.count, Path(tmp),
                concurrency=args.concurrency, timeout_s=args.timeout,
                budget_s=args.budget, restarts=args.restarts,
            )  # fmt: skip
            print(report.summary(), flush=True)
            reports.append(report)
    results = {
        "seed": args.seed,
        "cases_per_rpc": args.count,
        "concurrency": args.concurrency,
        "call_timeout_s": args.timeout,
        "ok": not any(r.failed for r in reports),
        "rpcs": {r.rpc: r.as_json() for r in reports},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"{'no problem found' if results['ok'] else 'PROBLEMS FOUND'}; counts in {args.out}")
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
