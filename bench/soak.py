"""`make soak`: is Squawk's RSS flat over a long run at half of saturation?

Finds DecideRetry's saturation rate (closed loop, a few seconds), then offers
half of it in an open loop for --seconds (default 10 minutes), sampling the
daemon's RSS from /proc every few seconds. Flat means the median RSS of the
last minute is within 5 % of the median of the first (after a 10 s warm-up
at the soak rate). Medians, not single samples: when the daemon falls behind
for a moment, the calls queued meanwhile hold a few MB until it catches up,
and such a peak is not a leak. The highest sample is reported beside them.
Not run in CI: a leak needs minutes to show, and CI has seconds.

Exit status: 0 when flat, 1 when not or when the soak could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from .drive import Load, Mode, Outcome, run_load, wait_serving, write_payloads
from .procs import Processes, free_port
from .targets import ROOT, SQUAWK, clean_env, command
from .workloads import squawk_workloads

FLAT = 0.05
WARMUP_S = 10.0
# The stretch at each end whose median RSS is compared.
EDGE_S = 60.0


def soak(args: argparse.Namespace) -> tuple[float, float, Outcome]:
    """(idle RSS MB, saturation calls/s, the soak's outcome)."""
    pin = not args.no_pin and (os.cpu_count() or 1) >= 2
    server_cpus, load_cpus = ("0", "1") if pin else (None, None)
    decide = next(w for w in squawk_workloads(1) if w.rpc == "DecideRetry transient")
    with tempfile.TemporaryDirectory(prefix="squawk-soak-") as tmp, Processes(Path(tmp)) as procs:
        address = f"127.0.0.1:{free_port()}"
        argv = command(SQUAWK, address, f"127.0.0.1:{free_port()}")
        proc = procs.start("squawk", argv, clean_env(), server_cpus, cwd=ROOT)
        wait_serving(proc, address, decide)
        idle = proc.rss_mb()
        payloads = write_payloads(decide, Path(tmp), "payload")
        find = Load(args.loadgen, 5, 2, 32, 2, load_cpus)
        saturation = run_load(procs, proc, address, decide, Mode(), find, payloads)
        rate = round(saturation.result["calls_per_s"] / 2)
        print(
            f"saturation {saturation.result['calls_per_s']:.0f} calls/s; "
            f"soaking at {rate} calls/s for {args.seconds:g} s",
            file=sys.stderr,
            flush=True,
        )
        load = Load(args.loadgen, args.seconds, WARMUP_S, 32, 2, load_cpus)
        out = run_load(procs, proc, address, decide, Mode(rate), load, payloads, args.sample_every)
    return idle, saturation.result["calls_per_s"], out


def _on_sigterm(signum: int, frame: object) -> NoReturn:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--sample-every", type=float, default=5.0, help="seconds between RSS samples")
    p.add_argument("--loadgen", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--no-pin", action="store_true")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    date = datetime.now(UTC).isoformat(timespec="seconds")
    idle, saturation, out = soak(args)
    rss = [value for _, value in out.samples]
    if not rss:
        print("soak: no RSS sample was taken", file=sys.stderr)
        return 1
    edge = max(1, round(EDGE_S / args.sample_every))
    first, last = statistics.median(rss[:edge]), statistics.median(rss[-edge:])
    drift = (last - first) / first
    flat = abs(drift) <= FLAT and out.result["errors"] == 0
    doc: dict[str, Any] = {
        "date": date,
        "seconds": args.seconds,
        "saturation_calls_per_s": round(saturation, 1),
        "rate": out.result["rate"],
        "idle_rss_mb": round(idle, 1),
        "first_minute_rss_mb": round(first, 1),
        "last_minute_rss_mb": round(last, 1),
        "drift": round(drift, 4),
        "max_rss_mb": round(max(rss), 1),
        "flat": flat,
        "result": out.result,
        "samples": [(round(t, 1), round(value, 2)) for t, value in out.samples],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(
        f"soak {date}: {out.result['calls_per_s']:.0f} calls/s (half of saturation) for "
        f"{args.seconds:g} s; RSS median {first:.1f} MB in the first minute, {last:.1f} MB "
        f"in the last, drift {drift:+.1%} (goal within {FLAT:.0%}), highest sample "
        f"{doc['max_rss_mb']} MB: "
        f"{'flat' if flat else 'NOT FLAT'}; errors {out.result['errors']}, "
        f"p99 {out.result['p99_ms']:.3f} ms; {args.out}"
    )
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
