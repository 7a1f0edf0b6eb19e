"""The scale simulation's tables and its extrapolation, from its figures.

Pure: bench/fleet_scale.py hands `render` each run's figures (the dicts it
also writes to bench/results/fleet_scale.json) and the per-call design's
measure; `per_call_cores` and `largest_fleet` are the extrapolation's
arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .fleet_scale_tally import ServerWork

__all__ = ["largest_fleet", "per_call_cores", "render"]

# The scale: pods, each making this many calls per second.
SCALE_PODS, SCALE_RATE = 1000, 1000.0


def per_call_cores(calls_per_s: float, server_us_per_script: float) -> float:
    """The server cores the per-call design needs for `calls_per_s`: one
    script per call, each costing what it cost here."""
    return calls_per_s * server_us_per_script / 1e6


def largest_fleet(server_us_per_script: float, rate: float = SCALE_RATE) -> float:
    """The pods at `rate` calls/s that one busy server core holds, per call."""
    return 1e6 / server_us_per_script / rate


def _n(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.2g}" if abs(x) < 1 else f"{x:.1f}"


def _ms(d: Mapping[str, float]) -> str:
    return f"{d['p50']:.1f} / {d['p99']:.1f}"


def render(runs: Sequence[Mapping[str, Any]], scripts: Mapping[str, ServerWork]) -> str:
    """The tables; `scripts`: each script driven flat out, as
    bench/fleet_scale.py names them ("per call, x200" is the per-call design)."""
    per_call, alone = scripts["per call, x200"], scripts["per call, alone"]
    cost = [
        "| design | pods | calls/s per pod | fleet calls asked/s | pod syncs/s | scripts/s "
        "| server commands/s | server CPU (cores) | server CPU per script (µs) "
        "| script time (µs) | pod's sync code CPU (µs) | simulator CPU (cores) "
        "| one pod's RTT p50 / p99 (ms) |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in runs:
        s = r["steady"]
        cost.append(
            f"| sync | {r['pods']:,} | {r['rate_per_pod']:,.0f} | {r['demand_per_s']:,.0f} "
            f"| {_n(r['pod_syncs_per_s'])} | {_n(s['scripts_per_s'])} | {_n(s['commands_per_s'])} "
            f"| {s['server_cores']:.2f} | {s['server_us_per_script']:.1f} | {s['script_us']:.1f} "
            f"| {r['pod_sync_code_us']:.1f} | {s['own_cores']:.2f} "
            f"| {_ms(r['solo_rtt_ms'])} |"
        )
    p = per_call
    cost.append(
        f"| per call | - | - | {_n(p.scripts_per_s)} (one script each) | - "
        f"| {_n(p.scripts_per_s)} | {_n(p.commands_per_s)} | {p.server_cores:.2f} "
        f"| {p.server_us_per_script:.1f} | {p.script_us:.1f} | - | {p.own_cores:.2f} | - |"
    )
    pace = [
        "| pods | calls/s per pod | fleet rate R | ticks late p50 / p99 (ms) "
        "| pods in the demand sums, held "
        "| most started in any 1 s | limit: 1.05 R + R x interval "
        "| most in any interval, per R x interval | mean, steady / after the shift "
        "| cold start: most in 1 s | outage to the calls' quorum (s) "
        "| calls' quorum to the sync that read it | that sync to every pod's OPEN "
        "| calls' quorum to every pod's OPEN (intervals) |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in runs:
        a, b, rate = r["pace"], r["breaker"], r["fleet_rate"]
        pace.append(
            f"| {r['pods']:,} | {r['rate_per_pod']:,.0f} | {rate:,.0f} "
            f"| {_ms(r['late_ms'])} | {r['reported']:.1%}, {'yes' if r['held'] else 'NO'} "
            f"| {a['most_in_1s']:,.0f} ({a['most_in_1s'] / rate:.3f} R) | {a['limit_1s']:,.0f} "
            f"| {a['most_in_interval'] / (rate * r['interval_s']):.2f} "
            f"| {a['steady_per_s'] / rate:.3f} R / {a['shifted_per_s'] / rate:.3f} R "
            f"| {a['cold_start_most_in_1s'] / rate:.2f} R "
            f"| {b['quorum_after_outage_s']:.2f} | {b['read_after_quorum_intervals']:.2f} "
            f"| {b['all_open_after_read_intervals']:.2f} "
            f"| {b['all_open_after_quorum_intervals']:.2f} "
            f"({b['open_pods']:,} of {b['calling_pods']:,} pods) |"
        )
    each = [
        "| script, calls per round trip | scripts/s | server CPU (cores) "
        "| server CPU per script (µs) | script time (µs) |",
        "|---|--:|--:|--:|--:|",
        *(
            f"| {name} | {_n(w.scripts_per_s)} | {w.server_cores:.2f} "
            f"| {w.server_us_per_script:.1f} | {w.script_us:.1f} |"
            for name, w in scripts.items()
        ),
    ]
    scale = SCALE_PODS * SCALE_RATE
    sync_line = ""
    big = [r for r in runs if r["pods"] == SCALE_PODS and r["rate_per_pod"] == SCALE_RATE]
    if big:
        syncs = SCALE_PODS / big[0]["interval_s"]
        sync_line = (
            f"Sync design at {SCALE_PODS:,} pods x {SCALE_RATE:,.0f} calls/s: measured, "
            f"{big[0]['steady']['server_cores']:.2f} of a server core with the syncs "
            f"pipelined by group; each pod sending its own ({syncs:,.0f} round trips/s), "
            f"{per_call_cores(syncs, scripts['sync, alone'].server_us_per_script):.2f} "
            "cores at the cost of a script alone. One script per pod per upstream per "
            "sync interval, whatever the calls.\n"
        )
    p = per_call
    words = (
        f"{sync_line}Per-call design: {_n(p.scripts_per_s)} scripts/s here, pipelined, at "
        f"{p.server_cores:.2f} server cores ({p.server_us_per_script:.1f} µs of server CPU "
        f"per script; {alone.server_us_per_script:.1f} µs sent one per round trip, as a "
        f"pod did); {SCALE_PODS:,} pods x {SCALE_RATE:,.0f} calls/s would be "
        f"{scale:,.0f} scripts/s, {per_call_cores(scale, p.server_us_per_script):.0f} to "
        f"{per_call_cores(scale, alone.server_us_per_script):.0f} server cores' work, which "
        "one single-threaded server cannot do: one core holds "
        f"{largest_fleet(alone.server_us_per_script):.0f} to "
        f"{largest_fleet(p.server_us_per_script):.0f} pods at {SCALE_RATE:,.0f} calls/s "
        "(Admits only; the outcome writes and retries come on top)."
    )
    if not all(r["held"] for r in runs):
        words += (
            "\nA run marked NO fell behind its schedule (the machine was busy): its pace and "
            "breaker figures are the simulator's lag as much as the design's."
        )
    return "\n".join([*cost, "", *pace, "", *each, "", words])
