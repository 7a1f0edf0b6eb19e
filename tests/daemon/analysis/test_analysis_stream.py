"""The daemon keeps answering health checks while it serves the costliest requests.

Every call runs on one event loop; AnalyzeError and CheckDispatch do their
CPU work on the analysis worker thread. Here two clients send nothing but
the worst requests that fit every bound (tests/support/analysis_worst.py), back
to back, for a few seconds and until each was answered, while a third
checks health every 10 ms on its own connection. Every worst request must
be answered, not refused or failed; 99 % of the health checks must answer
within 100 ms, and every one within a second.

Why a percentile and not the maximum: on a machine with more runnable
threads than cores, the OS alone delays an idle daemon now and then (an
idle daemon on this 2-core machine at load 6 answered one check in 125
ms, the others in under 10 ms). The daemon's own failure mode is
different and not rare: a request holding the loop delays every check
made while it runs (before the worker: 11 s for one request), which both
bounds catch.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from analysis_worst import WORST_ANALYZE_ERROR, WORST_CHECK_DISPATCH
from conftest import Daemon, start_daemon

LOAD_S = 6.0
MAX_LOAD_S = 60.0
HEALTH_EVERY_S = 0.01
HEALTH_LIMIT_S = 0.1
HEALTH_PERCENTILE = 0.99
HEALTH_NEVER_S = 1.0


@pytest.fixture(scope="module")
def busy_daemon() -> Iterator[Daemon]:
    daemon = start_daemon()
    yield daemon
    daemon.stop()


def _raw(channel: grpc.Channel, method: str) -> Callable[..., bytes]:
    # Pre-serialized requests: the clients spend their time waiting, not
    # encoding, so what is measured is the daemon.
    call: Callable[..., bytes] = channel.unary_unary(
        f"/squawk.v1.PolicyService/{method}",
        request_serializer=lambda data: data,
        response_deserializer=lambda data: data,
    )
    return call


def test_health_answers_within_100_ms_under_a_stream_of_worst_requests(
    busy_daemon: Daemon,
) -> None:
    loads = {
        "AnalyzeError": [build().SerializeToString() for build in WORST_ANALYZE_ERROR.values()],
        "CheckDispatch": [build().SerializeToString() for build in WORST_CHECK_DISPATCH.values()],
    }
    answered = {method: 0 for method in loads}
    failures: list[str] = []
    stop = threading.Event()

    def send(method: str, bodies: list[bytes]) -> None:
        with grpc.insecure_channel(busy_daemon.target) as channel:
            call = _raw(channel, method)
            i = 0
            while not stop.is_set():
                try:
                    call(bodies[i % len(bodies)], timeout=60)
                    answered[method] += 1
                except grpc.RpcError as exc:
                    failures.append(f"{method}: {exc.code()} {exc.details()}")
                i += 1

    senders = [
        threading.Thread(target=send, args=(method, bodies), daemon=True)
        for method, bodies in loads.items()
    ]
    latencies: list[float] = []
    with grpc.insecure_channel(busy_daemon.target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        check = health.Check  # type: ignore[attr-defined]  # typeshed declares no methods
        check(health_pb2.HealthCheckRequest(), timeout=5)  # connected before the load starts
        for sender in senders:
            sender.start()
        started = time.monotonic()

        def loading() -> bool:
            # At least LOAD_S, and until every worst request was answered once.
            elapsed = time.monotonic() - started
            pending = any(answered[m] < len(bodies) for m, bodies in loads.items())
            return elapsed < LOAD_S or (pending and elapsed < MAX_LOAD_S and not failures)

        while loading():
            sent = time.perf_counter()
            reply = check(health_pb2.HealthCheckRequest(), timeout=5)
            latencies.append(time.perf_counter() - sent)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            time.sleep(HEALTH_EVERY_S)
        stop.set()
        for sender in senders:
            sender.join(120)
    assert failures == []
    # The load was real: every worst request was served.
    assert answered["AnalyzeError"] >= len(loads["AnalyzeError"])
    assert answered["CheckDispatch"] >= len(loads["CheckDispatch"])
    ranked = sorted(latencies)
    percentile = ranked[math.ceil(HEALTH_PERCENTILE * len(ranked)) - 1]
    summary = (
        f"{len(ranked)} health checks: p99 {percentile * 1e3:.0f} ms, "
        f"slowest {ranked[-1] * 1e3:.0f} ms; answered {answered}"
    )
    assert percentile < HEALTH_LIMIT_S, summary
    assert ranked[-1] < HEALTH_NEVER_S, summary
