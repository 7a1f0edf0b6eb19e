"""`make fleet-sim`: how many calls does a failing upstream get from 50 pods?

50 pods, each an asyncio task with its own store built as the daemon builds
it (server/lifecycle/app.py's `_store`), call one simulated upstream:
healthy for 3 s, then every call fails with HTTP 503 (no Retry-After) for 12 s, then healthy
for 10 s. Each pod, 10 times a second at a fixed phase (seeded), asks its
store's `admit`; when allowed, it calls the upstream and passes the outcome
to the store's `record`, as a runner's ReportOutcome would. The same pods,
seed and timeline run in three modes:

- fleet store: `Upstreams` + `FleetStore` on one real Redis-compatible
  server on loopback (bench/redis_server.py), each pod with its own
  connection pool and pod name; the store syncs every 100 ms (the default).
- pod-local: `Upstreams` + `PodStore`, the memory store: each pod alone.
- no breaker: the memory store with `circuit_breaker: {enabled: false}`.

The policy, scaled to a short run (parsed by the daemon's own parser from
the YAML in `policy_yaml`): a 10 s window in 10 buckets, opening at >= 10
calls with >= 50 % failed, open 3 s, 5 half-open probes, closing at >= 60 %
probe successes; the fleet's breaker opens only on failures from >= 2 pods.

The upstream answers at once: a call is counted when made, and its outcome
recorded right after. All 50 pods share this process's event loop, so an
Admit that waits on Redis also waits behind the other pods' work; a fleet
answer while the store is away is the pod's own (LOCAL), and is counted.

Prints a Markdown table (bench/fleet_tally.py) and writes every count to
--out. About 80 s in all.

Usage: python -m bench.fleet_sim [--out FILE] [--pods N] [--rate PER_S] [--seed N]
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import json
import logging
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from squawk.daemon.config import Config, parse_config
from squawk.daemon.config.state import StateSettings, Store
from squawk.daemon.server.tracking.fleet_store import FleetStore
from squawk.daemon.server.tracking.pod_store import PodStore, Source
from squawk.daemon.server.tracking.registry import Transition, Upstreams
from squawk.policy import BreakerState, Outcome, Profile

from .fleet_tally import ModeSummary, Phase, PodTally, Timeline, render_table, summarize
from .redis_server import RedisServer, server_binary

__all__ = ["Mode", "policy_yaml"]

TIMELINE = Timeline(before_s=3.0, outage_s=12.0, after_s=10.0)
UPSTREAM = "flaky-api"
# Time for every pod's first call to be scheduled before the clock starts.
START_DELAY_S = 0.5
BREAKER = (
    "{enabled: true, failure_ratio: 0.5, minimum_calls: 10, window: 10s, buckets: 10,"
    " open_for: 3s, half_open_probes: 5, close_ratio: 0.6}"
)
SUCCESS = Outcome(success=True, http_status=200)
FAILURE = Outcome(success=False, http_status=503)


class Mode(enum.StrEnum):
    FLEET = "fleet store (Redis)"
    POD_LOCAL = "pod-local (memory)"
    NO_BREAKER = "no breaker"


def policy_yaml(mode: Mode, url: str) -> str:
    """The policy file each pod of `mode` would be given."""
    state = ""
    if mode is Mode.FLEET:
        state = f'state: {{store: redis, url: "{url}", key_prefix: "fleet-sim:", min_pods: 2}}\n'
    breaker = "{enabled: false}" if mode is Mode.NO_BREAKER else BREAKER
    return f"{state}profiles:\n  default:\n    circuit_breaker: {breaker}\n"


def _opened(tally: PodTally) -> Callable[[Transition], None]:
    def seen(transition: Transition) -> None:
        if transition.after is BreakerState.OPEN:
            if transition.fleet:
                tally.fleet_openings += 1
            else:
                tally.own_openings += 1

    return seen


def _down(tally: PodTally) -> Callable[[bool], None]:
    def seen(up: bool) -> None:
        tally.store_downs += not up

    return seen


def build_store(config: Config, pod: int, tally: PodTally) -> PodStore:
    """As the daemon's `_store`, with the observer's callbacks counting into
    `tally`, and a pod name of its own."""
    upstreams = Upstreams(config.policy, on_transition=_opened(tally))
    if config.state.store is Store.MEMORY:
        return PodStore(upstreams)
    settings = replace(config.state, pod=f"sim-pod-{pod:02d}")
    return FleetStore(upstreams, settings, _opened(tally), _down(tally))


async def run_pod(
    store: PodStore, profile: Profile, tally: PodTally, start: float, offset: float, rate: float
) -> None:
    loop = asyncio.get_running_loop()
    interval = 1 / rate
    calls = 0
    while (due := start + offset + calls * interval) < start + TIMELINE.total_s:
        # A pod the loop held up calls late, not less often: the next ones come sooner.
        await asyncio.sleep(max(due - loop.time(), 0.0))
        calls += 1
        asked = loop.time() - start
        admission, source = await store.admit(profile, UPSTREAM)
        tally.asked(TIMELINE.phase(asked), asked, admission.allowed, source is Source.LOCAL)
        if not admission.allowed:
            continue
        now = loop.time() - start
        phase = TIMELINE.phase(now)
        tally.called(phase, now)
        outcome = FAILURE if phase is Phase.OUTAGE else SUCCESS
        store.record([(profile, UPSTREAM, outcome)])


async def run_mode(mode: Mode, url: str, pods: int, rate: float, seed: int) -> ModeSummary:
    config = parse_config(policy_yaml(mode, url), f"<{mode} policy>")
    profile = config.policy.profile("default")
    tallies = [PodTally() for _ in range(pods)]
    stores = [build_store(config, i, tally) for i, tally in enumerate(tallies)]
    await asyncio.gather(*(store.start() for store in stores))
    try:
        rng = random.Random(seed)
        start = asyncio.get_running_loop().time() + START_DELAY_S
        await asyncio.gather(
            *(
                run_pod(store, profile, tally, start, rng.uniform(0, 1 / rate), rate)
                for store, tally in zip(stores, tallies, strict=True)
            )
        )
    finally:
        await asyncio.gather(*(store.aclose() for store in stores))
    return summarize(mode.value, tallies, TIMELINE, fleet=mode is Mode.FLEET)


async def simulate(url: str, pods: int, rate: float, seed: int) -> list[ModeSummary]:
    summaries = []
    for mode in Mode:
        print(f"fleet-sim: {mode}, {TIMELINE.total_s:g} s ...", file=sys.stderr, flush=True)
        summaries.append(await run_mode(mode, url, pods, rate, seed))
    return summaries


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("bench/results/fleet_sim.json"))
    p.add_argument("--pods", type=int, default=50)
    p.add_argument("--rate", type=float, default=10.0, help="calls per second per pod")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    # The fleet store says when it takes Redis for down, and when it is back.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    date = datetime.now(UTC).isoformat(timespec="seconds")
    load_before = os.getloadavg()
    began = time.monotonic()
    server = RedisServer().start()
    try:
        summaries = asyncio.run(simulate(server.url, args.pods, args.rate, args.seed))
    finally:
        server.stop()
    runtime = time.monotonic() - began
    table = render_table(summaries, Mode.NO_BREAKER.value)
    doc: dict[str, Any] = {
        "date": date,
        "runtime_s": round(runtime, 1),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "server": Path(server_binary()).name,
        "pods": args.pods,
        "rate_per_pod": args.rate,
        "seed": args.seed,
        "timeline": asdict(TIMELINE),
        "policies": {mode.value: policy_yaml(mode, "redis://127.0.0.1:PORT/0") for mode in Mode},
        "modes": [asdict(s) for s in summaries],
        "table": table,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(table)
    print(
        f"\n{args.pods} pods x {args.rate:g} calls/s against one upstream: healthy "
        f"{TIMELINE.before_s:g} s, every call 503 for {TIMELINE.outage_s:g} s, healthy "
        f"{TIMELINE.after_s:g} s; breaker {BREAKER}, fleet quorum 2 pods, store deadline "
        f"{StateSettings().deadline / timedelta(milliseconds=1):g} ms. {runtime:.0f} s in all; "
        f"{args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
