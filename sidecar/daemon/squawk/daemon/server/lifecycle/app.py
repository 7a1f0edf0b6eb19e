"""Running the daemon: bind, health, reflection, signals and draining.

Shutdown (on SIGTERM or SIGINT) fits in the grace period, counted from the
signal, in three steps:

1. notice: health turns NOT_SERVING at once, and every call is still
   answered for `shutdown_notice_s`, so health checkers (a Kubernetes gRPC
   probe, a load balancer) see NOT_SERVING instead of a refused connection,
   and an executor mid-step still gets its decision;
2. drain: `server.stop()` refuses new calls and lets those in flight finish
   until the grace period ends, then cancels them;
3. flush: queued spans get what is left of the grace, at most
   FLUSH_BOUND_S, whatever the collector does.

So the process exits within the grace period plus its own teardown. The
alternative, refusing new calls as soon as the signal arrives (the bare
`server.stop(grace)`), makes health checks fail with UNAVAILABLE instead of
reading NOT_SERVING.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import logging
import os
import signal
import time
from typing import IO

import grpc
from google.protobuf import json_format
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider

from squawk.policy import Policy, PolicyInputError
from squawk.policy.limits import MAX_NAME_CHARS
from squawk.policy.text import shown_text
from squawk.v1 import policy_pb2 as pb

from ...analysis import Analyzer
from ...analysis.worker import lower_switch_interval
from ...config import Config
from ...config.state import StateSettings, Store
from ...settings import ServeSettings
from ..rpc.boundary import MAX_ERROR_CHARS
from ..rpc.health import Health
from ..rpc.reflection import enable_reflection
from ..rpc.servicer import PolicyServicer, register
from ..telemetry.event_page import request_from_query
from ..telemetry.grpc_log import GRPC_LOGGER, LateAnswers
from ..telemetry.loop_lag import watch_loop_lag
from ..telemetry.metrics import Metrics
from ..telemetry.observer import Observer
from ..telemetry.spans import ServerSpans
from ..telemetry.status_page import EVENTS, MAX_ROWS, decision_asked, render
from ..telemetry.tracing import FLUSH_BOUND_S, CountingBatchSpanProcessor, shutdown_tracing
from ..tracking.pod_store import PodStore
from ..tracking.registry import Upstreams
from .listeners import (
    BindError,
    BoundSocket,
    check_unix_socket,
    claim_unix_socket,
    socket_umask,
    unix_socket_path,
)
from .reload import PolicyWatch, read_startup
from .tls import server_credentials

__all__ = [
    "BindError",
    "Daemon",
    "default_shutdown_notice",
]

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["PolicyService"].full_name

# gRPC turns SO_REUSEPORT on by default, which would let a second daemon bind
# the same port silently and steal half the calls.
SERVER_OPTIONS = [("grpc.so_reuseport", 0)]
_JSON = "application/json"


def default_shutdown_notice(grace_s: float) -> float:
    """The command's notice when none is given: 2 s, or half the grace period
    if that is shorter, so the drain and the flush keep the other half. (An
    embedded Daemon defaults to no notice: only a deployment has health
    checkers to tell.)"""
    return min(2.0, grace_s / 2)


class Daemon:
    def __init__(
        self,
        settings: ServeSettings,
        *,
        tracing: tuple[TracerProvider, CountingBatchSpanProcessor | None] | None = None,
        decision_log: IO[str] | None = None,
    ) -> None:
        """The daemon `settings` describe (squawk.daemon.settings). Besides
        them, two things the caller owns: the tracer provider (with its
        counting span processor, when it made one) and the open decision log."""
        config = settings.config
        policy, metrics_listen, health_listen = (
            config.policy,
            settings.metrics_listen,
            settings.health_listen,
        )
        grace_s, shutdown_notice_s = settings.grace_s, settings.shutdown_notice_s
        tls, policy_path = settings.tls, settings.policy_path
        if not 0 <= shutdown_notice_s <= grace_s:
            raise ValueError(
                f"shutdown_notice_s: {shutdown_notice_s} is not between 0 and grace_s ({grace_s})"
            )
        self.tracer_provider = tracing[0] if tracing else None
        self._span_processor = tracing[1] if tracing else None
        self.metrics = Metrics(tracing[1] if tracing else None) if metrics_listen else None
        self.metrics_listen = metrics_listen
        self.analyzer = Analyzer(config.analyzer, policy)
        observer = Observer(self.metrics, decision_log)
        self._late_answers = LateAnswers(observer)
        self._decision_log = decision_log
        self.store = _store(policy, config.state, observer)
        self.servicer = PolicyServicer(
            policy,
            observer=observer,
            analyzer=self.analyzer,
            tracing=ServerSpans(self.tracer_provider) if self.tracer_provider else None,
            store=self.store,
        )
        self.health = Health()
        self.listen = list(settings.listen)
        self.grace_s = grace_s
        self.shutdown_notice_s = shutdown_notice_s
        self.socket_mode = settings.socket_mode
        self.server = grpc.aio.server(options=SERVER_OPTIONS)
        # Health alone, for probes that cannot reach a unix socket (the
        # kubelet's gRPC probe dials the pod's IP): nothing else is served there.
        self.health_listen = health_listen
        self.health_server = grpc.aio.server(options=SERVER_OPTIONS) if health_listen else None
        self.health_port: int | None = None
        # Read now, so a certificate that cannot be used stops the start.
        self._tls = server_credentials(tls) if tls is not None else None
        self._tls_mutual = tls is not None and tls.client_ca is not None
        self.ports: list[int] = []
        self._sockets: list[BoundSocket] = []
        self._stopping = asyncio.Event()
        self._lag_watch: asyncio.Task[None] | None = None
        self.policy_hash = read_startup(policy_path)
        self.policy_source = f"{policy_path} ({self.policy_hash})" if policy_path else "built-in"
        self._policy_watch: PolicyWatch | None = None
        self._policy_task: asyncio.Task[None] | None = None
        self._reloads: set[asyncio.Task[None]] = set()
        if self.metrics is not None:
            self.metrics.policy_info.labels(self.policy_hash).set(1)
        if policy_path:
            # config.empty: the file held no policy at start (see reload.py).
            running = Config(config.policy, config.analyzer, config.state, empty=config.empty)
            self._policy_watch = PolicyWatch(
                policy_path,
                running,
                self.policy_hash,
                self.use_policy,
                self._count_reload,
                settings.policy_poll_s,
            )

    async def start(self) -> None:
        # Until stop(): grpc's traceback per late answer becomes a throttled line.
        logging.getLogger(GRPC_LOGGER).addFilter(self._late_answers)
        register(self.servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        enable_reflection((SERVICE_NAME, health.SERVICE_NAME), self.server)
        # The stock async health servicer starts as SERVING; we are not, yet.
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        try:
            self._bind()
            self._bind_health()
            self._serve_metrics()
            # An unreachable store is an outage like any other: logged, and
            # decisions go on from the pod's own state.
            await self.store.start()
            await self.server.start()
            if self.health_server is not None:
                await self.health_server.start()
        except BaseException:
            # A daemon that fails to start leaves no socket file behind.
            await self.server.stop(None)
            if self.health_server is not None:
                await self.health_server.stop(None)
            await self.store.aclose()
            self._remove_sockets()
            logging.getLogger(GRPC_LOGGER).removeFilter(self._late_answers)
            raise
        # The span export thread and the analysis worker hold the GIL in turns
        # with the loop; at 1 ms the loop waits at most that long for it.
        lower_switch_interval()
        if self.metrics is not None:
            self._lag_watch = asyncio.create_task(watch_loop_lag(self.metrics.loop_lag.observe))
        if self._policy_watch is not None:
            self._policy_task = asyncio.create_task(self._policy_watch.watch())
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("%s", self.summary())

    def _bind(self) -> None:
        for address in self.listen:
            path = unix_socket_path(address)
            if path is None:
                self.ports.append(self._add_port(address, secure=True))
                continue
            claim_unix_socket(address, path)
            with socket_umask(self.socket_mode):
                # Before gRPC, whose error says only "failed to bind".
                check_unix_socket(address, path)
                self.ports.append(self._add_port(address))
            self._sockets.append(BoundSocket(path, os.lstat(path).st_ino))

    def _bind_health(self) -> None:
        if self.health_server is None or not self.health_listen:
            return
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.health_server)
        self.health_port = self._add_port(self.health_listen, self.health_server)

    def _add_port(
        self, address: str, server: grpc.aio.Server | None = None, secure: bool = False
    ) -> int:
        server = server or self.server
        try:
            if secure and self._tls is not None:
                return server.add_secure_port(address, self._tls)
            return server.add_insecure_port(address)
        except RuntimeError as exc:
            raise BindError(
                f"cannot listen on {address}: the address is in use or not available ({exc})"
            ) from None

    def _serve_metrics(self) -> None:
        if self.metrics is None or not self.metrics_listen:
            return
        try:
            self._loop = asyncio.get_running_loop()
            routes = {"/events": self._events_json, "/status": self._status_html}
            self.metrics.serve(self.metrics_listen, routes)
        except (OSError, ValueError) as exc:
            raise BindError(
                f"cannot listen on {self.metrics_listen} for metrics: "
                f"the address is in use or not available ({exc})"
            ) from None

    def _events_json(self, query: str) -> tuple[str, str, bytes]:
        """/events on the metrics port: GetEvents' answer as JSON (its
        proto3 JSON mapping), its fields from the query string
        (?after=12&upstream=search&page_size=50); a bad one is a 400 whose
        JSON names it."""
        try:
            reply = self.servicer.events_page(request_from_query(query))
        except PolicyInputError as exc:
            # The profile's name in it is caller text: through the one gate.
            error = shown_text(str(exc), MAX_ERROR_CHARS)
            return "400 Bad Request", _JSON, json.dumps({"error": error}).encode()
        return "200 OK", _JSON, json_format.MessageToJson(reply, indent=None).encode()

    def _status_html(self, query: str) -> tuple[str, str, bytes]:
        """/status on the metrics port (telemetry/status_page.py). The rows
        are read on the event loop, which owns the registry; the metrics
        port's thread waits for them at most a second. ?decision=ID adds
        that refusal's explanation (a bad query is a 400 naming the field)."""
        try:
            asked = decision_asked(query)
        except PolicyInputError as exc:
            error = shown_text(str(exc), MAX_ERROR_CHARS)
            return "400 Bad Request", "text/plain; charset=utf-8", f"{error}\n".encode()

        async def read() -> tuple[list[pb.UpstreamState], int, pb.ExplainDecisionResponse | None]:
            rows, more = self.servicer.upstream_rows(MAX_ROWS)
            return rows, more, self.servicer.explain(asked) if asked else None

        try:
            rows, more, explained = asyncio.run_coroutine_threadsafe(read(), self._loop).result(1.0)
        except (TimeoutError, RuntimeError):
            return "503 Service Unavailable", "text/plain", b"the daemon is busy: try again\n"
        events = self.servicer.latest_events(EVENTS)
        page = render(rows, more, events, time.time(), asked, explained)
        return "200 OK", "text/html; charset=utf-8", page

    def _remove_sockets(self) -> None:
        for bound in self._sockets:
            bound.remove()

    def summary(self) -> str:
        """One line for an operator: what runs, where, with what on. Never a
        secret: the model's URL carries no credentials (config refuses them),
        the key is never named, the Redis store shows its host only."""
        listen = [
            _bound(address, port) for address, port in zip(self.listen, self.ports, strict=True)
        ]
        if self.health_port is not None and self.health_listen:
            listen.append(f"{_bound(self.health_listen, self.health_port)} (health only)")
        settings = self.analyzer.settings
        on = {
            "tls": "mutual" if self._tls_mutual else ("on" if self._tls is not None else "off"),
            "tracing": "on" if self.tracer_provider is not None else "off",
            "metrics": self.metrics_listen if self.metrics is not None else "off",
            "decision log": _log_name(self._decision_log) if self.servicer.observes_log else "off",
            "model": f"{settings.model} at {settings.base_url}" if settings.uses_model else "off",
        }
        return (
            f"squawk {_version()} serving on {', '.join(listen)}; "
            f"policy {self.policy_source}; "
            f"upstream state: {self.store.describe()}; "
            + "; ".join(f"{name}: {value}" for name, value in on.items())
        )

    def use_policy(self, config: Config, digest: str) -> None:
        """Swap in a reloaded policy, at once for every later call."""
        self.servicer.use_policy(config.policy)
        self.analyzer.use_policy(config.policy)
        if self.metrics is not None:
            self.metrics.policy_info.remove(self.policy_hash)
            self.metrics.policy_info.labels(digest).set(1)
        self.policy_hash = digest

    def _count_reload(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.policy_reloads.labels(result).inc()

    def request_reload(self) -> None:
        if self._policy_watch is not None:
            task = asyncio.get_running_loop().create_task(self._policy_watch.reload("SIGHUP"))
            self._reloads.add(task)
            task.add_done_callback(self._reloads.discard)

    def request_stop(self) -> None:
        self._stopping.set()

    async def run_until_stopped(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, self.request_reload)
        await self._stopping.wait()
        await self.stop()

    async def stop(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.grace_s
        log.info(
            "squawk stopping: health NOT_SERVING, still answering for %.1fs, "
            "then draining; exit within %.1fs",
            self.shutdown_notice_s,
            self.grace_s,
        )
        await self.health.enter_graceful_shutdown()
        await asyncio.sleep(self.shutdown_notice_s)
        await self.server.stop(max(deadline - loop.time(), 0.0))
        if self.health_server is not None:
            await self.health_server.stop(None)
        self._remove_sockets()
        if self._lag_watch is not None:
            self._lag_watch.cancel()
        if self._policy_task is not None:
            self._policy_task.cancel()
        await self.analyzer.aclose()
        await self.store.aclose()
        if self.tracer_provider is not None:
            # Blocks the loop on purpose: the server has stopped, nothing else waits.
            flush_s = min(FLUSH_BOUND_S, max(deadline - loop.time(), 0.0))
            shutdown_tracing(self.tracer_provider, self._span_processor, flush_s)
        logging.getLogger(GRPC_LOGGER).removeFilter(self._late_answers)
        log.info("squawk stopped")


def _store(policy: Policy, settings: StateSettings, observer: Observer) -> PodStore:
    upstreams = Upstreams(
        policy,
        on_transition=observer.transition,
        on_forget=observer.forget,
        on_untracked=observer.untracked,
        on_pace=observer.pace_changed,
        on_cool_down=observer.cooled,
        on_near_limit=observer.near_limit,
    )
    if settings.store is Store.MEMORY:
        return PodStore(upstreams)
    from ..tracking.fleet_store import FleetStore  # needs the redis client, an optional dependency

    observer.store_up(True)
    return FleetStore(
        upstreams,
        settings,
        observer.transition,
        observer.store_up,
        observer.store_dropped,
        on_restored=observer.store_restored,
    )


def _log_name(log_file: IO[str] | None) -> str:
    """Where the decision log goes: its path, stdout, or "on" for a stream
    without a name. The path is the operator's, shown like any text: bounded,
    redacted, and quoted when it holds a character that is not printable."""
    name = getattr(log_file, "name", None)
    if name == 1 or name == "<stdout>":
        return "stdout"
    if not isinstance(name, str):
        return "on"
    shown = shown_text(name, MAX_NAME_CHARS)
    return shown if shown.isprintable() else repr(shown)


def _bound(address: str, port: int) -> str:
    """`address` with the port it got (":0" asks for any)."""
    if unix_socket_path(address) is not None or not address.endswith(":0"):
        return address
    return f"{address[:-2]}:{port}"


def _version() -> str:
    try:
        return importlib.metadata.version("squawk-daemon")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"
