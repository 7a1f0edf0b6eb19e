"""The PolicyService servicer: convert the request, call the core, convert back.

Each method passes `boundary` (boundary.py), which turns refusals and
failures into statuses; the upstream state lives behind tracking/pod_store.py.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import grpc

from squawk.policy import (
    Action,
    BreakerState,
    Decision,
    Outcome,
    Policy,
    PolicyInputError,
    Profile,
    classify,
    decide,
)
from squawk.policy.fleet import FleetSnapshot
from squawk.policy.limits import (
    MAX_BATCH,
    MAX_NAME_CHARS,
    MAX_OUTCOMES,
    MAX_UPSTREAMS_PAGE,
    check_chars,
)
from squawk.policy.shed import ShedCause
from squawk.policy.text import shown_text
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc
from squawk.wire import (
    admission_id,
    admission_message,
    admit_args,
    attempt_state,
    classification_message,
    decision_message,
    failed_attempt,
    failure,
    outcome,
    rate_limited,
    untracked,
)

from ...analysis import Analyzer, AnalyzerSettings, wire
from ..telemetry import spans
from ..telemetry.decisions_kept import CAPACITY as KEPT_DECISIONS
from ..telemetry.decisions_kept import MAX_ID_CHARS
from ..telemetry.event_page import answer, fill_event
from ..telemetry.fields import admission_fields, classification_fields, decision_fields
from ..telemetry.observer import Observer
from ..telemetry.spans import ServerSpans
from ..tracking.pod_store import PodStore, Source
from ..tracking.registry import NO_PACE, Upstreams, UpstreamView
from .boundary import INTERNAL, MAX_ERROR_CHARS, boundary, register
from .decisions import StatelessDecisions
from .overload import Overload
from .turns import Turns

__all__ = ["MAX_HINTS", "PolicyServicer", "register"]

log = logging.getLogger(__name__)

# Outcomes of one ReportOutcome call whose rate-limit headers are read: the
# first this many that carry any (the runners' reports hold at most 100
# outcomes, so theirs are read whole). A parse of 64 headers costs some
# 40 us; 1,000 of them held the event loop for 75 ms a call. The headers
# of the outcomes after them are not read, but every outcome still counts.
# The alternative, the last outcome per (profile, upstream), reads the
# freshest quota but leaves the others' throttles without their quota, so
# the shared cool-down would answer them instead; and a thousand names
# would still cost a thousand parses.
MAX_HINTS = 100
# Outcomes recorded between two pauses of a report (Turn.pause): recording
# one costs a few microseconds, so a pause per outcome would cost more.
_RECORD_SLICE = 32


class PolicyServicer(pb_grpc.PolicyServiceServicer):
    def __init__(
        self,
        policy: Policy,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        observer: Observer | None = None,
        tracing: ServerSpans | None = None,
        analyzer: Analyzer | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        store: PodStore | None = None,
    ) -> None:
        self._policy = policy
        # The default analyzer is the offline one: no network, nothing to close.
        self._analyzer = analyzer if analyzer is not None else Analyzer(AnalyzerSettings(), policy)
        self._clock = clock
        self._rng = rng or random.Random()
        self._observer = observer or Observer()
        # The upstream state shared by the pod (or the fleet); time there is monotonic.
        self._observer.use_policy(policy)
        self.store = store or PodStore(
            Upstreams(
                policy,
                monotonic,
                self._observer.transition,
                self._observer.forget,
                self._observer.untracked,
                on_pace=self._observer.pace_changed,
                on_near_limit=self._observer.near_limit,
                on_cool_down=self._observer.cooled,
            )
        )
        self._stateless = StatelessDecisions(clock, self._rng, policy.max_body_bytes)
        # Each call's server span (boundary.py); None without a tracer
        # provider, and then no call looks for a span at all.
        self._spans = tracing
        # The calls whose work grows with their request take turns at the
        # event loop, a slice at a time (turns.py): health checks and small
        # calls are answered between two slices, and a call whose caller
        # has gone stops at its next one.
        self._turns = Turns()
        # The daemon's own overload level (overload.py), moved by each call.
        self._overload = Overload()

    @property
    def observes_log(self) -> bool:
        """Whether decisions go to a decision log."""
        return self._observer.log is not None

    def use_policy(self, policy: Policy) -> None:
        """Answer from `policy` from the next call on (a call in flight keeps
        the profile it read); reused answers belong to the old one."""
        self._policy = policy
        self._stateless = StatelessDecisions(self._clock, self._rng, policy.max_body_bytes)
        self._observer.use_policy(policy)
        self.store.upstreams.use_policy(policy)

    def _note(self, rpc: str, fields: Callable[[], dict[str, Any]], started: float) -> None:
        # Fields are built only when a span records or metrics/logs are on.
        if self._spans is None and not self._observer.active:
            return
        span = spans.current()
        if self._observer.active or span.is_recording():
            self._observer.record(rpc, fields(), started, span)

    def _attempt(
        self, request: pb.DecideRetryRequest, profile: Profile, policy: Policy
    ) -> tuple[Decision, Outcome, timedelta | None]:
        """decide()'s answer for a request with an upstream, the failure it
        reports (it counts for the whole pod; callers need not report it
        again) and the step's deadline."""
        state = attempt_state(request)
        admitted = admission_id(request.admission_id)
        decision = decide(state, profile, self._clock, self._rng, policy.max_body_bytes)
        return decision, failed_attempt(state, decision, self._clock, admitted), state.deadline

    async def _decide(
        self,
        request: pb.DecideRetryRequest,
        answering: tuple[Policy, StatelessDecisions] | None = None,
    ) -> tuple[Decision, pb.DecideRetryResponse, Source | None]:
        """The decision, its message (which may be shared: read-only) and
        where the upstream state came from. `answering`: the policy to
        answer from (a batch keeps the one it started with)."""
        policy, stateless = answering or (self._policy, self._stateless)
        profile = policy.profile(request.profile)
        if not request.upstream:
            return (*stateless.decide(request, profile), None)
        decision, failed, deadline = self._attempt(request, profile, policy)
        after, source = await self.store.after_failure(
            profile, request.upstream, failed, decision, deadline
        )
        reply = decision_message(after)
        if reply.action == pb.ACTION_FAIL:
            upstreams = self.store.upstreams
            reply.decision_id = self._observer.keep(
                "DecideRetry",
                profile.name,
                request.upstream,
                reply,
                upstreams.breaker_of(profile.name, request.upstream),
                upstreams.pace_of(profile.name, request.upstream),
            )
        return after, reply, source

    @boundary
    async def Classify(
        self,
        request: pb.ClassifyRequest,
        context: grpc.aio.ServicerContext[pb.ClassifyRequest, pb.ClassifyResponse],
    ) -> pb.ClassifyResponse:
        started = time.perf_counter()
        profile = self._policy.profile(request.profile)
        reply = classification_message(classify(failure(request), profile, self._clock))
        self._note("Classify", lambda: classification_fields(request, reply), started)
        return reply

    @boundary
    async def DecideRetry(
        self,
        request: pb.DecideRetryRequest,
        context: grpc.aio.ServicerContext[pb.DecideRetryRequest, pb.DecideRetryResponse],
    ) -> pb.DecideRetryResponse:
        started = time.perf_counter()
        if request.upstream:
            decision, reply, source = await self._decide(request)
        else:
            # The hot path without upstream state: no coroutine to await.
            decision, reply = self._stateless.decide(request, self._policy.profile(request.profile))
            source = None
        self._note("DecideRetry", lambda: decision_fields(request, decision, source), started)
        return reply

    @boundary
    async def DecideRetryBatch(
        self,
        request: pb.DecideRetryBatchRequest,
        context: grpc.aio.ServicerContext[pb.DecideRetryBatchRequest, pb.DecideRetryBatchResponse],
    ) -> pb.DecideRetryBatchResponse:
        if len(request.requests) > MAX_BATCH:
            raise PolicyInputError(
                "requests", f"{len(request.requests)} requests is over the limit of {MAX_BATCH}"
            )
        started = time.perf_counter()
        # What the metrics and the decision log need, kept only when they are on.
        decided: list[tuple[pb.DecideRetryRequest, Decision, Source | None]] | None = (
            [] if self._observer.active else None
        )
        response = pb.DecideRetryBatchResponse()
        results = response.results
        actions = {action: 0 for action in Action}
        # One batch, one policy: a reload between two slices applies to the next batch.
        answering = (self._policy, self._stateless)
        try:
            async with self._turns.turn() as turn:
                for i, item in enumerate(request.requests):
                    await turn.pause()
                    try:
                        decision, reply, source = await self._decide(item, answering)
                    except PolicyInputError as exc:
                        results.add(error=shown_text(f"requests[{i}].{exc}", MAX_ERROR_CHARS))
                        continue
                    except Exception:
                        # One bad item answers with its own error; the batch goes on.
                        self._observer.refused("DecideRetryBatch", "internal", exc_info=True)
                        results.add(error=f"requests[{i}]: {INTERNAL}")
                        continue
                    actions[decision.action] += 1
                    if decided is not None:
                        decided.append((item, decision, source))
                    results.add().decision.CopyFrom(reply)
        finally:
            # A batch its caller gave up on (cancelled, past its deadline) has
            # still decided, and changed the upstreams' state, up to there:
            # the metrics and the log count those decisions as the fleet
            # store's outage line does.
            if decided is not None:
                await self._observer.record_batch("DecideRetryBatch", decided, started)
        # One span for the batch, not one per item: a 10,000-item batch would
        # otherwise flood the export queue. Logs stay per item.
        span = spans.current()
        if span.is_recording():
            span.set_attributes(
                {"squawk.batch.size": len(request.requests)}
                | {f"squawk.batch.{a.name.lower()}": n for a, n in actions.items()}
            )
        return response

    @boundary
    async def AnalyzeError(
        self,
        request: pb.AnalyzeErrorRequest,
        context: grpc.aio.ServicerContext[pb.AnalyzeErrorRequest, pb.AnalyzeErrorResponse],
    ) -> pb.AnalyzeErrorResponse:
        started = time.perf_counter()
        small = wire.analysis_small(request)
        analysis = self._analyzer.analyze_now(small) if small is not None else None
        if analysis is None:
            # Reading a large request is CPU work: on the analysis worker, off the loop.
            analysis = await self._analyzer.analyze(
                await self._analyzer.worker.run(wire.analysis_request, request)
            )
        self._note("AnalyzeError", lambda: wire.analysis_fields(analysis), started)
        return wire.analysis_response(analysis)

    @boundary
    async def CheckDispatch(
        self,
        request: pb.CheckDispatchRequest,
        context: grpc.aio.ServicerContext[pb.CheckDispatchRequest, pb.CheckDispatchResponse],
    ) -> pb.CheckDispatchResponse:
        reply = wire.dispatch_small(request)
        if reply is None:  # too large to check on the event loop
            reply = await self._analyzer.worker.run(wire.dispatch, request)
        return reply

    @boundary
    async def Admit(
        self,
        request: pb.AdmitRequest,
        context: grpc.aio.ServicerContext[pb.AdmitRequest, pb.AdmitResponse],
    ) -> pb.AdmitResponse:
        started = time.perf_counter()
        check_chars("upstream", request.upstream, MAX_NAME_CHARS)
        check_chars("capability", request.capability, MAX_NAME_CHARS)
        args = admit_args(request)
        profile = self._policy.profile(request.profile)
        source = None
        if request.upstream:
            admission, source = await self.store.admit(profile, request.upstream, args)
            upstreams = self.store.upstreams
            pace = upstreams.pace_of(profile.name, request.upstream)
            reply = admission_message(admission)
            if not reply.allowed:
                reply.decision_id = self._observer.keep(
                    "Admit",
                    profile.name,
                    request.upstream,
                    reply,
                    BreakerState(reply.breaker_state or BreakerState.CLOSED),
                    pace,
                )
            room = reply.reason in (pb.REASON_UPSTREAM_SATURATED, pb.REASON_IN_FLIGHT_CAP)
            if room and not reply.allowed and upstreams.tracks(profile.name, request.upstream):
                self._observer.shed(profile.name, request.upstream, reply)
            if self._observer.metrics is not None and upstreams.tracks(
                profile.name, request.upstream
            ):
                by_share = admission.shed is not None and admission.shed.cause is ShedCause.SHARE
                level = args.criticality
                if level is None:
                    level = profile.for_upstream(request.upstream).rate_limit.criticality
                self._observer.admitted(profile.name, request.upstream, reply, level, by_share)
        else:
            reply = admission_message(untracked(args.permits))
            pace = NO_PACE
        self._note("Admit", lambda: admission_fields(request, reply, source, pace), started)
        return reply

    @boundary
    async def ReportOutcome(
        self,
        request: pb.ReportOutcomeRequest,
        context: grpc.aio.ServicerContext[pb.ReportOutcomeRequest, pb.ReportOutcomeResponse],
    ) -> pb.ReportOutcomeResponse:
        count = len(request.outcomes)
        if not 1 <= count <= MAX_OUTCOMES:
            raise PolicyInputError("outcomes", f"{count} outcomes is outside 1..{MAX_OUTCOMES}")
        # Every outcome is checked before any is recorded: a refused report
        # changes nothing. Both loops take turns, as DecideRetryBatch does: a
        # report whose caller has gone stops at its next pause (recorded up
        # to there, once recording began).
        tracked = []
        policy, clock = self._policy, self._clock
        hints = MAX_HINTS
        async with self._turns.turn() as turn:
            for i, item in enumerate(request.outcomes):
                await turn.pause()
                read = hints > 0 and rate_limited(item.headers)
                hints -= read
                try:
                    profile, result = policy.profile(item.profile), outcome(item, clock, read)
                except PolicyInputError as exc:
                    raise PolicyInputError(f"outcomes[{i}].{exc.field}", exc.message) from None
                if item.upstream:
                    tracked.append((profile, item.upstream, result))
            for start in range(0, len(tracked), _RECORD_SLICE):
                await turn.pause()
                self.store.record(tracked[start : start + _RECORD_SLICE])
        return pb.ReportOutcomeResponse(recorded=len(tracked))

    @boundary
    async def GetUpstreams(
        self,
        request: pb.GetUpstreamsRequest,
        context: grpc.aio.ServicerContext[pb.GetUpstreamsRequest, pb.GetUpstreamsResponse],
    ) -> pb.GetUpstreamsResponse:
        """One page of the pod's upstreams. The work is bounded per call (a
        page of at most MAX_UPSTREAMS_PAGE rows, found by a binary search on
        the page token) and per slice of the event loop (it takes turns, turns.py):
        one call on a full registry held the loop for 116 ms, and eight
        callers in a loop kept health checks waiting over a second."""
        if request.profile:
            self._policy.profile(request.profile)  # refuses an unknown name
        check_chars("upstream", request.upstream, MAX_NAME_CHARS)
        if request.page_size < 0:
            raise PolicyInputError("page_size", f"must not be negative, got {request.page_size}")
        size = min(request.page_size or MAX_UPSTREAMS_PAGE, MAX_UPSTREAMS_PAGE)
        upstreams = self.store.upstreams
        keys, more = upstreams.page(
            _after(request.page_token), size, request.profile, request.upstream
        )
        # The fleet's last reading, from memory: asking for it never waits on Redis.
        fleet = self.store.fleet_views(request.profile) if request.include_fleet else {}
        reply = pb.GetUpstreamsResponse()
        async with self._turns.turn() as turn:
            for _, key in keys:
                await turn.pause()
                view = upstreams.view(key)  # None: dropped while the page was built
                if view is not None:
                    row = reply.upstreams.add()
                    _fill_upstream(view, row)
                    if (seen := fleet.get(key)) is not None:
                        _fill_fleet(seen, row.fleet)
        if more:
            reply.next_page_token = str(keys[-1][0])
            reply.truncated = True
        reply.last_event = self._observer.events.last
        return reply

    @boundary
    async def GetEvents(
        self,
        request: pb.GetEventsRequest,
        context: grpc.aio.ServicerContext[pb.GetEventsRequest, pb.GetEventsResponse],
    ) -> pb.GetEventsResponse:
        """One page of the event history (telemetry/event_page.py): at most
        MAX_PAGE events, found by index, so a call costs its page alone."""
        return self.events_page(request)

    @boundary
    async def ExplainDecision(
        self,
        request: pb.ExplainDecisionRequest,
        context: grpc.aio.ServicerContext[pb.ExplainDecisionRequest, pb.ExplainDecisionResponse],
    ) -> pb.ExplainDecisionResponse:
        """A refusal kept (telemetry/decisions_kept.py), its state and the
        upstream's events before it; NOT_FOUND for an id not kept."""
        check_chars("decision_id", request.decision_id, MAX_ID_CHARS)
        if not request.decision_id:
            raise PolicyInputError(
                "decision_id", "is required: an AdmitResponse's or DecideRetryResponse's"
            )
        reply = self.explain(request.decision_id)
        if reply is None:
            shown = shown_text(request.decision_id, MAX_ID_CHARS)
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"decision_id: {shown!r} is not kept: the daemon keeps the latest "
                f"{KEPT_DECISIONS:,} refusals, and a restarted daemon none of the last one's",
            )
        assert reply is not None
        return reply

    def explain(self, decision_id: str) -> pb.ExplainDecisionResponse | None:
        """ExplainDecision's answer, or None when `decision_id` is not kept."""
        kept = self._observer.kept.get(decision_id)
        if kept is None:
            return None
        reply = pb.ExplainDecisionResponse(
            decision_id=decision_id,
            rpc=kept.rpc,
            profile=kept.profile,
            upstream=kept.upstream,
            reason=kept.reason,  # type: ignore[arg-type]
            explanation=kept.explanation,
            breaker_state=kept.breaker_state,  # type: ignore[arg-type]
            pace_source=kept.pace_source,  # type: ignore[arg-type]
            rate=kept.rate,
        )
        reply.time.FromNanoseconds(int(kept.at * 1e9))
        ring = self._observer.events
        for event in ring.before(kept.last_event, kept.upstream, kept.profile):
            fill_event(event, reply.events.add())
        return reply

    def upstream_rows(self, limit: int) -> tuple[list[pb.UpstreamState], int]:
        """Up to `limit` tracked upstreams as GetUpstreams shows them, those
        with an open breaker or a cool-down first (Upstreams.notable), and
        how many more there are: the status page's (call it on the event
        loop, which owns the registry)."""
        upstreams = self.store.upstreams
        keys, more = upstreams.notable(limit)
        rows = []
        for key in keys:
            view = upstreams.view(key)
            if view is not None:
                _fill_upstream(view, row := pb.UpstreamState())
                rows.append(row)
        return rows, more

    def latest_events(self, count: int) -> list[pb.Event]:
        """The `count` latest events, oldest first (any thread)."""
        ring = self._observer.events
        request = pb.GetEventsRequest(after=max(0, ring.last - count), page_size=count)
        return list(self.events_page(request).events)

    def events_page(self, request: pb.GetEventsRequest) -> pb.GetEventsResponse:
        """GetEvents' answer, for the metrics port's /events too (any thread)."""
        return answer(self._observer.events, request, self._policy.profile)


def _after(token: str) -> int:
    """The sequence number a page token says to go on after; -1 for none."""
    if not token:
        return -1
    if not (token.isascii() and token.isdigit() and len(token) <= 18):
        raise PolicyInputError("page_token", "is not a next_page_token this daemon gave")
    return int(token)


def _fill_upstream(view: UpstreamView, out: pb.UpstreamState) -> None:
    s = view.snapshot
    out.profile = view.profile
    # Another executor's name is caller data: shown redacted, like in a span.
    out.upstream = shown_text(view.upstream, MAX_NAME_CHARS)
    out.breaker_state = s.breaker_state  # type: ignore[assignment]
    out.breaker_state_age.FromTimedelta(view.state_age)
    out.window_calls = s.calls
    out.window_failures = s.failures
    out.budget_balance = s.retries_left
    out.cool_down_left.FromTimedelta(s.cooldown_left)
    p = s.pace
    out.pace_source = p.source  # type: ignore[assignment]
    out.rate = p.rate
    out.token_rate = p.token_rate
    out.queue_delay.FromTimedelta(p.queue_delay)
    out.concurrency_limit = p.concurrency_limit
    out.in_flight = p.in_flight
    out.paced = view.paced
    out.shed = view.shed
    out.throttled = view.throttled
    out.near_limit = view.near_limit
    out.admitted = view.admitted
    out.succeeded = view.succeeded


def _fill_fleet(f: FleetSnapshot, out: pb.FleetState) -> None:
    out.breaker_state = f.breaker_state  # type: ignore[assignment]
    out.window_calls = f.calls
    out.window_failures = f.failures
    out.failing_pods = f.failing_pods
    out.probes = f.probes
    if f.breaker_retry_after is not None:  # unset when CLOSED
        out.breaker_retry_after.FromTimedelta(f.breaker_retry_after)
    out.cool_down_left.FromTimedelta(f.cooldown_left)
    out.retries_left = f.retries_left
    out.pace_share = f.pace_share
    out.pods = f.pods
    out.age.FromTimedelta(f.age)
