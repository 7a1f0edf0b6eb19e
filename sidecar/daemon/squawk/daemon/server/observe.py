"""What the daemon tells operators about each decision: span attributes,
Prometheus metrics and structured decision logs.

The three carry the same `squawk.*` fields, built once per decision and
only when someone is listening. No field holds an error message, a body or
a header; the names a caller chooses (capability, upstream, profile) pass
`shown_text` in `Observer.record`, the one gate between a caller's strings
and every sink here, which also bounds each field and so each log line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from squawk.policy import BreakerState, Decision, PaceSource, Policy
from squawk.policy.limits import MAX_NAME_CHARS
from squawk.policy.text import shown_text
from squawk.v1 import policy_pb2 as pb

from .spans import NO_SPAN, SpanRecord, current
from .upstreams import Key, PaceChange, Transition, pinned_keys

__all__ = [
    "LOOP_LAG_BUCKETS",
    "Metrics",
    "Observer",
    "Throttle",
    "admission_fields",
    "classification_fields",
    "decision_fields",
    "label_value",
]

log = logging.getLogger(__name__)

Field = str | int | float | bool
# Refusals of one cause, and breaker transitions to one state, are logged at
# most once per this many seconds.
_LOG_EVERY_S = 10.0
# Distinct field strings remembered with their shown form; the same few
# capability and upstream names recur on every decision.
_SHOWN_CACHE = 4096
# A batch's decision-log lines written between two yields to the event loop.
_LOG_SLICE = 256
# The line breaks of str.splitlines() (and U+2028/U+2029, JavaScript's)
# that JSON leaves raw: it escapes the C0 controls (\v, \f, \x1c-\x1e) but
# not these, so a caller's name holding one would start a line of its own.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})

# Upstream names are caller data: past this many tracked names with a
# label of their own, metric labels say "other", so a caller cannot grow the
# series without bound. The policy file's names always have their own, and
# a name the registry drops gives its label (and its series) up.
MAX_UPSTREAM_LABELS = 100
OTHER_UPSTREAMS = "other"
_TRANSITIONS = [(a.name, b.name) for a in BreakerState for b in BreakerState if a is not b]

_DECLARED = {None: "unset", True: "true", False: "false"}
# The status code each cause of a refused call answers with.
_CODES = {
    "malformed": "INVALID_ARGUMENT",
    "invalid_argument": "INVALID_ARGUMENT",
    "internal": "INTERNAL",
    "cancelled": "CANCELLED",
}
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


def classification_fields(
    request: pb.ClassifyRequest, reply: pb.ClassifyResponse
) -> dict[str, Field]:
    return {
        "squawk.profile": request.profile or "default",
        "squawk.http_status": reply.upstream_status,
        "squawk.category": pb.ErrorCategory.Name(reply.category).removeprefix("ERROR_CATEGORY_"),
        "squawk.retryable": reply.retryable,
    }


def decision_fields(
    request: pb.DecideRetryRequest, decision: Decision, state: str | None = None
) -> dict[str, Field]:
    c = decision.classification
    fields: dict[str, Field] = {
        "squawk.profile": request.profile or "default",
        "squawk.capability": request.capability,
        "squawk.upstream": request.upstream,
        "squawk.attempt": request.attempt,
        "squawk.http_status": request.http_status,
        "squawk.category": c.category.name,
        "squawk.retryable": c.retryable,
        "squawk.declared_retryable": _DECLARED[decision.declared_retryable],
        "squawk.action": decision.action.name,
        "squawk.reason": decision.reason.name,
        "squawk.delay_ms": round(decision.delay.total_seconds() * 1000),
    }
    if state is not None:
        fields["squawk.state"] = str(state)
    return fields


def admission_fields(
    request: pb.AdmitRequest,
    reply: pb.AdmitResponse,
    state: str | None = None,
    pace: tuple[PaceSource, float] = (PaceSource.NONE, 0.0),
) -> dict[str, Field]:
    """`pace`: the upstream's (source, calls/s), as the registry last looked at it."""
    fields: dict[str, Field] = {
        "squawk.profile": request.profile or "default",
        "squawk.capability": request.capability,
        "squawk.upstream": request.upstream,
        "squawk.action": "ADMIT" if reply.allowed else "REFUSE",
        "squawk.reason": pb.Reason.Name(reply.reason).removeprefix("REASON_"),
        "squawk.breaker_state": pb.BreakerState.Name(reply.breaker_state).removeprefix(
            "BREAKER_STATE_"
        ),
        "squawk.probe": reply.probe,
        "squawk.delay_ms": reply.retry_after.ToMilliseconds(),
        "squawk.pace.wait_ms": reply.wait.ToMilliseconds(),
        "squawk.pace.source": pace[0].name,
        "squawk.pace.rate": round(pace[1], 3),
        "squawk.admit.permits": reply.permits,
    }
    if state is not None:
        fields["squawk.state"] = str(state)
    return fields


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
            "internal, cancelled: the caller went away) and gRPC status code.",
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
            self._store_up_shown = True
        self.state_store_up.set(int(up))

    def serve(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        start_http_server(int(port), addr=host or "127.0.0.1", registry=self.registry)


class Throttle:
    """Says whether to log now: once per interval per key, counting the rest."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def ready(self, key: str) -> int | None:
        """The number of events held back since the last log, or None to hold this one."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            self._held[key] = self._held.get(key, 0) + 1
            return None
        self._last[key] = now
        return self._held.pop(key, 0)


class Observer:
    """Fans one decision out to the span, the metrics and the decision log."""

    def __init__(self, metrics: Metrics | None = None, log: IO[str] | None = None) -> None:
        self.metrics = metrics
        self.log = log
        # Whether anything besides a recording span wants the fields.
        self.active = metrics is not None or log is not None
        self._shown: dict[str, str] = {}
        self._throttle = Throttle(_LOG_EVERY_S)
        # The keys with a metric label of their own, and the policy file's keys.
        self._labels: dict[Key, str] = {}
        self._pinned: frozenset[Key] = frozenset()
        self._caller_labels = 0
        # Each key's squawk_pace_wait_seconds and squawk_admit_shed_total children.
        self._pace_series: dict[Key, tuple[Any, Any]] = {}

    def _safe(self, fields: Mapping[str, Field]) -> dict[str, Field]:
        out = dict(fields)
        shown = self._shown
        for name, value in out.items():
            if isinstance(value, str):
                safe = shown.get(value)
                if safe is None:
                    safe = shown_text(value, MAX_NAME_CHARS)
                    if len(shown) >= _SHOWN_CACHE:
                        shown.clear()
                    shown[value] = safe
                out[name] = safe
        return out

    def use_policy(self, policy: Policy) -> None:
        """The policy file's names are labelled whatever the callers' took."""
        self._pinned = pinned_keys(policy)
        self._caller_labels = sum(key not in self._pinned for key in self._labels)

    def _upstream_label(self, key: Key) -> str:
        label = self._labels.get(key)
        if label is not None:
            return label
        if key not in self._pinned:
            if self._caller_labels >= MAX_UPSTREAM_LABELS:
                return OTHER_UPSTREAMS
            self._caller_labels += 1
        label = self._labels[key] = label_value(key[1])
        return label

    def forget(self, profile: str, upstream: str) -> None:
        """The registry dropped a key: its label and its series go with it."""
        key = (profile, upstream)
        self._pace_series.pop(key, None)
        label = self._labels.pop(key, None)
        if label is None:
            return
        if key not in self._pinned:
            self._caller_labels -= 1
        # Two names may be shown alike (each with its secret redacted), and
        # a caller's name "other" shares the series of every unlabelled one.
        shared = label == OTHER_UPSTREAMS or any(
            k[0] == profile and v == label for k, v in self._labels.items()
        )
        if self.metrics is None or shared:
            return
        m, shown = self.metrics, label_value(profile)
        m.breaker_state.remove(shown, label)
        for series in (m.pace_rate, m.pace_wait, m.admit_shed):
            series.remove(shown, label)
        for before, after in _TRANSITIONS:
            m.breaker_transitions.remove(shown, label, before, after)
            m.fleet_breaker_transitions.remove(shown, label, before, after)

    def untracked(self, profile: str) -> None:
        """A call about an upstream the registry had no room for."""
        if self.metrics is not None:
            self.metrics.untracked.labels(label_value(profile)).inc()
        held = self._throttle.ready("untracked")
        if held is not None:
            also = f" ({held} more since the last report)" if held else ""
            log.warning(
                "an upstream of profile %r is not tracked: max_upstreams names are, and none "
                "is idle; its calls are answered as a new upstream's%s (list the names that "
                "matter under the profile's upstreams: to track them always)",
                label_value(profile),
                also,
            )

    def transition(self, t: Transition) -> None:
        """A breaker changed state: a span event, a log line and the metrics."""
        fields = self._safe({"squawk.profile": t.profile, "squawk.upstream": t.upstream})
        before, after = t.before.name, t.after.name
        which = "fleet circuit breaker" if t.fleet else "circuit breaker"
        span = current()
        if span.is_recording():
            span.add_event(
                "squawk.fleet_breaker.transition" if t.fleet else "squawk.breaker.transition",
                fields | {"squawk.breaker.from": before, "squawk.breaker.to": after},
            )
        # Upstream names are caller data: one report can open a breaker on
        # each of a hundred names. So the log says at most one transition to
        # each state per interval, counting the rest (the span events and
        # metrics see every one), and quotes the name, so a newline in it
        # cannot start a line of its own.
        held = self._throttle.ready(f"{which}/{after}")
        if held is not None:
            also = f" ({held} more to {after} since the last report)" if held else ""
            log.log(
                logging.WARNING if after == "OPEN" else logging.INFO,
                "%s %s -> %s for upstream %r (profile %r)%s",
                which,
                before,
                after,
                fields["squawk.upstream"],
                fields["squawk.profile"],
                also,
            )
        if self.metrics is not None:
            key = (t.profile, t.upstream)
            # A name the pod does not track would keep its label for good:
            # only forget(), at the registry's drop, gives one back.
            label = self._upstream_label(key) if t.tracked else self._labels.get(key)
            label = OTHER_UPSTREAMS if label is None else label
            profile = label_value(t.profile)
            if t.fleet:
                self.metrics.fleet_breaker_transitions.labels(profile, label, before, after).inc()
                return
            self.metrics.breaker_transitions.labels(profile, label, before, after).inc()
            if label != OTHER_UPSTREAMS:
                self.metrics.breaker_state.labels(profile, label).set(int(t.after))

    def pace_changed(self, change: PaceChange) -> None:
        """A tracked upstream's pace changed: the gauge, and a log line
        throttled as breaker transitions are (one per source and interval)."""
        before, after = change.before.name.lower(), change.after.name.lower()
        if self.metrics is not None:
            label = self._upstream_label((change.profile, change.upstream))
            if label != OTHER_UPSTREAMS:
                profile = label_value(change.profile)
                self.metrics.pace_rate.labels(profile, label).set(change.rate_after)
        held = self._throttle.ready(f"pace/{after}")
        if held is None:
            return
        fields = self._safe({"squawk.profile": change.profile, "squawk.upstream": change.upstream})
        also = f" ({held} more to {after} since the last report)" if held else ""
        log.info(
            "pace %s %.3g/s -> %s %.3g/s for upstream %r (profile %r)%s",
            before,
            change.rate_before,
            after,
            change.rate_after,
            fields["squawk.upstream"],
            fields["squawk.profile"],
            also,
        )

    def admitted(self, profile: str, upstream: str, reply: pb.AdmitResponse) -> None:
        """An Admit on a tracked upstream: its paced wait, or its shedding.
        Each key's two series are looked up once, not per call."""
        m = self.metrics
        if m is None:
            return
        key = (profile, upstream)
        series = self._pace_series.get(key)
        if series is None:
            labels = (label_value(profile), self._upstream_label(key))
            series = (m.pace_wait.labels(*labels), m.admit_shed.labels(*labels))
            if len(self._pace_series) >= _SHOWN_CACHE:
                self._pace_series.clear()
            self._pace_series[key] = series
        if reply.allowed:
            series[0].observe(reply.wait.ToNanoseconds() / 1e9)
        elif reply.reason == pb.REASON_UPSTREAM_SATURATED:
            series[1].inc()

    def store_up(self, up: bool) -> None:
        """The fleet state store went away (False) or came back (True)."""
        if self.metrics is not None:
            self.metrics.report_store_up(up)

    def store_dropped(self, count: int) -> None:
        """The fleet state store dropped `count` writes (the store logs them)."""
        if self.metrics is not None:
            self.metrics.state_writes_dropped.inc(count)

    def refused(self, rpc: str, cause: str, exc_info: bool = False) -> None:
        """Count a call answered with an error; log the unexpected ones, throttled.

        A stream of malformed or failing calls costs one log line per cause
        and interval, never one (or a traceback) per call.
        """
        if self.metrics is not None:
            self.metrics.refused.labels(rpc, cause, _CODES[cause]).inc()
        if cause in ("invalid_argument", "cancelled"):
            return
        held = self._throttle.ready(f"{rpc}/{cause}")
        if held is None:
            return
        also = f" ({held} more since the last report)" if held else ""
        if cause == "malformed":
            log.warning("%s: a request body that is not a valid message%s", rpc, also)
        else:
            log.error("internal error in %s%s", rpc, also, exc_info=exc_info)

    def record(
        self, rpc: str, fields: Mapping[str, Field], started: float, span: SpanRecord
    ) -> None:
        fields = self._safe(fields)
        if span.is_recording():
            span.set_attributes(fields)
        if self.metrics is not None:
            m = self.metrics
            elapsed = time.perf_counter() - started
            m.latency.labels(rpc).observe(elapsed)
            if rpc == "AnalyzeError":
                self._analysis_metrics(m, fields, elapsed)
            else:
                action = str(fields.get("squawk.action", ""))
                m.decisions.labels(rpc, action, str(fields.get("squawk.reason", ""))).inc()
                state = fields.get("squawk.state")
                if state is not None:
                    m.state_answers.labels(rpc, str(state)).inc()
                if action == "CORRECT":
                    m.corrections.labels("requested").inc()
        if self.log is not None:
            self._log(rpc, fields, span)

    async def record_batch(
        self,
        rpc: str,
        decided: Sequence[tuple[pb.DecideRetryRequest, Decision, str | None]],
        started: float,
    ) -> None:
        """A batch's decisions: one log line each, and the metrics counted once per batch.

        Per item, the counters' label lookups and the fields cost more than
        the decision itself (a 100-item batch ran at half the decisions/s
        with metrics on); counted per (action, reason) they cost a few
        lookups a batch. The duration is the call's, observed once. The log
        lines give the event loop back every _LOG_SLICE lines, as the batch
        does between its decisions: 10,000 lines in one go held it for
        120-210 ms.
        """
        m = self.metrics
        if m is not None:
            m.latency.labels(rpc).observe(time.perf_counter() - started)
            counts: dict[tuple[str, str], int] = {}
            states: dict[str, int] = {}
            for _, d, state in decided:
                key = (d.action.name, d.reason.name)
                counts[key] = counts.get(key, 0) + 1
                if state is not None:
                    states[state] = states.get(state, 0) + 1
            for (action, reason), n in counts.items():
                m.decisions.labels(rpc, action, reason).inc(n)
                if action == "CORRECT":
                    m.corrections.labels("requested").inc(n)
            for state, n in states.items():
                m.state_answers.labels(rpc, str(state)).inc(n)
        if self.log is not None:
            for i, (request, decision, state) in enumerate(decided):
                if i and not i % _LOG_SLICE:
                    await asyncio.sleep(0)
                self._log(rpc, self._safe(decision_fields(request, decision, state)), NO_SPAN)

    @staticmethod
    def _analysis_metrics(m: Metrics, fields: Mapping[str, Field], elapsed: float) -> None:
        m.analyzer_latency.labels(str(fields.get("squawk.analyzer.source", ""))).observe(elapsed)
        if fields.get("squawk.analyzer.fallback"):
            m.analyzer_fallbacks.labels(str(fields["squawk.analyzer.fallback"])).inc()
        if fields.get("squawk.changes.suggested"):
            outcome = "suggested"
        elif fields.get("squawk.analyzer.transient"):
            outcome = "skipped_transient"
        elif fields.get("squawk.changes.rejected"):
            outcome = "refused"
        else:
            outcome = "no_fix"
        m.corrections.labels(outcome).inc()

    def _log(self, rpc: str, fields: Mapping[str, Field], span: SpanRecord) -> None:
        if self.log is not None:
            ctx = span.get_span_context()
            line = {"ts": time.time(), "rpc": rpc, **fields}
            if ctx.is_valid:
                line["trace_id"] = f"{ctx.trace_id:032x}"
                line["span_id"] = f"{ctx.span_id:016x}"
            # UTF-8, not \u escapes: a 4-byte character escaped is 12 bytes,
            # and two names of 256 such would pass 6 KiB.
            text = json.dumps(line, separators=(",", ":"), ensure_ascii=False)
            if not text.isascii():
                text = text.translate(_LINE_BREAKS)
            self.log.write(text + "\n")
