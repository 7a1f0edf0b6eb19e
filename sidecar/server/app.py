"""Running the daemon: bind, health, reflection, signals and draining.

Shutdown follows the grpc idiom: health turns NOT_SERVING first (so load
balancers and clients stop sending), then `server.stop(grace)` lets in-flight
calls finish.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import IO

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry.instrumentation.grpc import aio_server_interceptor, filters
from opentelemetry.sdk.trace import TracerProvider

from ..analysis import Analyzer, AnalyzerSettings
from ..policy import Policy
from ..proto import policy_pb2 as pb
from .observe import Metrics, Observer
from .servicer import PolicyServicer, register
from .telemetry import CountingBatchSpanProcessor

__all__ = ["DEFAULT_LISTEN", "BindError", "Daemon"]

log = logging.getLogger(__name__)

DEFAULT_LISTEN = "127.0.0.1:50051"
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["PolicyService"].full_name

# gRPC turns SO_REUSEPORT on by default, which would let a second daemon bind
# the same port silently and steal half the calls.
SERVER_OPTIONS = [("grpc.so_reuseport", 0)]


class BindError(RuntimeError):
    """The daemon could not listen on an address."""


class Daemon:
    def __init__(
        self,
        policy: Policy,
        listen: list[str],
        grace_s: float = 5.0,
        *,
        tracing: tuple[TracerProvider, CountingBatchSpanProcessor | None] | None = None,
        metrics_listen: str | None = None,
        decision_log: IO[str] | None = None,
        analyzer_settings: AnalyzerSettings | None = None,
    ) -> None:
        self.tracer_provider = tracing[0] if tracing else None
        self.metrics = Metrics(tracing[1] if tracing else None) if metrics_listen else None
        self.metrics_listen = metrics_listen
        # Unset = the offline analyzer; the CLI passes the file's and env's settings.
        self.analyzer = Analyzer(analyzer_settings or AnalyzerSettings(), policy)
        self.servicer = PolicyServicer(
            policy,
            observer=Observer(self.metrics, decision_log),
            analyzer=self.analyzer,
            traced=self.tracer_provider is not None,
        )
        self.health = health.aio.HealthServicer()
        self.listen = listen
        self.grace_s = grace_s
        interceptors = []
        if self.tracer_provider is not None:
            # Health probes and reflection would drown the decisions in noise.
            interceptors.append(
                aio_server_interceptor(  # type: ignore[no-untyped-call]
                    tracer_provider=self.tracer_provider,
                    filter_=filters.negate(filters.service_prefix("grpc.")),
                )
            )
        self.server = grpc.aio.server(interceptors=interceptors, options=SERVER_OPTIONS)
        self.ports: list[int] = []
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        register(self.servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server
        )
        # The stock async health servicer starts as SERVING; we are not, yet.
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        for address in self.listen:
            try:
                port = self.server.add_insecure_port(address)
            except RuntimeError as exc:
                raise BindError(
                    f"cannot listen on {address}: the address is in use or not available ({exc})"
                ) from None
            self.ports.append(port)
        await self.server.start()
        if self.metrics is not None and self.metrics_listen:
            self.metrics.serve(self.metrics_listen)
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("squawk serving on %s", ", ".join(self.listen))
        settings = self.analyzer.settings
        if settings.uses_model:
            # The URL carries no credentials (config refuses them); the key is never logged.
            log.info("AnalyzeError layer 3: model %s at %s", settings.model, settings.base_url)

    def request_stop(self) -> None:
        self._stopping.set()

    async def run_until_stopped(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        await self._stopping.wait()
        await self.stop()

    async def stop(self) -> None:
        log.info("squawk stopping: health NOT_SERVING, draining for up to %.1fs", self.grace_s)
        await self.health.enter_graceful_shutdown()
        await self.server.stop(self.grace_s)
        await self.analyzer.aclose()
        if self.tracer_provider is not None:
            # Flush what is queued; bounded by the exporter's own timeout.
            self.tracer_provider.shutdown()
