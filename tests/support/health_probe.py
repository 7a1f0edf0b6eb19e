"""Health check latencies while a test loads the daemon.

The probe runs in a process of its own: in the test's process, receiving
large answers would hold the GIL and delay the probes themselves.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

__all__ = ["health_latencies"]

_PROBE = """
import json, select, sys, time
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
seen = []
with grpc.insecure_channel(sys.argv[1]) as channel:
    health = health_pb2_grpc.HealthStub(channel)
    health.Check(health_pb2.HealthCheckRequest(), timeout=5)
    print("probing", flush=True)
    while not select.select([sys.stdin], [], [], 0.01)[0]:
        started = time.perf_counter()
        health.Check(health_pb2.HealthCheckRequest(), timeout=5)
        seen.append(time.perf_counter() - started)
print(json.dumps(seen))
"""


def health_latencies(target: str, load: Callable[[], None]) -> list[float]:
    """Each health check's latency, in seconds, from a probe every 10 ms
    that runs while `load()` does, sorted."""
    prober = subprocess.Popen(
        [sys.executable, "-c", _PROBE, target],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert prober.stdout is not None
        assert prober.stdout.readline().strip() == "probing"
        load()
    finally:
        out, _ = prober.communicate("stop\n", timeout=30)
    return sorted(json.loads(out))
