"""The daemon's Prometheus metrics, on a private registry served on
--metrics-listen, and the one way a caller's string becomes a label value.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from squawk.policy.limits import MAX_NAME_CHARS
from squawk.policy.text import shown_text

__all__ = [
    "LOOP_LAG_BUCKETS",
    "MAX_UPSTREAM_LABELS",
    "OTHER_UPSTREAMS",
    "PACE_WAIT_BUCKETS",
    "Metrics",
    "Route",
    "label_value",
]

# A route of the metrics port: the query string to (status, content type, body).
Route = Callable[[str], tuple[str, str, bytes]]

# No `_created` sample beside each counter and histogram: Prometheus's text
# format stores it as a series of its own that no rule or panel reads, and
# at 100 upstreams it was a quarter of a scrape's lines (and its cost).
disable_created_metrics()  # type: ignore[no-untyped-call]

# Upstream names are caller data: past this many tracked names with a
# label of their own, metric labels say "other", so a caller cannot grow the
# series without bound. The policy file's names always have their own, and
# a name the registry drops gives its label (and its series) up.
MAX_UPSTREAM_LABELS = 100
OTHER_UPSTREAMS = "other"
_LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1)
# From "on time" (a wake-up costs some 0.1 ms even on an idle loop) to a
# loop held for seconds.
# A paced wait: from a slot at 1,000 calls/s to the longest queue delay.
PACE_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
LOOP_LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


def label_value(text: str) -> str:
    """A caller's string as a metric label value: shown (bounded, secrets
    redacted) with every character that is not printable escaped as Python
    writes it (\\r, \\x1b, \\x00, \\u2028). Prometheus's text format
    escapes only backslash, double quote and newline, so a raw CR or ESC
    would reach whatever reads /metrics (a terminal, a log line)."""
    shown = shown_text(text, MAX_NAME_CHARS)
    if shown.isprintable():
        return shown
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in shown)


class _DroppedSpans(Collector):
    def __init__(self, source: object) -> None:
        self._source = source

    def collect(self) -> list[CounterMetricFamily]:
        family = CounterMetricFamily(
            "squawk_spans_dropped", "Spans dropped because the export queue was full."
        )
        family.add_metric([], float(getattr(self._source, "dropped", 0)))
        return [family]


class Metrics:
    """Prometheus metrics on a private registry, served on --metrics-listen."""

    def __init__(self, span_source: object | None = None) -> None:
        self.registry = CollectorRegistry()
        self.decisions = Counter(
            "squawk_decisions",
            "Decisions made, by RPC, action and rule.",
            ["rpc", "action", "reason"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "squawk_decision_duration_seconds",
            "Time to decide, from request to answer, inside the daemon.",
            ["rpc"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.corrections = Counter(
            "squawk_corrections",
            "Correction attempts (DecideRetry said CORRECT) and analyzer outcomes.",
            ["outcome"],
            registry=self.registry,
        )
        self.analyzer_latency = Histogram(
            "squawk_analyzer_duration_seconds",
            "Time AnalyzeError took, by the analyzer that answered.",
            ["source"],
            registry=self.registry,
        )
        self.refused = Counter(
            "squawk_refused_calls",
            "Calls answered with an error, by RPC, cause (malformed, invalid_argument, "
            "internal, cancelled: the caller went away, behind: too close to its deadline "
            "to be decided, overloaded: shed by the daemon's overload level) and gRPC "
            "status code.",
            ["rpc", "cause", "code"],
            registry=self.registry,
        )
        self.analyzer_fallbacks = Counter(
            "squawk_analyzer_fallbacks",
            "Model answers that fell back to the offline analyzer, by cause.",
            ["cause"],
            registry=self.registry,
        )
        self.breaker_transitions = Counter(
            "squawk_breaker_transitions",
            "Circuit breaker state changes, by profile and upstream (the policy file's "
            f"names, and at most {MAX_UPSTREAM_LABELS} others, then {OTHER_UPSTREAMS!r}).",
            ["profile", "upstream", "from", "to"],
            registry=self.registry,
        )
        self.fleet_breaker_transitions = Counter(
            "squawk_fleet_breaker_transitions",
            "Fleet-wide circuit breaker state changes (state.store redis) this pod "
            "made, by profile and upstream (labelled as squawk_breaker_transitions).",
            ["profile", "upstream", "from", "to"],
            registry=self.registry,
        )
        self.state_answers = Counter(
            "squawk_state_answers",
            "Admit and DecideRetry answers that read upstream state, by where it came "
            "from: fleet (the Redis store) or local (the store was unreachable or late).",
            ["rpc", "state"],
            registry=self.registry,
        )
        # Registered by the Redis store's first report: with the memory store
        # a gauge stuck at 0 would read as an outage to every alert on it.
        self.state_store_up = Gauge(
            "squawk_state_store_up",
            "1 while the fleet state store answers, 0 during an outage.",
            registry=None,
        )
        self.state_writes_dropped = Counter(
            "squawk_state_writes_dropped",
            "Outcomes the fleet state store never got (more upstreams waiting to be "
            "written than the writer holds); this pod's own state counted them.",
            registry=None,
        )
        self.state_restored = Counter(
            "squawk_state_restored",
            "Fleet caution (an OPEN breaker, a cool-down) this pod wrote back to the "
            "fleet state store after the store lost it (flushed, or restarted empty).",
            registry=None,
        )
        self._store_up_shown = False
        self.policy_reloads = Counter(
            "squawk_policy_reloads",
            "Policy file reloads, by result: applied, invalid (the old policy kept), "
            "unchanged (the same bytes).",
            ["result"],
            registry=self.registry,
        )
        self.policy_info = Gauge(
            "squawk_policy_info",
            "1 for the policy in use, labelled with its hash (the first 12 hex digits "
            "of the file's SHA-256; builtin without a file).",
            ["hash"],
            registry=self.registry,
        )
        self.breaker_state = Gauge(
            "squawk_breaker_state",
            "Circuit breaker state by profile and upstream: 1 closed, 2 open, 3 half-open "
            "(for the names squawk_breaker_transitions labels; none for other).",
            ["profile", "upstream"],
            registry=self.registry,
        )
        self.pace_rate = Gauge(
            "squawk_pace_rate",
            "The calls per second an upstream's pace allows (0: none), by profile and "
            "upstream (labelled as squawk_breaker_transitions); set when its source "
            "changes or the rate moves by over 20 %.",
            ["profile", "upstream"],
            registry=self.registry,
        )
        self.pace_wait = Histogram(
            "squawk_pace_wait_seconds",
            "The paced wait of each Admit granted on a tracked upstream, by profile and "
            "upstream (labelled as squawk_breaker_transitions); 0 when it starts at once.",
            ["profile", "upstream"],
            buckets=PACE_WAIT_BUCKETS,
            registry=self.registry,
        )
        self.admit_shed = Counter(
            "squawk_admit_shed",
            "Admit calls refused UPSTREAM_SATURATED: the pace could not start them "
            "before their deadline, or the queue was kept short. By profile and upstream.",
            ["profile", "upstream"],
            registry=self.registry,
        )
        self.admit_share_refused = Counter(
            "squawk_admit_share_refused",
            "Admit calls refused UPSTREAM_SATURATED because their fairness key asked "
            "more than its share of the pace (counted in squawk_admit_shed_total too). "
            "By profile and upstream; the keys are not labels.",
            ["profile", "upstream"],
            registry=self.registry,
        )
        self.admit_levels = Counter(
            "squawk_admit_levels",
            "Admit calls on a tracked upstream by the call's criticality (CRITICAL_PLUS, "
            "CRITICAL, SHEDDABLE_PLUS, SHEDDABLE) and result: admitted, or shed "
            "(UPSTREAM_SATURATED). By profile and upstream.",
            ["profile", "upstream", "criticality", "result"],
            registry=self.registry,
        )
        self.quota_near_limit = Counter(
            "squawk_quota_near_limit",
            "Answers that were not throttled but whose rate-limit headers said 80 % or "
            "more of a quota (requests or tokens) is used (envoyproxy/ratelimit's "
            "near_limit): the upstream will soon refuse. By profile and upstream.",
            ["profile", "upstream"],
            registry=self.registry,
        )
        self.admit_cap_full = Counter(
            "squawk_admit_cap_full",
            "Admit calls refused IN_FLIGHT_CAP: the upstream's declared cap on calls in "
            "flight (rate_limit.max_in_flight) was full, and the caller waits for a slot. "
            "By profile and upstream.",
            ["profile", "upstream"],
            registry=self.registry,
        )
        self.shed_outcomes = Counter(
            "squawk_shed_outcomes",
            "Outcomes in ReportOutcome calls the daemon answered 'not decided' without "
            "recording them (the call reached it too close to its deadline): the outcomes "
            "its state never saw.",
            registry=self.registry,
        )
        self.overload_level = Gauge(
            "squawk_overload_level",
            "The daemon's own overload level: 0 none; 1 AnalyzeError and Classify are "
            "shed; 2 DecideRetryBatch too. Set each 250 ms by the share of calls that "
            "reached the daemon too close to their deadline.",
            registry=self.registry,
        )
        self.untracked = Counter(
            "squawk_untracked_calls",
            "Calls about an upstream the pod could not track: max_upstreams names were "
            "tracked and none was idle. Answered from a fresh state, which is not kept.",
            ["profile"],
            registry=self.registry,
        )
        self.loop_lag = Histogram(
            "squawk_event_loop_lag_seconds",
            "How much later than asked the event loop ran a periodic timer: "
            "how long every call waiting on the loop was held.",
            buckets=LOOP_LAG_BUCKETS,
            registry=self.registry,
        )
        if span_source is not None:
            self.registry.register(_DroppedSpans(span_source))

    def report_store_up(self, up: bool) -> None:
        """Only a Redis store reports, so only its pods export the gauge."""
        if not self._store_up_shown:
            self.registry.register(self.state_store_up)
            self.registry.register(self.state_writes_dropped)
            self.registry.register(self.state_restored)
            self._store_up_shown = True
        self.state_store_up.set(int(up))

    def serve(self, address: str, routes: Mapping[str, Route] | None = None) -> None:
        """Serve the metrics on `address` (HOST:PORT) from a thread of its
        own, and each of `routes` (a path, e.g. "/events", to what answers
        it) beside them."""
        host, _, port = address.rpartition(":")
        host = host or "127.0.0.1"
        app = _routed(make_wsgi_app(self.registry), dict(routes or {}))

        class Server(ThreadingMixIn, WSGIServer):
            daemon_threads = True
            address_family = socket.getaddrinfo(host, int(port))[0][0]

        httpd = make_server(host, int(port), app, Server, handler_class=_Quiet)
        threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True).start()


class _Quiet(WSGIRequestHandler):
    """No line on stderr for every scrape (prometheus_client's is the same)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _routed(metrics: Any, routes: dict[str, Route]) -> Any:
    """A WSGI app: each of `routes` by its path, the metrics for the rest."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        route = routes.get(environ.get("PATH_INFO", ""))
        if route is None:
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        status, kind, body = route(environ.get("QUERY_STRING", ""))
        start_response(status, [("Content-Type", kind), ("Content-Length", str(len(body)))])
        return [body]

    return app
