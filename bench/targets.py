"""The servers under test, and the Jaeger that receives the traced daemon's spans."""

from __future__ import annotations

import os
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .procs import Processes, free_port
from .workloads import ECHO, Workload

__all__ = ["POLICY", "ROOT", "SQUAWK", "Jaeger", "Server", "clean_env", "servers"]

ROOT = Path(__file__).resolve().parent.parent
# The built-in policy with thresholds the state rows cannot reach (see the file).
POLICY = ROOT / "bench" / "policy.yaml"
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
]
TRACED_SERVICE = "squawk-bench"


def clean_env() -> dict[str, str]:
    """The environment minus anything that would change the policy or tracing."""
    prefixes = ("OTEL_", "SQUAWK_", "TRUVAG3_")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


@dataclass(frozen=True)
class Server:
    target: str
    tracing: bool
    argv: list[str]  # "{listen}" is replaced by the address
    env: dict[str, str]
    workloads: list[Workload]

    @property
    def name(self) -> str:
        return f"{self.target}-tracing-{'on' if self.tracing else 'off'}"


def servers(
    squawk: list[str], echo_go: Path, workloads: list[Workload], otlp_port: int | None
) -> list[Server]:
    """The floors first, then Squawk untraced, then traced (when Jaeger runs)."""
    env = clean_env()
    echo_py = [sys.executable, "-m", "bench.echo_server", "--listen", "{listen}"]
    found = [
        Server("echo-go", False, [str(echo_go), "-listen", "{listen}"], env, [ECHO]),
        Server("echo-py", False, echo_py, env, [ECHO]),
        Server("squawk", False, squawk, env, workloads),
    ]
    if otlp_port is not None:
        traced = env | {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp_port}",
            "OTEL_TRACES_SAMPLER": "always_on",
            "OTEL_SERVICE_NAME": TRACED_SERVICE,
            # Export at least every second (the SDK default is 5 s), so each
            # row's spans reach Jaeger, and are counted, before the next row.
            # Under load a batch fills (512 spans) long before either timer.
            "OTEL_BSP_SCHEDULE_DELAY": "1000",
        }
        found.append(Server("squawk", True, squawk, traced, workloads))
    return found


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
