"""The per-call design beside the sync design: one script call per Admit.

Before the sync design the fleet store ran one script (the one kept in
bench/fleet_per_call.lua) for every Admit a pod's own state would allow,
and for every DecideRetry that would RETRY, and the call waited for it.
Here a Python driver sends that script's `admit` step, with the arguments
the old store built (`_config_args` below is its own), for `pods` pod
names on one upstream, in pipelines of `batch`, as fast as the server
answers, for `seconds`: the most it can run on this machine. The outcome
writes (batched per upstream by the old store's writer) and the retries are
left out, so the figure is a lower bound on what the per-call design asked
of Redis.

`drive` calls a script flat out, pipelined or one call per round trip;
`sample` reads the server's and this process's running totals; both serve
bench/fleet_scale.py too.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from squawk.policy import UpstreamConfig
from squawk.policy.retry_budget import TokenBucketConfig
from squawk.policy.timing import seconds

from .fleet_scale_tally import Sample, ServerWork, server_work
from .redis_server import RedisServer

__all__ = ["drive", "measure_per_call", "sample"]

SCRIPT = (Path(__file__).parent / "fleet_per_call.lua").read_text(encoding="utf-8")


def sample(client: Any, server: RedisServer) -> Sample:
    """The running totals now (a synchronous redis-py client)."""
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    commands = client.info("stats")["total_commands_processed"]
    return Sample(
        time.monotonic(),
        server.cpu_s(),
        time.process_time(),
        int(stats.get("calls", 0)),
        int(stats.get("usec", 0)),
        int(commands),
    )


def _config_args(config: UpstreamConfig, min_pods: int) -> list[Any]:
    """The settings the old script read from every call, as the old store sent them."""
    cb, budget = config.circuit_breaker, config.retry_budget
    head: list[Any] = [
        int(cb.enabled),
        repr(cb.failure_ratio),
        cb.minimum_calls,
        round(seconds(cb.window) * 1000),
        cb.buckets,
        round(seconds(cb.open_for) * 1000),
        cb.half_open_probes,
        repr(cb.close_ratio),
        min_pods,
    ]
    cool = math.ceil(seconds(config.max_cool_down) * 1000)
    if isinstance(budget, TokenBucketConfig):
        return [*head, "token_bucket", 0, 0, 1, budget._max, budget._refill, cool]
    floor = budget.min_per_second * seconds(budget.ttl)
    ttl = round(seconds(budget.ttl) * 1000)
    return [*head, "ratio", repr(budget.ratio), repr(floor), ttl, 0, 0, cool]


def drive(
    client: Any,
    server: RedisServer,
    sha: str,
    keys: Sequence[str],
    args: Sequence[str],
    seconds_: float,
    batch: int,
) -> ServerWork:
    """The server's work with the script `sha` called flat out for
    `seconds_`, `args` in turn, `batch` calls per round trip (1: each call
    its own, as a daemon sends it)."""
    client.evalsha(sha, len(keys), *keys, args[0])  # the state exists, as in a running fleet
    before = sample(client, server)
    sent = 0
    while time.monotonic() - before.wall_s < seconds_:
        if batch == 1:
            client.evalsha(sha, len(keys), *keys, args[sent % len(args)])
        else:
            pipe = client.pipeline(transaction=False)
            for i in range(batch):
                pipe.evalsha(sha, len(keys), *keys, args[(sent + i) % len(args)])
            pipe.execute()
        sent += batch
    return server_work(before, sample(client, server))


def measure_per_call(
    client: Any,
    server: RedisServer,
    config: UpstreamConfig,
    min_pods: int,
    seconds_: float = 4.0,
    pods: int = 100,
    batch: int = 200,
) -> ServerWork:
    """The server's work with one script per Admit, driven flat out."""
    sha = client.script_load(SCRIPT)
    words = " ".join(map(str, _config_args(config, min_pods)))
    tail = f"{words} {hashlib.blake2b(words.encode(), digest_size=6).hexdigest()}"
    keys = ["per-call:{upstream}", "per-call:{upstream}:pods"]
    args = [f"admit per-call-pod-{i} 0 -1 0 -1 {tail}" for i in range(pods)]
    return drive(client, server, sha, keys, args, seconds_, batch)
