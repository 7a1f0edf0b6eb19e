"""Sync and asyncio clients. The logic lives once in `_Policy`; the two
transports only differ in how they call the stub.

Decision calls carry a short deadline (50 ms by default): Squawk sits on the
failure path, and a slow or absent daemon must not stall the executor. When
the daemon does not decide (it is unreachable or too slow, or the call ends
with another status that says no decision was made: see _FALL_BACK_ON),
DecideRetry (and DecideRetryBatch, item by item) answers from the local
fallback policy and the decision says so (`fallback=True`). The other calls
have no fallback: they raise.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import NoReturn

import grpc

from squawk.policy import Criticality, Fairness, Profile
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

from ._admission import LEASED, OPEN, Admission, admission, admit_request
from ._decision import Decision, fallback_decision, fallback_profile, from_message
from ._errors import SquawkError, SquawkInputError
from ._leases import Key, Leases
from ._outbox import Outbox
from ._throttle import Throttle
from ._throttled import AsyncThrottledStub, ThrottledStub

try:  # Trace propagation is optional: only an executor that traces has the API.
    from opentelemetry import propagate
except ImportError:  # pragma: no cover - exercised by the isolated-install test
    propagate = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_ANALYZE_TIMEOUT",
    "DEFAULT_BATCH_TIMEOUT",
    "DEFAULT_CALL_TIMEOUT",
    "AsyncSquawkClient",
    "BatchResult",
    "SquawkClient",
]

DEFAULT_CALL_TIMEOUT = timedelta(milliseconds=50)
# A batch or a pre-dispatch check may carry thousands of items.
DEFAULT_BATCH_TIMEOUT = timedelta(seconds=1)
# Analysis may ask a model; it gets a budget of seconds, not milliseconds.
DEFAULT_ANALYZE_TIMEOUT = timedelta(seconds=30)

# The pages get_upstreams reads at most, as `squawk upstreams` does: ten times
# a full registry (10,000 upstreams by default, 1,000 a page). Names tracked
# while it lists come on later pages, so a flood of new names (or a server
# that keeps answering a next_page_token) would otherwise keep it reading.
_MAX_PAGES = 100

# One result per batch item: the decision, or why that item was refused.
BatchResult = Decision | SquawkInputError


# Where the daemon is when the caller names no target: SQUAWK_ADDRESS (the
# pod's manifest sets it, as OTel SDKs read OTEL_EXPORTER_OTLP_ENDPOINT),
# else the daemon's own default listen address. A target given wins; an
# empty one, or an empty variable, counts as not given (as in the Go and
# TypeScript clients, where "" is how Go says "no target"). Read when the
# client is made, not at import.
ADDRESS_VARIABLE = "SQUAWK_ADDRESS"
DEFAULT_TARGET = "127.0.0.1:50051"


def _target(target: str | None) -> str:
    return target or os.environ.get(ADDRESS_VARIABLE) or DEFAULT_TARGET


# Reconnect quickly once the daemon is back: the default backoff can grow to
# two minutes, which would keep the client on its fallback long after.
_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
# The statuses that say the daemon did not decide, so the fallback answers
# (and Admit and ReportOutcome fail open). The daemon itself answers
# INVALID_ARGUMENT, INTERNAL and RESOURCE_EXHAUSTED (a call that reached it
# too close to its deadline: not decided); the others come from gRPC or a
# proxy: unreachable or too slow, CANCELLED by the server or a proxy (under
# load, or on shutdown), RESOURCE_EXHAUSTED (overload, an answer over the size limit),
# UNKNOWN (an answer that could not be read), UNIMPLEMENTED (an older daemon,
# or another server at the address), ABORTED and DATA_LOSS. The executor's
# own cancellation never gets here: asyncio raises CancelledError, not an
# RpcError. Left out on purpose, so that they raise: INVALID_ARGUMENT (the
# caller's bad input), NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION,
# OUT_OF_RANGE (verdicts on the request), PERMISSION_DENIED and
# UNAUTHENTICATED (a verdict on the caller: a fallback would hide a
# misconfiguration for good). The Go and TypeScript clients keep the same
# table, pinned by the runner vectors.
_FALL_BACK_ON = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.DATA_LOSS,
    }
)
# grpc.health.v1's Check, which the daemon always serves; sent as the bytes of
# an empty HealthCheckRequest, so the client needs no health package.
_HEALTH_CHECK = "/grpc.health.v1.Health/Check"


def _connect_now(channel: grpc.Channel, timeout_s: float) -> grpc.Future[bytes]:
    """Start connecting without waiting, so the first call does not spend its
    50 ms on the handshake and get the fallback's answer.

    The sync channel has no public call that only starts a connection (the
    asyncio one has get_state(try_to_connect=True)). A subscription would,
    but grpc's polling thread behind it races close() and dies with "Cannot
    monitor channel state" (grpc/grpc#18995; so does channel_ready_future).
    An ordinary call does not: this health check runs in the background, its
    answer unread; close() ends it like any call, and the connection attempt
    goes on past its timeout, which only bounds the call itself.
    """
    check: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(_HEALTH_CHECK)
    return check.future(b"", timeout=timeout_s)


def _metadata() -> tuple[tuple[str, str | bytes], ...]:
    # W3C traceparent (and baggage) of the caller's current span, if any.
    if propagate is None:
        return ()
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return tuple(carrier.items())


def _fairness(key: str, weight: float) -> Fairness | None:
    return Fairness(key, weight) if key or weight else None


def raise_for(exc: grpc.RpcError) -> NoReturn:
    code: grpc.StatusCode = exc.code()
    details: str = exc.details() or ""
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        raise SquawkInputError.from_details(details) from exc
    raise SquawkError(code.name, details) from exc


def _too_many_pages() -> NoReturn:
    # Raised, not a short list returned: the caller asked for every upstream.
    # botocore's paginator likewise raises rather than loop on a token that
    # never ends (PaginationError); get_upstreams_page reads on regardless.
    raise SquawkError(
        "ABORTED",
        f"GetUpstreams: stopped after {_MAX_PAGES} pages; "
        "more upstreams are being tracked than one listing can read",
    )


def _batch_results(reply: pb.DecideRetryBatchResponse) -> list[BatchResult]:
    return [
        from_message(r.decision)
        if r.WhichOneof("result") == "decision"
        else SquawkInputError.from_details(r.error)
        for r in reply.results
    ]


class _Policy:
    """What both transports share: timeouts, fallback and error mapping."""

    def __init__(self, call_timeout: timedelta, fallback: bool) -> None:
        self.call_timeout_s = call_timeout.total_seconds()
        self.fallback_enabled = fallback
        self.fallback_profile = fallback_profile(os.environ)
        self.fallback_count = 0
        # What the runners share between the client's concurrent steps.
        self.outbox = Outbox()
        self.leases = Leases()

    def step_request(
        self,
        key: Key,
        deadline: timedelta | None,
        cost: float,
        criticality: Criticality | None = None,
        fairness: Fairness | None = None,
    ) -> pb.AdmitRequest | Admission:
        """The runner's Admit for a dispatch to `key`, or the admission of a
        spare leased permit that starts it without asking."""
        left = None if deadline is None else deadline.total_seconds()
        if (leased := self.leases.take(key, left)) is not None:
            admission_id, wait, spacing = leased
            return replace(
                LEASED,
                admission_id=admission_id,
                wait=timedelta(seconds=wait),
                spacing=timedelta(seconds=spacing),
            )
        profile, upstream, capability = key
        permits = self.leases.ask(key)
        return admit_request(
            upstream, capability, profile, deadline, cost, permits, criticality, fairness
        )

    def step_admission(self, key: Key, admission: Admission, asked: int = 1) -> Admission:
        if asked > 1:
            self.leases.answered(key)
        if admission.allowed and not admission.fallback:
            self.leases.granted(
                key,
                admission.permits,
                admission.lease,
                admission.admission_id,
                admission.wait,
                admission.spacing,
            )
        return admission

    def unreported(self, exc: grpc.RpcError, count: int) -> None:
        """A batch of outcomes the daemon did not take: counted, never raised
        (the steps that made them are gone)."""
        self.outbox.lost(count)
        if exc.code() in _FALL_BACK_ON:
            self.fallback_count += 1

    def fallback(self, exc: grpc.RpcError, request: pb.DecideRetryRequest) -> Decision:
        """Answer DecideRetry locally when the daemon is away, else raise."""
        if not self.fallback_enabled or exc.code() not in _FALL_BACK_ON:
            raise_for(exc)
        decision = fallback_decision(request, self.fallback_profile)
        self.fallback_count += 1
        return decision

    def fail_open(self, exc: grpc.RpcError) -> None:
        """Admit and ReportOutcome let the call through when the daemon is away."""
        if not self.fallback_enabled or exc.code() not in _FALL_BACK_ON:
            raise_for(exc)
        self.fallback_count += 1

    def batch_fallback(
        self, exc: grpc.RpcError, requests: Sequence[pb.DecideRetryRequest]
    ) -> list[BatchResult]:
        if not self.fallback_enabled or exc.code() not in _FALL_BACK_ON:
            raise_for(exc)
        results: list[BatchResult] = []
        for i, request in enumerate(requests):
            try:
                results.append(fallback_decision(request, self.fallback_profile))
            except SquawkInputError as bad:
                # Named by the item's path, as the daemon names it.
                results.append(SquawkInputError.from_details(f"requests[{i}].{bad.details}"))
        self.fallback_count += 1
        return results


class SquawkClient:
    """Blocking client, for threaded executors."""

    def __init__(
        self,
        target: str | None = None,
        *,
        call_timeout: timedelta = DEFAULT_CALL_TIMEOUT,
        fallback: bool = True,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        """`target`: the daemon's address; None (the default) reads
        SQUAWK_ADDRESS, else 127.0.0.1:50051. `credentials`: for a daemon
        serving TLS, e.g. grpc.ssl_channel_credentials(ca, key, cert) for
        mutual TLS; None (the default) is plaintext, for a sidecar on
        loopback or a unix socket."""
        self._channel = (
            grpc.secure_channel(_target(target), credentials, options=_CHANNEL_OPTIONS)
            if credentials is not None
            else grpc.insecure_channel(_target(target), options=_CHANNEL_OPTIONS)
        )
        self._stub = ThrottledStub(pb_grpc.PolicyServiceStub(self._channel), Throttle())
        self._policy = _Policy(call_timeout, fallback)
        # Held: a call's future that is garbage-collected cancels the call.
        self._connecting = _connect_now(self._channel, self._policy.call_timeout_s)
        # Sends the runners' outcomes; started by the first one.
        self._reporter: threading.Thread | None = None
        self._reporter_lock = threading.Lock()

    @property
    def fallback_count(self) -> int:
        return self._policy.fallback_count

    @property
    def dropped_outcomes(self) -> int:
        """Runner outcomes the daemon never got (away, refused, or queued after close)."""
        return self._policy.outbox.dropped

    @property
    def fallback_profile(self) -> Profile:
        return self._policy.fallback_profile

    def classify(self, request: pb.ClassifyRequest) -> pb.ClassifyResponse:
        try:
            reply: pb.ClassifyResponse = self._stub.Classify(
                request, timeout=self._policy.call_timeout_s, metadata=_metadata()
            )
        except grpc.RpcError as exc:
            raise_for(exc)
        return reply

    def decide_retry(self, request: pb.DecideRetryRequest) -> Decision:
        try:
            reply = self._stub.DecideRetry(
                request, timeout=self._policy.call_timeout_s, metadata=_metadata()
            )
        except grpc.RpcError as exc:
            return self._policy.fallback(exc, request)
        return from_message(reply)

    def decide_retry_batch(
        self,
        requests: Sequence[pb.DecideRetryRequest],
        timeout: timedelta = DEFAULT_BATCH_TIMEOUT,
    ) -> list[BatchResult]:
        """One result per request, in order: a Decision, or the item's SquawkInputError."""
        try:
            reply = self._stub.DecideRetryBatch(
                pb.DecideRetryBatchRequest(requests=requests),
                timeout=timeout.total_seconds(),
                metadata=_metadata(),
            )
        except grpc.RpcError as exc:
            return self._policy.batch_fallback(exc, requests)
        return _batch_results(reply)

    def analyze_error(
        self, request: pb.AnalyzeErrorRequest, timeout: timedelta = DEFAULT_ANALYZE_TIMEOUT
    ) -> pb.AnalyzeErrorResponse:
        """Ask for corrected parameters; no fallback (a correction needs the daemon)."""
        try:
            reply: pb.AnalyzeErrorResponse = self._stub.AnalyzeError(
                request, timeout=timeout.total_seconds(), metadata=_metadata()
            )
        except grpc.RpcError as exc:
            raise_for(exc)
        return reply

    def check_dispatch(
        self, request: pb.CheckDispatchRequest, timeout: timedelta = DEFAULT_BATCH_TIMEOUT
    ) -> pb.CheckDispatchResponse:
        """Check parameters against their schema before dispatch; no fallback."""
        try:
            reply: pb.CheckDispatchResponse = self._stub.CheckDispatch(
                request, timeout=timeout.total_seconds(), metadata=_metadata()
            )
        except grpc.RpcError as exc:
            raise_for(exc)
        return reply

    def admit(
        self,
        upstream: str,
        *,
        capability: str = "",
        profile: str = "",
        deadline: timedelta | None = None,
        cost: float = 0.0,
        permits: int = 1,
        criticality: Criticality | None = None,
        fairness_key: str = "",
        fairness_weight: float = 0.0,
    ) -> Admission:
        """Ask before dispatching to `upstream`; fails open when the daemon is away.

        `deadline`: the step's time left (None = none); `cost`: the call's
        estimated cost in token units (0 = unknown); `permits`: how many
        dispatches to start with this answer (clamped to 1..100);
        `criticality`: how much the call matters (None = CRITICAL);
        `fairness_key`, `fairness_weight`: whose call it is, and its
        weight, for the pace's fair shares ("" and 0 = none, weight 1)."""
        request = admit_request(
            upstream,
            capability,
            profile,
            deadline,
            cost,
            permits,
            criticality,
            _fairness(fairness_key, fairness_weight),
        )
        return self._admit(request)

    def _admit(self, request: pb.AdmitRequest) -> Admission:
        try:
            reply = self._stub.Admit(
                request, timeout=self._policy.call_timeout_s, metadata=_metadata()
            )
        except grpc.RpcError as exc:
            self._policy.fail_open(exc)
            return OPEN
        return admission(reply)

    def report_outcome(self, outcomes: Sequence[pb.Outcome]) -> int:
        """Report finished dispatches; the number recorded (0 when the daemon is away)."""
        try:
            reply: pb.ReportOutcomeResponse = self._stub.ReportOutcome(
                pb.ReportOutcomeRequest(outcomes=outcomes),
                timeout=self._policy.call_timeout_s,
                metadata=_metadata(),
            )
        except grpc.RpcError as exc:
            self._policy.fail_open(exc)
            return 0
        return reply.recorded

    def get_upstreams(
        self, profile: str = "", *, upstream: str = "", include_fleet: bool = False
    ) -> list[pb.UpstreamState]:
        """The pod's state of every tracked upstream (of `profile`, and named
        exactly `upstream`, when given), every page read; no fallback.
        `include_fleet`: each state's `fleet` also holds the fleet's view,
        where the pod has one (the Redis store)."""
        request = pb.GetUpstreamsRequest(
            profile=profile, upstream=upstream, include_fleet=include_fleet
        )
        states: list[pb.UpstreamState] = []
        for _ in range(_MAX_PAGES):
            reply = self.get_upstreams_page(request)
            states.extend(reply.upstreams)
            if not reply.next_page_token:
                return states
            request.page_token = reply.next_page_token
        _too_many_pages()

    def get_upstreams_page(self, request: pb.GetUpstreamsRequest) -> pb.GetUpstreamsResponse:
        """One page of GetUpstreams, as the daemon answers it; no fallback."""
        try:
            reply: pb.GetUpstreamsResponse = self._stub.GetUpstreams(
                request, timeout=DEFAULT_BATCH_TIMEOUT.total_seconds(), metadata=_metadata()
            )
        except grpc.RpcError as exc:
            raise_for(exc)
        return reply

    def get_events(
        self, after: int = 0, *, profile: str = "", upstream: str = "", page_size: int = 0
    ) -> pb.GetEventsResponse:
        """One page of the pod's event history (breaker transitions, pace
        changes, cool-downs begun, each with its cause), oldest first, past
        event number `after`; no fallback. Keep the answer's `next_after` and
        pass it as `after` to go on; its `lost` counts the events past `after`
        the daemon no longer holds."""
        request = pb.GetEventsRequest(
            after=after, profile=profile, upstream=upstream, page_size=page_size
        )
        try:
            reply: pb.GetEventsResponse = self._stub.GetEvents(
                request, timeout=DEFAULT_BATCH_TIMEOUT.total_seconds(), metadata=_metadata()
            )
        except grpc.RpcError as exc:
            raise_for(exc)
        return reply

    def explain_decision(self, decision_id: str) -> pb.ExplainDecisionResponse:
        """Why a step was refused: the decision `decision_id` names (a
        Decision's or Admission's decision_id), the upstream's state when it
        was made and its events before it; no fallback. SquawkError
        NOT_FOUND when the daemon no longer keeps it."""
        request = pb.ExplainDecisionRequest(decision_id=decision_id)
        try:
            reply: pb.ExplainDecisionResponse = self._stub.ExplainDecision(
                request, timeout=DEFAULT_BATCH_TIMEOUT.total_seconds(), metadata=_metadata()
            )
        except grpc.RpcError as exc:
            raise_for(exc)
        return reply

    def _admit_step(
        self,
        key: Key,
        *,
        deadline: timedelta | None = None,
        cost: float = 0.0,
        criticality: Criticality | None = None,
        fairness: Fairness | None = None,
    ) -> Admission:
        """The runners' Admit: a spare leased permit when one is valid, else
        Admit asking for as many permits as recent dispatches to the key."""
        request = self._policy.step_request(key, deadline, cost, criticality, fairness)
        if isinstance(request, Admission):
            return request
        return self._policy.step_admission(key, self._admit(request), request.permits)

    def _report_later(
        self, outcome: pb.Outcome, patient: bool = False, urgent: bool = False
    ) -> None:
        """Queue a runner's outcome (`patient`, `urgent`: see Outbox.put);
        sent in a batch by a background thread."""
        self._policy.outbox.put(outcome, patient, urgent)
        if self._reporter is None:
            with self._reporter_lock:
                if self._reporter is None:
                    self._reporter = threading.Thread(
                        target=self._report_loop, name="squawk-outcomes", daemon=True
                    )
                    self._reporter.start()

    def _report_loop(self) -> None:
        while (batch := self._policy.outbox.next_batch()) is not None:
            if not batch:  # every outcome taken was too old to send
                continue
            try:
                self._stub.ReportOutcome(
                    pb.ReportOutcomeRequest(outcomes=batch), timeout=self._policy.call_timeout_s
                )
            except grpc.RpcError as exc:
                self._policy.unreported(exc, len(batch))
            except Exception:  # e.g. a channel closed under it: counted, and the loop goes on
                self._policy.outbox.lost(len(batch))

    def close(self) -> None:
        """Send the queued outcomes (each batch within the call timeout), then close."""
        self._policy.outbox.close()
        with self._reporter_lock:
            reporter = self._reporter
        if reporter is not None:
            reporter.join()
        self._channel.close()

    def __enter__(self) -> SquawkClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class AsyncSquawkClient:
    """asyncio client; create it inside the running event loop."""

    def __init__(
        self,
        target: str | None = None,
        *,
        call_timeout: timedelta = DEFAULT_CALL_TIMEOUT,
        fallback: bool = True,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        """`target` and `credentials`: as for SquawkClient."""
        self._channel = (
            grpc.aio.secure_channel(_target(target), credentials, options=_CHANNEL_OPTIONS)
            if credentials is not None
            else grpc.aio.insecure_channel(_target(target), options=_CHANNEL_OPTIONS)
        )
        # Starts connecting and returns at once (see _connect_now); nothing
        # is left running for close() to end.
        self._channel.get_state(try_to_connect=True)
        self._stub = AsyncThrottledStub(pb_grpc.PolicyServiceStub(self._channel), Throttle())
        self._policy = _Policy(call_timeout, fallback)
        # Sends the runners' outcomes while some are queued; `_full` wakes it
        # early when a batch fills.
        self._reporter: asyncio.Task[None] | None = None
        self._full = asyncio.Event()

    @property
    def fallback_count(self) -> int:
        return self._policy.fallback_count

    @property
    def dropped_outcomes(self) -> int:
        """Runner outcomes the daemon never got (away, refused, or queued after close)."""
        return self._policy.outbox.dropped

    @property
    def fallback_profile(self) -> Profile:
        return self._policy.fallback_profile

    async def classify(self, request: pb.ClassifyRequest) -> pb.ClassifyResponse:
        try:
            reply: pb.ClassifyResponse = await self._stub.Classify(
                request, timeout=self._policy.call_timeout_s, metadata=_metadata()
            )
        except grpc.RpcError as exc:
            raise_for(exc)
        return reply

    async def decide_retry(self, request: pb.DecideRetryRequest) -> Decision:
        try:
            reply = await self._stub.DecideRetry(
                request, timeout=self._policy.call_timeout_s, metadata=_metadata()
            )
        except grpc.RpcError as exc:
            return self._policy.fallback(exc, request)
        return from_message(reply)

    async def decide_retry_batch(
        self,
        requests: Sequence[pb.DecideRetryRequest],
        timeout: timedelta = DEFAULT_BATCH_TIMEOUT,
    ) -> list[BatchResult]:
        """One result per request, in order: a Decision, or the item's SquawkInputError."""
        try:
            reply = await self._stub.DecideRetryBatch(
                pb.DecideRetryBatchRequest(requests=requests),
                timeout=timeout.total_seconds(),
                metadata=_metadata(),
            )
        except grpc.RpcError as exc:
            return self._policy.batch_fallback(exc, requests)
        return _batch_results(reply)

    async def analyze_error(
        self, request: pb.AnalyzeErrorRequest, timeout: timedelta = DEFAULT_ANALYZE_TIMEOUT
    ) -> pb.AnalyzeErrorResponse:
        """Ask for corrected parameters; no fallback (a correction needs the daemon)."""
        try:
            reply: pb.AnalyzeErrorResponse = await self._stub.AnalyzeError(
                request, timeout=timeout.total_seconds(), metadata=_metadata()
            )
        except grpc.RpcError as exc:
            raise_for(exc)
        return reply

    async def check_dispatch(
        self, request: pb.CheckDispatchRequest, timeout: timedelta = DEFAULT_BATCH_TIMEOUT
    ) -> pb.CheckDispatchResponse:
        """Check parameters against their schema before dispatch; no fallback."""
        try:
            reply: pb.CheckDispatchResponse = await self._stub.CheckDispatch(
                request, timeout=timeout.total_seconds(), metadata=_metadata()
            )
        except grpc.RpcError as exc:
            raise_for(exc)
        return reply

    async def admit(
        self,
        upstream: str,
        *,
        capability: str = "",
        profile: str = "",
        deadline: timedelta | None = None,
        cost: float = 0.0,
        permits: int = 1,
        criticality: Criticality | None = None,
        fairness_key: str = "",
        fairness_weight: float = 0.0,
    ) -> Admission:
        """Ask before dispatching to `upstream`; fails open when the daemon is away.

        `deadline`: the step's time left (None = none); `cost`: the call's
        estimated cost in token units (0 = unknown); `permits`: how many
        dispatches to start with this answer (clamped to 1..100);
        `criticality`: how much the call matters (None = CRITICAL);
        `fairness_key`, `fairness_weight`: whose call it is, and its
        weight, for the pace's fair shares ("" and 0 = none, weight 1)."""
        request = admit_request(
            upstream,
            capability,
            profile,
            deadline,
            cost,
            permits,
            criticality,
            _fairness(fairness_key, fairness_weight),
        )
        return await self._admit(request)

    async def _admit(self, request: pb.AdmitRequest) -> Admission:
        try:
            reply = await self._stub.Admit(
                request, timeout=self._policy.call_timeout_s, metadata=_metadata()
            )
        except grpc.RpcError as exc:
            self._policy.fail_open(exc)
            return OPEN
        return admission(reply)

    async def report_outcome(self, outcomes: Sequence[pb.Outcome]) -> int:
        """Report finished dispatches; the number recorded (0 when the daemon is away)."""
        try:
            reply: pb.ReportOutcomeResponse = await self._stub.ReportOutcome(
                pb.ReportOutcomeRequest(outcomes=outcomes),
                timeout=self._policy.call_timeout_s,
                metadata=_metadata(),
            )
        except grpc.RpcError as exc:
            self._policy.fail_open(exc)
            return 0
        return reply.recorded

    async def get_upstreams(
        self, profile: str = "", *, upstream: str = "", include_fleet: bool = False
    ) -> list[pb.UpstreamState]:
        """The pod's state of every tracked upstream (of `profile`, and named
        exactly `upstream`, when given), every page read; no fallback.
        `include_fleet`: as SquawkClient.get_upstreams."""
        request = pb.GetUpstreamsRequest(
            profile=profile, upstream=upstream, include_fleet=include_fleet
        )
        states: list[pb.UpstreamState] = []
        for _ in range(_MAX_PAGES):
            reply = await self.get_upstreams_page(request)
            states.extend(reply.upstreams)
            if not reply.next_page_token:
                return states
            request.page_token = reply.next_page_token
        _too_many_pages()

    async def get_upstreams_page(self, request: pb.GetUpstreamsRequest) -> pb.GetUpstreamsResponse:
        """One page of GetUpstreams, as the daemon answers it; no fallback."""
        try:
            reply: pb.GetUpstreamsResponse = await self._stub.GetUpstreams(
                request, timeout=DEFAULT_BATCH_TIMEOUT.total_seconds(), metadata=_metadata()
            )
        except grpc.RpcError as exc:
            raise_for(exc)
        return reply

    async def explain_decision(self, decision_id: str) -> pb.ExplainDecisionResponse:
        """Why a step was refused: as SquawkClient.explain_decision."""
        request = pb.ExplainDecisionRequest(decision_id=decision_id)
        try:
            reply: pb.ExplainDecisionResponse = await self._stub.ExplainDecision(
                request, timeout=DEFAULT_BATCH_TIMEOUT.total_seconds(), metadata=_metadata()
            )
        except grpc.RpcError as exc:
            raise_for(exc)
        return reply

    async def get_events(
        self, after: int = 0, *, profile: str = "", upstream: str = "", page_size: int = 0
    ) -> pb.GetEventsResponse:
        """One page of the pod's event history: as SquawkClient.get_events."""
        request = pb.GetEventsRequest(
            after=after, profile=profile, upstream=upstream, page_size=page_size
        )
        try:
            reply: pb.GetEventsResponse = await self._stub.GetEvents(
                request, timeout=DEFAULT_BATCH_TIMEOUT.total_seconds(), metadata=_metadata()
            )
        except grpc.RpcError as exc:
            raise_for(exc)
        return reply

    async def _admit_step(
        self,
        key: Key,
        *,
        deadline: timedelta | None = None,
        cost: float = 0.0,
        criticality: Criticality | None = None,
        fairness: Fairness | None = None,
    ) -> Admission:
        """The runners' Admit: a spare leased permit when one is valid, else
        Admit asking for as many permits as recent dispatches to the key."""
        request = self._policy.step_request(key, deadline, cost, criticality, fairness)
        if isinstance(request, Admission):
            return request
        admission = await self._admit(request)
        return self._policy.step_admission(key, admission, request.permits)

    def _report_later(
        self, outcome: pb.Outcome, patient: bool = False, urgent: bool = False
    ) -> None:
        """Queue a runner's outcome (`patient`, `urgent`: see Outbox.put);
        sent in a batch by a task on this loop."""
        full = self._policy.outbox.put(outcome, patient, urgent)
        if self._reporter is None or self._reporter.done():
            self._reporter = asyncio.get_running_loop().create_task(self._report_loop())
        elif full:
            self._full.set()

    async def _report_loop(self) -> None:
        # Ends once the queue is empty (no task outlives the work); the next
        # outcome starts another.
        outbox = self._policy.outbox
        while (due := outbox.due_in()) is not None:
            if due > 0:
                self._full.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(due):
                        await self._full.wait()
            batch = outbox.take()
            if not batch:  # every outcome taken was too old to send
                continue
            try:
                await self._stub.ReportOutcome(
                    pb.ReportOutcomeRequest(outcomes=batch), timeout=self._policy.call_timeout_s
                )
            except grpc.RpcError as exc:
                self._policy.unreported(exc, len(batch))
            except Exception:  # e.g. a channel closed under it: counted, and the loop goes on
                self._policy.outbox.lost(len(batch))

    async def close(self) -> None:
        """Send the queued outcomes (each batch within the call timeout), then close."""
        self._policy.outbox.close()
        self._full.set()  # what is queued goes now
        if self._reporter is not None:
            await self._reporter
        await self._channel.close()

    async def __aenter__(self) -> AsyncSquawkClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()
