"""The paced dispatch row (issue 34): what a dispatch costs the daemon while
a declared pace is on, with leases of paced starts and without them.

One daemon serves the bench policy plus one upstream with a declared
`rate_limit: {rate: --pace}`; EXECUTORS Python executor processes
(executor.py, the dispatch row's) together offer --rate dispatches/s to it,
each `run_step` with that upstream. The row runs twice on a fresh daemon
each time, in one invocation: the baseline, whose executors ask one permit
per dispatch (an Admit each, as before leases), then the executors as they
ship (a lease of paced starts per Admit, successes reported once a lease).
Each run reports the dispatches/s against the declared pace (the pace holds
across executors when it stays <= 1.05), the RPCs the executors sent per
dispatch, the daemon's CPU per dispatch from /proc, and the steps that
failed (refused past their deadline, or an error).

Run as `make bench-paced` (about a minute); the result goes to
bench/results/paced.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .dispatch import run_executors
from .drive import Load, Mode
from .overload import _wait_serving
from .procs import Processes, free_port
from .targets import POLICY, ROOT, SQUAWK, clean_env, command
from .workloads import EXECUTORS, SERVICE, Workload, _each, _expect_admitted, admit_request

__all__ = ["main", "render"]

UPSTREAM = "paced-0"
RUNS = (("one Admit per dispatch", ("--no-lease",)), ("leases of paced starts", ()))


def _policy(pace: float) -> str:
    """The bench policy with UPSTREAM's pace declared in its default profile."""
    text = POLICY.read_text()
    assert "\n  default:\n" in text and "upstreams:" not in text
    return text + f"    upstreams:\n      {UPSTREAM}:\n        rate_limit: {{rate: {pace:g}}}\n"


def _row(name: str, outcome: Any, pace: float) -> dict[str, Any]:
    result = outcome.result
    calls = result["calls"]
    return {
        "run": name,
        "dispatches": calls,
        "dispatches_per_s": round(result["calls_per_s"], 1),
        "of_pace": round(result["calls_per_s"] / pace, 3),
        "rpcs_per_dispatch": round(result["rpcs_per_dispatch"] or 0.0, 4),
        "rpcs": result["rpcs"],
        "daemon_cpu_ms_per_dispatch": round(outcome.cpu_s / calls * 1000, 4) if calls else None,
        "step_errors": result["errors"],
        "p99_ms": round(result["p99_ms"], 1),
    }


def render(report: dict[str, Any]) -> str:
    head = (
        f"| {report['executors']} executors, {report['rate']:g}/s offered, "
        f"pace {report['pace']:g}/s | dispatches/s ÷ pace | RPCs per dispatch "
        "| daemon CPU ms per dispatch | failed steps | p99 ms |"
    )
    lines = [head, "| --- | --- | --- | --- | --- | --- |"]
    for r in report["rows"]:
        lines.append(
            f"| {r['run']} | {r['of_pace']:.3f} | {r['rpcs_per_dispatch']:.3f} "
            f"| {r['daemon_cpu_ms_per_dispatch']:.3f} | {r['step_errors']} | {r['p99_ms']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.paced", description=__doc__)
    ap.add_argument("--rate", type=float, default=1000.0, help="dispatches/s offered, in all")
    ap.add_argument("--pace", type=float, default=1250.0, help="the declared rate, calls/s")
    ap.add_argument("--seconds", type=float, default=10.0, help="measurement window per run")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/paced.json")
    args = ap.parse_args(argv)
    started = datetime.now(UTC)
    workload = Workload(
        "Dispatch run_step +paced upstream",
        SERVICE + "Admit",
        _each([admit_request(UPSTREAM)]),
        _expect_admitted,
        rate=args.rate,
        executors=EXECUTORS,
    )
    load = Load(Path(), args.seconds, args.warmup, 0, 0, None)
    rows = []
    with tempfile.TemporaryDirectory(prefix="squawk-paced-") as tmp:
        policy = Path(tmp) / "policy.yaml"
        policy.write_text(_policy(args.pace))
        for name, extra in RUNS:
            with Processes(Path(tmp)) as procs:
                address = f"127.0.0.1:{free_port()}"
                argv_ = [str(policy) if a == str(POLICY) else a for a in SQUAWK]
                daemon = procs.start(
                    "squawk", command(argv_, address, f"127.0.0.1:{free_port()}"), clean_env()
                )
                _wait_serving(address, daemon.alive)
                outcome = run_executors(
                    procs,
                    daemon,
                    address,
                    workload,
                    Mode(args.rate),
                    load,
                    Path(tmp) / "paced.bin",
                    extra=extra,
                )
            rows.append(_row(name, outcome, args.pace))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    report = {
        "date": started.isoformat(timespec="seconds"),
        "executors": EXECUTORS,
        "rate": args.rate,
        "pace": args.pace,
        "seconds": args.seconds,
        "rows": rows,
    }
    print(render(report))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
