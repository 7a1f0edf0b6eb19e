"""What the daemon tells operators about each decision: span attributes,
Prometheus metrics (metrics.py) and structured decision logs
(decision_log.py).

The three carry the same `squawk.*` fields (fields.py), built once per
decision and only when someone is listening. `Observer.record` passes the
names a caller chooses (capability, upstream, profile) through
`shown_text`: the one gate between a caller's strings and every sink here,
which also bounds each field and so each log line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any, NamedTuple

from prometheus_client import Counter, Histogram

from squawk.policy import BreakerState, Criticality, Decision, PaceSource, Policy
from squawk.policy.limits import MAX_NAME_CHARS
from squawk.policy.text import shown_text
from squawk.policy.timing import shown_seconds
from squawk.policy.why import pace_cause
from squawk.v1 import policy_pb2 as pb

from ...throttle import LOG_EVERY_S, Throttle
from ..tracking.registry import CoolDown, Key, PaceChange, Transition, pinned_keys
from .decision_log import LOG_SLICE, write_line
from .decisions_kept import Kept, KeptDecisions
from .events import EventRing
from .fields import Field, decision_fields
from .metrics import MAX_UPSTREAM_LABELS, OTHER_UPSTREAMS, Metrics, label_value
from .spans import NO_SPAN, SpanRecord, current

__all__ = ["Observer"]

log = logging.getLogger(__name__)


class _Series4(NamedTuple):
    """One tracked upstream's Admit series (children of its labels)."""

    wait: Any
    shed: Any
    cap_full: Any
    share: Any
    levels: dict[tuple[Criticality, str], Any]


class _Series(NamedTuple):
    """One decision's metric series (Observer._series)."""

    latency: Histogram
    counters: tuple[Counter, ...]


# Distinct field strings remembered with their shown form; the same few
# capability and upstream names recur on every decision.
_SHOWN_CACHE = 4096
# Decision metric series kept found (Observer._series); the daemon's own
# vocabulary of RPCs, actions, rules and state sources makes a few hundred.
_SERIES_CACHE = 1024
_TRANSITIONS = [(a.name, b.name) for a in BreakerState for b in BreakerState if a is not b]

# A refused Admit after this long without one begins a burst: an event.
SHED_QUIET_S = 10.0
# A cause shown in an event: an explanation is a sentence or two.
MAX_CAUSE_CHARS = 512

# What a pace change's new source says of why it is in force.

# The status code each cause of a refused call answers with.
_CODES = {
    "malformed": "INVALID_ARGUMENT",
    "invalid_argument": "INVALID_ARGUMENT",
    "internal": "INTERNAL",
    "cancelled": "CANCELLED",
    "behind": "RESOURCE_EXHAUSTED",
    "overloaded": "RESOURCE_EXHAUSTED",
}


class Observer:
    """Fans one decision out to the span, the metrics and the decision log."""

    def __init__(self, metrics: Metrics | None = None, log: IO[str] | None = None) -> None:
        self.metrics = metrics
        self.log = log
        # Whether anything besides a recording span wants the fields.
        self.active = metrics is not None or log is not None
        self._shown: dict[str, str] = {}
        self._throttle = Throttle(LOG_EVERY_S)
        # What changed, and why: the event history (telemetry/events.py);
        # and the refusals kept for `squawk explain` (decisions_kept.py).
        self.events = EventRing()
        self.kept = KeptDecisions()
        # The keys with a metric label of their own, and the policy file's keys.
        self._labels: dict[Key, str] = {}
        self._pinned: frozenset[Key] = frozenset()
        self._caller_labels = 0
        # Each decision's metric series, by (rpc, action, reason, state): see _series.
        self._counted: dict[tuple[str, Field, Field, Field | None], _Series] = {}
        # When each key last refused an Admit for want of room (see refused).
        self._shed_at: dict[Key, float] = {}
        # Each key's squawk_pace_wait_seconds and squawk_admit_shed_total children.
        self._pace_series: dict[Key, _Series4] = {}

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
        # Every series labelled with it: one left behind would outlive the
        # name, and names that come and go would grow the series unbounded.
        for series in (
            m.pace_rate,
            m.pace_wait,
            m.admit_shed,
            m.admit_cap_full,
            m.admit_share_refused,
            m.quota_near_limit,
        ):
            series.remove(shown, label)
        for level in Criticality:
            for result in ("admitted", "shed"):
                m.admit_levels.remove(shown, label, level.name, result)
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
        self.events.add(
            time.time(),
            "fleet_breaker" if t.fleet else "breaker",
            str(fields["squawk.profile"]),
            str(fields["squawk.upstream"]),
            before,
            after,
            t.cause,
            None if t.left is None else time.time() + t.left,
        )
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
        shown = self._safe({"squawk.profile": change.profile, "squawk.upstream": change.upstream})
        self.events.add(
            time.time(),
            "pace",
            str(shown["squawk.profile"]),
            str(shown["squawk.upstream"]),
            f"{before} {change.rate_before:.3g}/s",
            f"{after} {change.rate_after:.3g}/s",
            change.cause or pace_cause(change.after),
        )
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

    def cooled(self, c: CoolDown) -> None:
        """A tracked upstream's shared cool-down began: an event with the
        outcome that started it and when it ends."""
        shown = self._safe({"squawk.profile": c.profile, "squawk.upstream": c.upstream})
        now = time.time()
        self.events.add(
            now,
            "cool_down",
            str(shown["squawk.profile"]),
            str(shown["squawk.upstream"]),
            "",
            f"cooling for {shown_seconds(c.left)}",
            c.cause,
            now + c.left,
        )

    def keep(
        self,
        rpc: str,
        profile: str,
        upstream: str,
        answer: pb.AdmitResponse | pb.DecideRetryResponse,
        breaker: BreakerState,
        pace: tuple[PaceSource, float],
    ) -> str:
        """Keep a refusal (an Admit refused, a DecideRetry's FAIL) for
        ExplainDecision, with the upstream's state and the latest event's
        number now; its id."""
        shown = self._safe({"squawk.upstream": upstream})
        return self.kept.keep(
            Kept(
                time.time(),
                rpc,
                profile,
                str(shown["squawk.upstream"]),
                int(answer.reason),
                shown_text(answer.explanation, MAX_CAUSE_CHARS * 2),
                int(breaker),
                int(pace[0]),
                pace[1],
                self.events.last,
            )
        )

    def shed(self, profile: str, upstream: str, reply: pb.AdmitResponse) -> None:
        """A tracked upstream's Admit refused a call for want of room (its
        pace, queue or in-flight cap): an event when it begins a burst, the
        first after SHED_QUIET_S without one, with its explanation."""
        key = (profile, upstream)
        now = time.monotonic()
        last = self._shed_at.get(key)
        if len(self._shed_at) >= _SHOWN_CACHE and last is None:
            self._shed_at.clear()
        self._shed_at[key] = now
        if last is not None and now - last < SHED_QUIET_S:
            return
        shown = self._safe({"squawk.profile": profile, "squawk.upstream": upstream})
        full = reply.reason == pb.REASON_IN_FLIGHT_CAP
        self.events.add(
            time.time(),
            "shed",
            str(shown["squawk.profile"]),
            str(shown["squawk.upstream"]),
            "",
            "refusing: in-flight cap full" if full else "shedding: upstream saturated",
            shown_text(reply.explanation, MAX_CAUSE_CHARS),
        )

    def admitted(
        self,
        profile: str,
        upstream: str,
        reply: pb.AdmitResponse,
        level: Criticality = Criticality.CRITICAL,
        by_share: bool = False,
    ) -> None:
        """An Admit on a tracked upstream of criticality `level`: its paced
        wait, or its shedding (`by_share`: its fairness key was over its
        share). Each key's series are looked up once, not per call."""
        m = self.metrics
        if m is None:
            return
        key = (profile, upstream)
        series = self._pace_series.get(key)
        if series is None:
            labels = (label_value(profile), self._upstream_label(key))
            series = _Series4(
                m.pace_wait.labels(*labels),
                m.admit_shed.labels(*labels),
                m.admit_cap_full.labels(*labels),
                m.admit_share_refused.labels(*labels),
                {
                    (lv, result): m.admit_levels.labels(*labels, lv.name, result)
                    for lv in Criticality
                    for result in ("admitted", "shed")
                },
            )
            if len(self._pace_series) >= _SHOWN_CACHE:
                self._pace_series.clear()
            self._pace_series[key] = series
        if reply.allowed:
            series.wait.observe(reply.wait.ToNanoseconds() / 1e9)
            series.levels[level, "admitted"].inc()
        elif reply.reason == pb.REASON_UPSTREAM_SATURATED:
            series.shed.inc()
            series.levels[level, "shed"].inc()
            if by_share:
                series.share.inc()
        elif reply.reason == pb.REASON_IN_FLIGHT_CAP:
            series.cap_full.inc()

    def near_limit(self, profile: str, upstream: str) -> None:
        """A tracked upstream's answer said its quota is nearly used."""
        if self.metrics is not None:
            key = (profile, upstream)
            label = self._upstream_label(key)
            self.metrics.quota_near_limit.labels(label_value(profile), label).inc()

    def store_up(self, up: bool) -> None:
        """The fleet state store went away (False) or came back (True)."""
        if self.metrics is not None:
            self.metrics.report_store_up(up)

    def store_dropped(self, count: int) -> None:
        """The fleet state store dropped `count` writes (the store logs them)."""
        if self.metrics is not None:
            self.metrics.state_writes_dropped.inc(count)

    def store_restored(self, profile: str, upstream: str, cause: str) -> None:
        """The fleet state store lost caution this pod held for (profile,
        upstream), which it wrote back (the store logs it): counted, and an
        event with what was lost."""
        if self.metrics is not None:
            self.metrics.state_restored.inc()
        shown = self._safe({"squawk.profile": profile, "squawk.upstream": upstream})
        self.events.add(
            time.time(),
            "fleet_caution",
            str(shown["squawk.profile"]),
            str(shown["squawk.upstream"]),
            "lost by the store",
            "written back",
            cause,
        )

    def shed_outcomes(self, count: int) -> None:
        """Count the outcomes of a ReportOutcome answered without being recorded."""
        if self.metrics is not None and count:
            self.metrics.shed_outcomes.inc(count)

    def overload_level(self, level: int, before: int) -> None:
        """The daemon's own overload level changed: the gauge, and a line."""
        if self.metrics is not None:
            self.metrics.overload_level.set(level)
        held = self._throttle.ready("overload")
        if held is None:
            return
        shed = (
            "nothing",
            "AnalyzeError and Classify",
            "AnalyzeError, Classify and DecideRetryBatch",
        )
        why = " (calls reach the daemon too close to their deadline)" if level > before else ""
        also = f" ({held} more changes since the last report)" if held else ""
        (log.warning if level > before else log.info)(
            "overload level %d -> %d%s: shedding %s%s", before, level, why, shed[level], also
        )

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
        elif cause == "overloaded":
            log.warning(
                "%s: shed by the daemon's overload level, answered RESOURCE_EXHAUSTED%s", rpc, also
            )
        elif cause == "behind":
            log.warning(
                "%s: a call reached the daemon too close to its deadline to be decided in time,"
                " answered RESOURCE_EXHAUSTED: the daemon is behind its callers%s",
                rpc,
                also,
            )
        else:
            log.error("internal error in %s%s", rpc, also, exc_info=exc_info)

    def answered_late(self, rpc: str) -> None:
        """An answer grpc could not send: the call had ended while it was
        made (its deadline passed, its caller cancelled, or its caller
        refused an answer over its receive limit). Counted as a cancelled
        call; logged once per RPC and interval, without grpc's traceback
        (grpc_log.py)."""
        if self.metrics is not None:
            self.metrics.refused.labels(rpc, "cancelled", _CODES["cancelled"]).inc()
        held = self._throttle.ready(f"{rpc}/late")
        if held is None:
            return
        also = f" ({held} more since the last report)" if held else ""
        log.warning(
            "%s: an answer was not sent: its call had ended (deadline passed, cancelled, "
            "or the answer was over the caller's receive limit)%s",
            rpc,
            also,
        )

    def record(
        self, rpc: str, fields: Mapping[str, Field], started: float, span: SpanRecord
    ) -> None:
        recording = span.is_recording()
        if recording or self.log is not None or rpc == "AnalyzeError":
            fields = self._safe(fields)
        if recording:
            span.set_attributes(fields)
        if self.metrics is not None:
            m = self.metrics
            elapsed = time.perf_counter() - started
            if rpc == "AnalyzeError":
                m.latency.labels(rpc).observe(elapsed)
                self._analysis_metrics(m, fields, elapsed)
            else:
                series = self._series(m, rpc, fields)
                series.latency.observe(elapsed)
                for counter in series.counters:
                    counter.inc()
        if self.log is not None:
            self._log(rpc, fields, span)

    def _series(self, m: Metrics, rpc: str, fields: Mapping[str, Field]) -> _Series:
        """A decision's histogram and counters, found once per (rpc, action,
        reason, state).

        Looked up by `labels()` on every call they cost more than the rest of
        `record` (a lock and a label check each; about half of an Admit's
        telemetry with metrics on, bench/README.md "The dispatch row"). The
        key's values are the daemon's own vocabulary (the RPC, the action,
        the rule, where the state came from), never a caller's string, so
        the cache holds a few entries; the label values still pass
        `label_value` where the series is made.
        """
        action, reason = fields.get("squawk.action", ""), fields.get("squawk.reason", "")
        state = fields.get("squawk.state")
        key = (rpc, action, reason, state)
        found = self._counted.get(key)
        if found is not None:
            return found
        shown = [label_value(str(v)) for v in (action, reason)]
        counters = [m.decisions.labels(rpc, *shown)]
        if state is not None:
            counters.append(m.state_answers.labels(rpc, label_value(str(state))))
        if shown[0] == "CORRECT":
            counters.append(m.corrections.labels("requested"))
        if len(self._counted) >= _SERIES_CACHE:
            self._counted.clear()
        found = self._counted[key] = _Series(m.latency.labels(rpc), tuple(counters))
        return found

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
        lines give the event loop back every LOG_SLICE lines, as the batch
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
                if i and not i % LOG_SLICE:
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
            write_line(self.log, rpc, fields, span)
