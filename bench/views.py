"""`make bench-views`: what watching the daemon costs it (issue 36's row:
the live view, the status page and the event ring together at most 1 % of
the daemon's CPU at 1,000 calls/s), and beside it what Prometheus's scrape
of /metrics costs.

One daemon with its metrics port, 100 upstreams tracked and its event
history filled first (600 cool-downs begun on them, --fill 6). Every read
grows with the upstreams tracked (GetUpstreams builds a row from each
one's state, /metrics a series per upstream and label): a pod with many
more names pays in proportion. A set of viewers is what a platform team
would leave open: `squawk top` reading every second (every page of
GetUpstreams, and GetEvents only when GetUpstreams' last_event says there
is something new), the status page at its own reload (5 s) and /events
every 15 s. Five phases of --seconds each, in rounds:

- loaded: 1,000 calls/s in an open loop (500 Admit, 500 ReportOutcome of
  one outcome each, over the 100 names), no viewer: the daemon's CPU per
  second at that load, event ring and shed bookkeeping included (they are
  always on);
- loaded and viewed: the same load with --viewers sets of viewers at once
  (10 by default, their reads spread over each second);
- loaded and scraped: the same load with /metrics read every second,
  15 x Prometheus's default interval (15 s);
- idle: no calls, no viewer: what the daemon spends on its own timers;
- viewed: no calls, one set of viewers.

CPU is the daemon's own (/proc). The views row is (loaded and viewed -
loaded) / viewers over loaded: what one set of viewers adds where the
event loop is awake anyway. One set adds well under 1 % while the load's
own CPU varies by 2-3 % between phases, so one set's cost is lost in that
noise; ten sets add ten times as much, and the share per set is read from
them (the reads do not interact: each is a short call). The scrape row is
read the same way: (loaded and scraped - loaded) / 15 over loaded. The
views alone on an idle daemon (viewed - idle) are reported too: there each
read also pays the loop's and gRPC's wake-up from idle (an isolated call
costs an idle daemon several ms of CPU, a call among 1,000/s a fraction of
a millisecond), an upper bound that measures the wake-ups more than the
views. Medians over --rounds. It reports; a missed goal is not an error.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import grpc

from squawk.daemon.server.telemetry.status_page import REFRESH_S
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

from .overload import _wait_serving
from .procs import Processes, free_port
from .targets import ROOT, SQUAWK, clean_env, command
from .workloads import SERVICE

__all__ = ["main"]

NAMES = tuple(f"viewed-{i}" for i in range(100))
GOAL = 0.01
SCRAPE_S = 15.0  # Prometheus's default scrape interval


def _payloads(tmp: Path) -> dict[str, Path]:
    admits = [pb.AdmitRequest(upstream=n).SerializeToString() for n in NAMES]
    reports = [
        pb.ReportOutcomeRequest(
            outcomes=[pb.Outcome(upstream=n, success=True, http_status=200)]
        ).SerializeToString()
        for n in NAMES
    ]
    files = {}
    for rpc, items in (("Admit", admits), ("ReportOutcome", reports)):
        path = tmp / f"{rpc}.bin"
        path.write_bytes(b"".join(len(p).to_bytes(4, "big") + p for p in items))
        files[rpc] = path
    return files


def _fill(stub: pb_grpc.PolicyServiceStub, rounds: int = 6) -> None:
    """The 100 names tracked, and 100 events a round: a cool-down begun on
    each (a 429 with Retry-After: 1, then its end)."""
    throttled = [
        pb.Outcome(upstream=n, http_status=429, headers={"retry-after": "1"}) for n in NAMES
    ]
    for _ in range(rounds):
        stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=throttled), timeout=10)
        time.sleep(1.1)


class _Viewers(threading.Thread):
    """One set of viewers: squawk top's reads every second; /status every
    REFRESH_S; /events every 15 s. `offset`: seconds into each second its
    reads come."""

    def __init__(self, address: str, metrics: str, offset: float = 0.0) -> None:
        super().__init__(daemon=True)
        self._address, self._metrics, self._offset = address, metrics, offset
        self._done = threading.Event()
        self.reads = 0

    def run(self) -> None:
        with grpc.insecure_channel(self._address) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            after, tick = 0, 0
            self._done.wait(self._offset)
            while not self._done.is_set():
                request = pb.GetUpstreamsRequest()
                last = -1
                while True:
                    page = stub.GetUpstreams(request, timeout=10)
                    last = page.last_event if last < 0 else last
                    if not page.next_page_token:
                        break
                    request.page_token = page.next_page_token
                if last != after:  # as squawk top: events only when there are new ones
                    reply = stub.GetEvents(pb.GetEventsRequest(after=after), timeout=10)
                    after = reply.next_after
                paths = ("/status",) * (tick % REFRESH_S == 0) + ("/events",) * (tick % 15 == 0)
                for path in paths:
                    _read(self._metrics, path)
                self.reads += 1
                tick += 1
                self._done.wait(1.0)

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=10)


class _Scraper(_Viewers):
    """Prometheus, 15 x as often: /metrics every second."""

    def run(self) -> None:
        while not self._done.is_set():
            _read(self._metrics, "/metrics")
            self.reads += 1
            self._done.wait(1.0)


def _read(metrics: str, path: str) -> None:
    with urllib.request.urlopen(f"http://{metrics}{path}", timeout=10) as r:
        r.read()


class _Sets:
    """`count` sets of viewers (or one scraper), their reads spread over each second."""

    def __init__(self, address: str, metrics: str, count: int, scrape: bool = False) -> None:
        kind = _Scraper if scrape else _Viewers
        self.sets = [kind(address, metrics, i / count) for i in range(count)]

    def __enter__(self) -> _Sets:
        for viewers in self.sets:
            viewers.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for viewers in self.sets:
            viewers.stop()

    @property
    def reads(self) -> int:
        return sum(v.reads for v in self.sets)


def _cpu_per_s(
    cpu: Callable[[], float], seconds: float, during: Callable[[], None] | None = None
) -> float:
    """The daemon's CPU seconds per second while `during` runs (or `seconds` pass)."""
    before, started = cpu(), time.monotonic()
    if during is not None:
        during()
    else:
        time.sleep(seconds)
    return (cpu() - before) / (time.monotonic() - started)


def _loaded(loadgen: Path, address: str, files: dict[str, Path], seconds: float) -> None:
    gens = [
        subprocess.Popen(
            [
                str(loadgen),
                f"-target={address}",
                f"-method={SERVICE}{rpc}",
                f"-payloads={files[rpc]}",
                "-mode=open",
                "-rate=500",
                "-conns=2",
                "-warmup=0s",
                f"-duration={seconds}s",
                "-timeout=1s",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rpc in ("Admit", "ReportOutcome")
    ]
    for gen in gens:
        out, err = gen.communicate(timeout=seconds + 60)
        if gen.returncode != 0:
            raise RuntimeError(f"loadgen exited {gen.returncode}: {err[-800:]}")
        result = json.loads(next(x for x in out.splitlines() if x.startswith("{")))
        if result["errors"]:
            raise RuntimeError(f"calls failed under the load: {result['codes']}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.views", description=__doc__)
    ap.add_argument("--loadgen", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=5.0, help="each phase (default 5)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--viewers", type=int, default=10, help="sets of viewers beside the load (default 10)"
    )
    ap.add_argument("--fill", type=int, default=6, help="rounds of 100 events first (default 6)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/views.json")
    args = ap.parse_args(argv)
    started = datetime.now(UTC)
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="squawk-views-") as tmp, Processes(Path(tmp)) as procs:
        files = _payloads(Path(tmp))
        address, metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        daemon = procs.start("squawk", command(SQUAWK, address, metrics), clean_env(), cwd=ROOT)
        _wait_serving(address, daemon.alive)
        with grpc.insecure_channel(address) as channel:
            _fill(pb_grpc.PolicyServiceStub(channel), args.fill)
        for _ in range(args.rounds):

            def load() -> None:
                _loaded(args.loadgen, address, files, args.seconds)

            loaded = _cpu_per_s(daemon.cpu_s, args.seconds, load)
            with _Sets(address, metrics, args.viewers) as many:
                both = _cpu_per_s(daemon.cpu_s, args.seconds, load)
            with _Sets(address, metrics, 1, scrape=True) as scraper:
                scraped = _cpu_per_s(daemon.cpu_s, args.seconds, load)
            idle = _cpu_per_s(daemon.cpu_s, args.seconds)
            with _Sets(address, metrics, 1) as one:
                viewed = _cpu_per_s(daemon.cpu_s, args.seconds)
            cost = max(0.0, viewed - idle)
            row = {
                "loaded_cpu_per_s": loaded,
                "loaded_viewed_cpu_per_s": both,
                "viewers": args.viewers,
                "loaded_scraped_cpu_per_s": scraped,
                "idle_cpu_per_s": idle,
                "viewed_cpu_per_s": viewed,
                "views_cpu_per_s_idle": cost,
                # One set of viewers beside the load, where the loop is awake anyway.
                "views_share_of_loaded": (both - loaded) / args.viewers / loaded,
                # A scrape every 15 s, read from one a second.
                "scrape_share_of_loaded": (scraped - loaded) / SCRAPE_S / loaded,
                # Alone on an idle daemon each read also pays the wake-up: an upper bound.
                "views_share_bound": cost / loaded,
                "view_reads": many.reads + one.reads,
                "scrapes": scraper.reads,
            }
            rounds.append(row)
            print(
                f"loaded {loaded * 1e3:.0f} ms/s; with {args.viewers} sets of viewers "
                f"{both * 1e3:.0f} ms/s ({row['views_share_of_loaded']:+.2%} a set); "
                f"scraped every second {scraped * 1e3:.0f} ms/s "
                f"({row['scrape_share_of_loaded']:+.2%} every {SCRAPE_S:g} s); "
                f"idle {idle * 1e3:.1f} ms/s, viewed {viewed * 1e3:.1f} ms/s "
                f"(bound {row['views_share_bound']:.2%})",
                flush=True,
            )
    share = statistics.median(r["views_share_of_loaded"] for r in rounds)
    scrape = statistics.median(r["scrape_share_of_loaded"] for r in rounds)
    bound = statistics.median(r["views_share_bound"] for r in rounds)
    spread = [round(r["views_share_of_loaded"], 4) for r in rounds]
    print(
        f"one set of views' share of the daemon's CPU at 1,000 calls/s: {share:+.2%} "
        f"(rounds {spread}; goal <= {GOAL:.0%}); alone on an idle daemon, at most "
        f"{bound:.2%}; a scrape of /metrics every {SCRAPE_S:g} s: {scrape:+.2%}"
    )
    report = {
        "date": started.isoformat(timespec="seconds"),
        "calls_per_s": 1000,
        "tracked": len(NAMES),
        "viewers": args.viewers,
        "seconds": args.seconds,
        "views_share_of_loaded": share,
        "views_share_bound": bound,
        "scrape_share_of_loaded": scrape,
        "goal": GOAL,
        "met": share <= GOAL,
        "rounds": rounds,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
