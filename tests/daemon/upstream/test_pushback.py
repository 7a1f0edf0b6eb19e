"""gRFC A6 "Pushback": a server's "do not retry" counts against the throttle.

A6: a `grpc-retry-pushback-ms` that is negative or unparsable asks the client
not to retry at all, and "the only RPCs that are counted as failures for the
throttling policy are RPCs that fail with a status code that qualifies as a
retryable or non-fatal status code, or that receive a pushback response
indicating not to retry". grpc-go's csAttempt.shouldRetry (stream.go) calls
`retryThrottler.throttle()` ("This counts as a failure for throttling")
before it even reads the status code; grpc-java's RetriableStream counts
`pushbackMillis < 0` as a qualified failure the same way.

How the header is read and what DecideRetry answers is pinned, in every
language, by tests/vectors/decisions.json and runner.json. Here: what the
refusal does to the upstream's shared state, as a table over the pure core
with a fake clock, then over the wire against a real daemon whose token
bucket is A6's default (10 tokens, 0.1 per success, retries stop at <= 5).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from itertools import count

import pytest

from conftest import serving
from squawk.policy import (
    Action,
    AttemptState,
    Outcome,
    TokenBucketConfig,
    UpstreamConfig,
    UpstreamState,
    builtin_profile,
    decide,
    guard_retry,
    pushback_refuses,
    record_outcome,
)
from squawk.policy.outcome import Verdict
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

REFUSE = {"grpc-retry-pushback-ms": "-1"}
BUCKET = UpstreamConfig(retry_budget=TokenBucketConfig(max_tokens=10, token_ratio=0.1))
NOW = 1000.0


@pytest.mark.parametrize(
    ("outcome", "cool_down", "breaker", "throttle"),
    [
        # A 400 is not the upstream's failure; its server's refusal counts
        # against the token bucket alone (A6's throttle), never the breaker.
        (
            Outcome(success=False, http_status=400),
            Verdict.IGNORED,
            Verdict.IGNORED,
            Verdict.IGNORED,
        ),
        (
            Outcome(success=False, http_status=400, refused_retry=True),
            Verdict.IGNORED,
            Verdict.IGNORED,
            Verdict.FAILURE,
        ),
        # A refused 503 is throttling, not failure (tests/daemon/upstream/test_throttling.py):
        # it cools the upstream and spends a token, and the breaker skips it.
        (
            Outcome(success=False, http_status=503, refused_retry=True),
            Verdict.FAILURE,
            Verdict.IGNORED,
            Verdict.FAILURE,
        ),
        # Success wins, and a cancelled call is never counted.
        (
            Outcome(success=True, refused_retry=True),
            Verdict.SUCCESS,
            Verdict.SUCCESS,
            Verdict.SUCCESS,
        ),
        (
            Outcome(success=False, http_status=503, refused_retry=True, cancelled=True),
            Verdict.IGNORED,
            Verdict.IGNORED,
            Verdict.IGNORED,
        ),
    ],
)
def test_a_refusing_pushback_counts_against_the_throttle(
    outcome: Outcome, cool_down: Verdict, breaker: Verdict, throttle: Verdict
) -> None:
    assert UpstreamConfig().verdict(outcome) is cool_down
    assert UpstreamConfig().breaker_verdict(outcome) is breaker
    assert UpstreamConfig().throttle_verdict(outcome) is throttle


@pytest.mark.parametrize(
    ("headers", "refuses"),
    [
        ({}, False),
        ({"grpc-retry-pushback-ms": "250"}, False),
        ({"Retry-After": "-1"}, False),  # only the pushback header says "do not retry"
        ({"grpc-retry-pushback-ms": "-1"}, True),
        ({"GRPC-Retry-Pushback-MS": "later"}, True),
    ],
)
def test_pushback_refuses_reads_only_the_pushback_header(
    headers: dict[str, str], refuses: bool
) -> None:
    assert pushback_refuses(headers) is refuses


@pytest.mark.parametrize(("refusals", "granted"), [(3, True), (4, False), (5, False)])
def test_refusals_on_statuses_that_do_not_count_drain_a_token_bucket(
    refusals: int, granted: bool
) -> None:
    """Each refused 400 takes a token: after n of them a 503 (one more) is
    granted only while the tokens stay above max_tokens / 2."""
    state = UpstreamState()
    for _ in range(refusals):
        state = record_outcome(
            state, BUCKET, NOW, Outcome(success=False, http_status=400, refused_retry=True)
        )
    state = record_outcome(state, BUCKET, NOW, Outcome(success=False, http_status=503))
    retry = decide(
        AttemptState(attempt=1, http_status=503), builtin_profile("default"), lambda: NOW
    )
    _, answer = guard_retry(state, BUCKET, NOW, retry)
    assert (answer.action is Action.RETRY) is granted


POLICY = """\
profiles:
  default:
    retry_budget: {kind: token_bucket, max_tokens: 10, token_ratio: 0.1}
"""


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pb_grpc.PolicyServiceStub]:
    with serving(tmp_path_factory, POLICY) as channel:
        yield pb_grpc.PolicyServiceStub(channel)


_names = count()


def _upstream() -> str:
    return f"pushback-{next(_names)}"


def _decide(
    stub: pb_grpc.PolicyServiceStub, upstream: str, status: int, headers: dict[str, str]
) -> pb.DecideRetryResponse:
    request = pb.DecideRetryRequest(attempt=1, http_status=status, upstream=upstream)
    request.headers.update(headers)
    reply: pb.DecideRetryResponse = stub.DecideRetry(request, timeout=5)
    return reply


def _next_503(stub: pb_grpc.PolicyServiceStub, upstream: str) -> str:
    return pb.Reason.Name(_decide(stub, upstream, 503, {}).reason)


@pytest.mark.parametrize(
    ("headers", "after"),
    [
        # Control: 400s are the caller's errors; the bucket stays full.
        ({}, "REASON_TRANSIENT_STATUS"),
        (REFUSE, "REASON_RETRY_BUDGET_EXHAUSTED"),
        ({"grpc-retry-pushback-ms": "not-a-number"}, "REASON_RETRY_BUDGET_EXHAUSTED"),
    ],
)
def test_refused_failures_asked_about_spend_the_pods_tokens(
    stub: pb_grpc.PolicyServiceStub, headers: dict[str, str], after: str
) -> None:
    upstream = _upstream()
    for _ in range(5):
        reply = _decide(stub, upstream, 400, headers)
        assert reply.action == pb.ACTION_FAIL  # no correction hook: the 400 fails either way
    assert _next_503(stub, upstream) == after


def test_a_refused_503_fails_and_spends_a_token(stub: pb_grpc.PolicyServiceStub) -> None:
    upstream = _upstream()
    for _ in range(4):
        reply = _decide(stub, upstream, 503, REFUSE)
        assert reply.action == pb.ACTION_FAIL
        assert reply.reason == pb.REASON_SERVER_PUSHBACK
        assert reply.delay.ToTimedelta() == timedelta(0)
    # 10 - 4 refusals - this 503 = 5 tokens: at max_tokens / 2, no retry.
    assert _next_503(stub, upstream) == "REASON_RETRY_BUDGET_EXHAUSTED"


def test_refused_failures_reported_spend_the_pods_tokens(stub: pb_grpc.PolicyServiceStub) -> None:
    upstream = _upstream()
    refused = pb.Outcome(upstream=upstream, success=False, http_status=400, headers=REFUSE)
    reply = stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[refused] * 5), timeout=5)
    assert reply.recorded == 5
    assert _next_503(stub, upstream) == "REASON_RETRY_BUDGET_EXHAUSTED"


def test_refused_4xx_cannot_open_the_pods_breaker(stub: pb_grpc.PolicyServiceStub) -> None:
    # A6 charges the refusal to the retry throttle only. Counted by the
    # breaker too, ten 400s (or 401s) whose server sent -1 opened it for
    # every caller of the upstream: one caller's input, the whole pod's loss.
    upstream = _upstream()
    refused = pb.Outcome(upstream=upstream, success=False, http_status=400, headers=REFUSE)
    stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[refused] * 20), timeout=5)
    for _ in range(10):
        _decide(stub, upstream, 401, REFUSE)
    admitted = stub.Admit(pb.AdmitRequest(upstream=upstream), timeout=5)
    assert (admitted.allowed, admitted.breaker_state) == (True, pb.BREAKER_STATE_CLOSED)
