"""The servers under test, and the Jaeger that receives the traced daemon's spans."""

from __future__ import annotations

import os
import sys
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .procs import Processes, free_port
from .report import trace_label
from .workloads import (
    BATCH_DISTINCT,
    DECIDE_DISTINCT,
    DISPATCH,
    ECHO,
    ECHO_CORPUS,
    POLICY,
    STORE_ADMIT,
    STORE_DECIDE,
    STORE_RATE,
    Workload,
    dispatch_workloads,
    store_workloads,
)

__all__ = [
    "POLICY",
    "REDIS_TARGET",
    "ROOT",
    "SQUAWK",
    "Jaeger",
    "Server",
    "clean_env",
    "command",
    "servers",
    "squawk_servers",
]

ROOT = Path(__file__).resolve().parent.parent
# The daemon as `squawk serve` runs it.
SQUAWK = [
    sys.executable,
    "-m",
    "squawk.daemon.cli",
    "serve",
    "--listen",
    "{listen}",
    "--policy",
    str(POLICY),
    "--grace",
    "1",
    # Metrics on, as in production; the runner reads the loop-lag histogram.
    "--metrics-listen",
    "{metrics}",
]
TRACED_SERVICE = "squawk-bench"


def clean_env() -> dict[str, str]:
    """The environment minus anything that would change the policy or tracing."""
    prefixes = ("OTEL_", "SQUAWK_", "TRUVAG3_")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


# The rows whose ratios are the goals (goals.py), by RPC name prefix:
# measured in every round, each round's rows seconds apart (plan.py).
# The goals read the distinct rows; the same-bytes rows (the best case) are
# measured in the rounds too, for the informational lines beside them.
ECHO_ROUNDS = ("Echo",)
SQUAWK_ROUNDS = (
    DECIDE_DISTINCT,
    "DecideRetry transient",
    "AnalyzeError offline",
    BATCH_DISTINCT,
)
SAMPLED_ROUNDS = (DECIDE_DISTINCT, "AnalyzeError offline")
# The rows the Redis store's cost is read from (store_cost.py), on the
# untraced memory-store daemon and on the Redis-store daemon.
STORE_ROUNDS = (STORE_DECIDE, STORE_ADMIT)
# The dispatch row (dispatch.py), on the untraced daemon only: its goal is
# an absolute CPU per dispatch, and the informational ratio divides it by
# the Python echo floor's CPU per call at the same rate, in the same round.
DISPATCH_ROUNDS = (DISPATCH,)
# The daemon with `state.store: redis` (SQUAWK_STATE_URL), tracing off.
REDIS_TARGET = "squawk-redis"


@dataclass(frozen=True)
class Server:
    target: str
    # The fraction of calls traced (1.0 = every call); None = tracing off.
    sampling: float | None
    argv: list[str]  # "{listen}" is replaced by the address, "{metrics}" by another
    env: dict[str, str]
    workloads: list[Workload]
    # RPC name prefixes measured in every round, at saturation and the
    # first rate; the rest of the rows run once, after the rounds.
    rounds: tuple[str, ...] = ()
    # Run the round rows only, none of the others.
    rounds_only: bool = False
    # Keeps its upstream state on Redis: every row must read it (measure.py).
    fleet: bool = False

    @property
    def tracing(self) -> bool:
        return self.sampling is not None

    @property
    def label(self) -> str:
        return trace_label(self.sampling)

    @property
    def name(self) -> str:
        return f"{self.target}-tracing-{self.label}"

    @property
    def has_metrics(self) -> bool:
        """Whether its command serves Prometheus metrics ("{metrics}" in argv)."""
        return any("{metrics}" in a for a in self.argv)


def command(argv: Sequence[str], listen: str, metrics: str) -> list[str]:
    """`argv` with its placeholders filled: gRPC on `listen`, metrics on `metrics`."""
    return [a.replace("{listen}", listen).replace("{metrics}", metrics) for a in argv]


def servers(
    squawk: list[str],
    echo_go: Path,
    workloads: list[Workload],
    otlp_port: int | None,
    redis_url: str | None = None,
    store_rate: float = STORE_RATE,
) -> list[Server]:
    """The floors first, then Squawk untraced, with the Redis store (when a
    Redis server is given), then traced (when Jaeger runs)."""
    env = clean_env()
    echo_py = [sys.executable, "-m", "bench.echo_server", "--listen", "{listen}"]
    store = store_workloads(store_rate) if redis_url else []
    untraced, *traced = squawk_servers(squawk, workloads, otlp_port, store)
    found = [
        Server("echo-go", None, [str(echo_go), "-listen", "{listen}"], env, [ECHO, ECHO_CORPUS]),
        Server("echo-py", None, echo_py, env, [ECHO, ECHO_CORPUS], ECHO_ROUNDS),
        untraced,
    ]
    if redis_url:
        # Only the store rows, in each round right after the memory store's,
        # so that a round's two rows are seconds apart. The same command and
        # policy; `state:` keeps its defaults (a sync every 100 ms, ...).
        redis_env = env | {"SQUAWK_STATE_URL": redis_url}
        found.append(
            Server(
                REDIS_TARGET,
                None,
                squawk,
                redis_env,
                store,
                STORE_ROUNDS,
                rounds_only=True,
                fleet=True,
            )
        )
    return [*found, *traced]


def squawk_servers(
    squawk: list[str],
    workloads: list[Workload],
    otlp_port: int | None,
    store: Sequence[Workload] = (),
) -> list[Server]:
    """Squawk untraced, then at 100 % and 10 % sampling (when Jaeger runs).

    `store`: rows for the untraced daemon only, measured in every round (the
    memory store's side of the Redis store's cost); so is the dispatch row.
    """
    env = clean_env()
    untraced = [*workloads, *store, *dispatch_workloads()]
    rounds = SQUAWK_ROUNDS + STORE_ROUNDS + DISPATCH_ROUNDS
    found = [Server("squawk", None, squawk, env, untraced, rounds)]
    if otlp_port is None:
        return found
    traced = env | {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp_port}",
        "OTEL_SERVICE_NAME": TRACED_SERVICE,
        # Export at least every second (the SDK default is 5 s), so each
        # row's spans reach Jaeger, and are counted, before the next row.
        # Under load a batch fills (512 spans) long before either timer.
        "OTEL_BSP_SCHEDULE_DELAY": "1000",
    }
    every = traced | {"OTEL_TRACES_SAMPLER": "always_on"}
    # The load generator sends no traceparent, so every call is a root and
    # the ratio alone decides: a tenth of the calls are traced.
    tenth = traced | {
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.1",
    }
    return [
        *found,
        Server("squawk", 1.0, squawk, every, workloads, SQUAWK_ROUNDS),
        # Only the rows of its informational ratios: the others would say
        # little that the 100 % rows do not, for minutes of load.
        Server("squawk", 0.1, squawk, tenth, workloads, SAMPLED_ROUNDS, rounds_only=True),
    ]


_PORTS = (
    "JAEGER_QUERY_PORT",
    "JAEGER_QUERY_GRPC_PORT",
    "JAEGER_HEALTH_PORT",
    "JAEGER_OTLP_GRPC_PORT",
    "JAEGER_OTLP_HTTP_PORT",
    "JAEGER_METRICS_PORT",
)
_ACCEPTED = "otelcol_receiver_accepted_spans"


class Jaeger:
    """Jaeger v2 on loopback (bench/jaeger.yaml), started and stopped by `procs`."""

    def __init__(self, procs: Processes, binary: Path, cpus: str | None) -> None:
        self.ports = {name: free_port() for name in _PORTS}
        env = clean_env() | {k: str(v) for k, v in self.ports.items()}
        # Jaeger is itself instrumented; it must not trace itself.
        env["OTEL_TRACES_EXPORTER"] = "none"
        argv = [str(binary), "--config", str(ROOT / "bench" / "jaeger.yaml")]
        proc = procs.start("jaeger", argv, env, cpus)
        procs.wait_http_healthy(proc, f"http://127.0.0.1:{self.ports['JAEGER_HEALTH_PORT']}/status")
        self.otlp_port = self.ports["JAEGER_OTLP_GRPC_PORT"]

    def accepted_spans(self) -> float:
        """Spans the OTLP receiver has accepted so far (0 before the first)."""
        url = f"http://127.0.0.1:{self.ports['JAEGER_METRICS_PORT']}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            text = reply.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(_ACCEPTED) and 'transport="grpc"' in line
        )
