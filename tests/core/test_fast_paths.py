"""The shortcuts on the stateless DecideRetry path answer as the long way does."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from google.protobuf.duration_pb2 import Duration

from squawk.policy import BackoffConfig, Category, Classification, Jitter, builtin_policy, decide
from squawk.policy.envelope import read_envelope
from squawk.policy.headers import header
from squawk.policy.limits import duration
from squawk.v1 import policy_pb2 as pb
from squawk.wire import attempt_state, classification_message, decision_message, fill_duration

DELTAS = [
    timedelta(0),
    timedelta(microseconds=1),
    timedelta(milliseconds=1234),
    timedelta(days=1),
    timedelta(days=3, seconds=7, microseconds=999_999),
    timedelta(microseconds=-1),
    timedelta(seconds=-1, microseconds=250_000),
    timedelta(days=-2, seconds=5),
]


@pytest.mark.parametrize("td", DELTAS, ids=str)
def test_fill_duration_is_from_timedelta(td: timedelta) -> None:
    fast, slow = Duration(), Duration()
    fill_duration(td, fast)
    slow.FromTimedelta(td)
    assert (fast.seconds, fast.nanos) == (slow.seconds, slow.nanos)


@pytest.mark.parametrize(
    "seconds,nanos",
    [(0, 0), (5, 250_000_000), (1, 1_000), (0, 1_500), (0, 2_500), (3, 999_999_999), (0, 1)],
)
def test_duration_whole_and_fractional_microseconds(seconds: int, nanos: int) -> None:
    assert duration("deadline", seconds, nanos) == timedelta(
        seconds=seconds, microseconds=nanos / 1000
    )


def test_header_lookup_by_length_still_folds_case() -> None:
    assert header({"Retry-After": "3"}, "retry-after") == "3"
    # The Kelvin sign lowers to an ASCII k, one character for one.
    assert header({"x-\u212aind": "v"}, "x-kind") == "v"
    # U+0130 lowers to two characters, one of them not ASCII: never a match.
    assert header({"x-\u0130d": "v"}, "x-id") is None
    # An exact key wins over one that only folds to it.
    assert header({"Retry-After": "1", "retry-after": "2"}, "retry-after") == "2"


@pytest.mark.parametrize(
    "body,declared,message",
    [
        (b'{"success": false, "error": {"retryable": true, "message": "m"}}', True, "m"),
        # The key spelled with an escape still declares.
        (b'{"succ\\u0065ss": false, "error": {"retryable": false}}', False, ""),
        # UTF-16 has no ASCII bytes of its own: read as JSON, as ever.
        ('{"success": false, "error": {"retryable": true}}'.encode("utf-16-le"), True, ""),
        (b'{"error": {"code": 503, "retryable": true}}', None, ""),
        (b'  {"error": "busy"', None, ""),
    ],
)
def test_envelope_without_a_success_key_declares_nothing(
    body: bytes, declared: bool | None, message: str
) -> None:
    envelope = read_envelope(body)
    assert (envelope.retryable, envelope.message) == (declared, message)


@pytest.mark.parametrize("jitter", list(Jitter))
def test_deterministic_follows_the_jitter(jitter: Jitter) -> None:
    expected = jitter in (Jitter.SINE, Jitter.NONE)
    config = BackoffConfig(jitter=jitter)
    assert config.deterministic is expected
    other = next(j for j in Jitter if (j in (Jitter.SINE, Jitter.NONE)) is not expected)
    assert dataclasses.replace(config, jitter=other).deterministic is not expected


def _field_by_field(c: Classification) -> pb.ClassifyResponse:
    out = pb.ClassifyResponse(
        http_status=c.http_status,
        category=c.category,  # type: ignore[arg-type]
        retryable=c.retryable,
        code=c.code,
        upstream_status=c.upstream_status,
        redacted_message=c.redacted_message,
    )
    if c.retry_after is not None:
        out.retry_after.FromTimedelta(c.retry_after)
    return out


def test_classifications_sharing_a_status_part_keep_their_own_fields() -> None:
    first = Classification(
        502, Category.SERVICE_ERROR, True, "UPSTREAM_SERVER_ERROR", 503, "", timedelta(seconds=2)
    )
    shapes = [
        first,
        first._replace(upstream_status=500, retryable=False),  # another status part
        first._replace(redacted_message="backend busy"),  # same part, its own text
        first._replace(retry_after=None),  # same part, no wait
        first._replace(retry_after=timedelta(milliseconds=1500)),
    ]
    for c in shapes + shapes:  # the second round copies from the kept parts
        made = classification_message(c)
        assert made == _field_by_field(c), c
        made.code = "CHANGED"  # a reply of its own: the kept part is not touched
    assert classification_message(first).code == "UPSTREAM_SERVER_ERROR"


def test_requests_differing_only_in_status_get_their_own_classification() -> None:
    profile = builtin_policy().profile("")
    replies = {}
    for status in (503, 502, 503, 500):
        request = pb.DecideRetryRequest(attempt=1, http_status=status)
        decision = decide(attempt_state(request), profile, lambda: 0.0)
        replies[status] = decision_message(decision)
        assert replies[status].classification == _field_by_field(decision.classification)
        assert replies[status].classification.upstream_status == status
