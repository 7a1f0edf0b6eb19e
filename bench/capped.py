"""The capped-credential row (issue 35): a provider key that allows K calls
in flight, shared by four executors, with and without the cap declared.

The upstream (`python -m bench.capped --serve`, its own process) is a
loopback HTTP server holding each call LATENCY_S and answering at once
`429 too many concurrent requests` (no Retry-After, as z.ai's and Kimi's
concurrency errors come) to a call that would be its K+1-th in flight; it
integrates the calls in flight over time. Four executors (AsyncSquawkClient
each, in this process, with httpx) offer OFFERED x K / LATENCY_S steps/s
(Poisson) to it in all through `run_step` with a 10 s deadline, against one
daemon (a fresh process per run) whose policy declares `max_in_flight: K`
for the upstream, or does not (the baseline: the pod's other rules and the
runner's retries answer the 429s). Per run: the upstream's rejections (429)
per call it served, its utilisation (the calls in flight over time / K),
the steps that succeeded of those that ended, and their p99 latency.
Issue 35's goal: 0 rejections at >= 0.95 utilisation of K.

Run as `make bench-capped` (about a minute); it writes
bench/results/capped.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from .overload import _wait_serving
from .procs import Processes, free_port
from .targets import POLICY, ROOT, SQUAWK, clean_env, command

__all__ = ["main", "render", "serve"]

UPSTREAM = "capped-key"
LATENCY_S = 0.2
EXECUTORS = 4
# Demand over the key's capacity (K / LATENCY_S calls/s).
OFFERED = 1.5
DEADLINE = timedelta(seconds=10)


class _Key:
    """The provider's side: calls in flight, and their integral over time."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.inside = 0
        self.served = 0
        self.rejected = 0
        self.busy = 0.0  # calls-in-flight x seconds
        self.at = time.monotonic()

    def _move(self, by: int) -> None:
        now = time.monotonic()
        self.busy += self.inside * (now - self.at)
        self.at = now
        self.inside += by

    def stats(self) -> dict[str, Any]:
        self._move(0)
        return {"served": self.served, "rejected": self.rejected, "busy": self.busy}


async def _answer(key: _Key, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass  # headers; the requests carry no body
            if line.startswith(b"GET /stats"):
                status, body = 200, json.dumps(key.stats()).encode()
            elif key.inside >= key.cap:
                key.rejected += 1
                status, body = 429, b'{"error": "too many concurrent requests"}'
            else:
                key._move(1)
                await asyncio.sleep(LATENCY_S)
                key._move(-1)
                key.served += 1
                status, body = 200, b"{}"
            reason = b"OK" if status == 200 else b"Too Many Requests"
            writer.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (status, reason, len(body), body)
            )
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


def serve(port: int, cap: int) -> None:
    """Run the capped upstream on 127.0.0.1:`port` until killed."""

    async def run() -> None:
        key = _Key(cap)
        server = await asyncio.start_server(
            lambda r, w: _answer(key, r, w), "127.0.0.1", port, backlog=1024
        )
        async with server:
            await server.serve_forever()

    asyncio.run(run())


def _policy(cap: int | None) -> str:
    text = POLICY.read_text()
    if cap is None:
        return text
    assert "\n  default:\n" in text and "upstreams:" not in text
    entry = f"      {UPSTREAM}:\n        rate_limit: {{max_in_flight: {cap}}}\n"
    return text + "    upstreams:\n" + entry


async def _drive(target: str, url: str, cap: int, seconds: float) -> dict[str, Any]:
    from squawk_client import AsyncSquawkClient, StepError, StepOptions, run_step

    rate = OFFERED * cap / LATENCY_S / EXECUTORS
    options = StepOptions(upstream=UPSTREAM, deadline=DEADLINE)
    ok, failed, latencies = 0, 0, []
    fell_back = 0

    async def call(http: httpx.AsyncClient) -> None:
        reply = await http.get(url)
        if reply.status_code != 200:
            raise StepError("refused", http_status=reply.status_code, body=reply.content)

    async def executor(seed: int, end: float) -> None:
        nonlocal ok, failed, fell_back
        rng = random.Random(seed)
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
        async with (
            AsyncSquawkClient(target) as client,
            httpx.AsyncClient(limits=limits, timeout=30) as http,
        ):

            async def step() -> None:
                nonlocal ok, failed
                began = time.monotonic()
                try:
                    await run_step(client, lambda _: call(http), None, options=options)
                except Exception:
                    failed += 1
                    return
                ok += 1
                latencies.append(time.monotonic() - began)

            tasks = set()
            due = time.monotonic()
            while (due := due + rng.expovariate(rate)) < end:
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                task = asyncio.create_task(step())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.wait(tasks)
            fell_back += client.fallback_count

    async with httpx.AsyncClient() as http:
        before = json.loads((await http.get(url.replace("/call", "/stats"))).content)
        started = time.monotonic()
        await asyncio.gather(*(executor(i, started + seconds) for i in range(EXECUTORS)))
        elapsed = time.monotonic() - started
        after = json.loads((await http.get(url.replace("/call", "/stats"))).content)
    served = after["served"] - before["served"]
    rejected = after["rejected"] - before["rejected"]
    latencies.sort()
    return {
        "served": served,
        "rejected": rejected,
        "rejected_per_served": round(rejected / served, 4) if served else None,
        # Over the offered window only: the last steps' tail runs past it.
        "utilisation": round((after["busy"] - before["busy"]) / (cap * elapsed), 3),
        "steps_ok": ok,
        "steps_failed": failed,
        # Daemon calls that got no answer in time: the runner went ahead
        # without a slot (admission fails open).
        "fell_back": fell_back,
        "p99_s": round(latencies[int(0.99 * (len(latencies) - 1))], 3) if latencies else None,
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        f"| K (4 executors, {OFFERED:g} x capacity offered) | cap declared | 429s per call "
        "served | utilisation of K | steps ok | p99 s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['k']} | {'yes' if r['declared'] else 'no'} | {r['rejected_per_served']} "
            f"| {r['utilisation']:.3f} | {r['steps_ok']} of {r['steps_ok'] + r['steps_failed']} "
            f"| {r['p99_s']} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.capped", description=__doc__)
    ap.add_argument("--serve", type=int, metavar="PORT", help="run the capped upstream only")
    ap.add_argument("--k", default="1,4,15", help="caps to run, comma-separated")
    ap.add_argument("--seconds", type=float, default=10.0, help="offered window per run")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/capped.json")
    args = ap.parse_args(argv)
    if args.serve:
        serve(args.serve, int(args.k))
        return 0
    started = datetime.now(UTC)
    rows = []
    with tempfile.TemporaryDirectory(prefix="squawk-capped-") as tmp:
        for k in (int(x) for x in args.k.split(",")):
            for declared in (False, True):
                with Processes(Path(tmp)) as procs:
                    port = free_port()
                    up = [sys.executable, "-m", "bench.capped", "--serve", str(port), "--k", str(k)]
                    procs.start("upstream", up, clean_env(), cwd=ROOT)
                    policy = Path(tmp) / "policy.yaml"
                    policy.write_text(_policy(k if declared else None))
                    address = f"127.0.0.1:{free_port()}"
                    argv_ = [str(policy) if a == str(POLICY) else a for a in SQUAWK]
                    metrics = f"127.0.0.1:{free_port()}"
                    daemon = procs.start("squawk", command(argv_, address, metrics), clean_env())
                    _wait_serving(address, daemon.alive)
                    _wait_http(port)
                    url = f"http://127.0.0.1:{port}/call"
                    row = asyncio.run(_drive(address, url, k, args.seconds))
                rows.append({"k": k, "declared": declared, **row})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    report = {"date": started.isoformat(timespec="seconds"), "latency_s": LATENCY_S, "rows": rows}
    print(render(report))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


def _wait_http(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/stats", timeout=1.0)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError(f"the capped upstream on port {port} did not answer")


if __name__ == "__main__":
    raise SystemExit(main())
