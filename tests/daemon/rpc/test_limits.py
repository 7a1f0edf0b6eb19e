"""Every bound on Classify and DecideRetry, as a caller meets it over the wire.

Each case sends one request past a bound to the real daemon and expects
INVALID_ARGUMENT whose message starts with the field's name; the cases at
the edge of a bound expect an answer.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2

from conftest import Daemon, start_daemon
from health_probe import health_latencies
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc


def _deadline(seconds: int, nanos: int = 0) -> pb.DecideRetryRequest:
    request = pb.DecideRetryRequest(attempt=1, http_status=503)
    request.deadline.seconds = seconds
    request.deadline.nanos = nanos
    return request


REFUSED: list[tuple[str, str, object, str]] = [
    # (case, rpc, request, the field the message must start with)
    (
        "error_message over 64 KiB",
        "Classify",
        pb.ClassifyRequest(error_message="x" * 65_537),
        "error_message:",
    ),
    (
        "65 headers",
        "Classify",
        pb.ClassifyRequest(headers={f"h{i}": "v" for i in range(65)}),
        "headers:",
    ),
    (
        "a header name over 256",
        "DecideRetry",
        pb.DecideRetryRequest(attempt=1, headers={"n" * 257: "v"}),
        "headers:",
    ),
    (
        "a header value over 8 KiB",
        "DecideRetry",
        pb.DecideRetryRequest(attempt=1, headers={"retry-after": "1" * 8_193}),
        "headers: the value of 'retry-after' is 8193 characters",
    ),
    (
        "capability over 256",
        "DecideRetry",
        pb.DecideRetryRequest(attempt=1, capability="c" * 257),
        "capability:",
    ),
    (
        "upstream over 256",
        "DecideRetry",
        pb.DecideRetryRequest(attempt=1, upstream="u" * 257),
        "upstream:",
    ),
    (
        "response_body over 1 MiB",
        "DecideRetry",
        pb.DecideRetryRequest(attempt=1, response_body=b" " * (1 << 20 | 1)),
        "response_body:",
    ),
    ("deadline past Duration's range", "DecideRetry", _deadline(10**14), "deadline.seconds:"),
    ("deadline nanos past 1s", "DecideRetry", _deadline(0, 1_000_000_000), "deadline.nanos:"),
    ("deadline of -5 ns", "DecideRetry", _deadline(0, -5), "deadline:"),
    ("deadline with mixed signs", "DecideRetry", _deadline(1, -5), "deadline:"),
    ("attempt 0", "DecideRetry", pb.DecideRetryRequest(attempt=0), "attempt:"),
    (
        "a criticality squawk.v1 does not define",
        "Admit",
        pb.AdmitRequest(upstream="u", criticality=9),  # type: ignore[arg-type]
        "criticality:",
    ),
    (
        "an unknown profile of 1 MB",
        "Classify",
        pb.ClassifyRequest(profile="p" * 1_000_000),
        "profile:",
    ),
    (
        "over 10,000 items",
        "DecideRetryBatch",
        pb.DecideRetryBatchRequest(requests=[pb.DecideRetryRequest(attempt=1)] * 10_001),
        "requests:",
    ),
]


def _call(channel: grpc.Channel, rpc: str, request: object) -> object:
    return getattr(pb_grpc.PolicyServiceStub(channel), rpc)(request, timeout=30)


@pytest.mark.parametrize(
    ("rpc", "request_", "field"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_a_value_past_its_bound_is_refused_naming_the_field(
    channel: grpc.Channel, rpc: str, request_: object, field: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        _call(channel, rpc, request_)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = caught.value.details() or ""
    assert details.startswith(field), details
    # An error never echoes more than a bounded prefix of what was sent.
    assert len(details) <= 1_100
    # The rich error model names the same field, for clients that read it.
    assert _violated_fields(caught.value) == [field.partition(":")[0]]


def _violated_fields(error: grpc.RpcError) -> list[str]:
    assert isinstance(error, grpc.Call)
    raw = [v for k, v in error.trailing_metadata() or () if k == "grpc-status-details-bin"]
    assert len(raw) == 1 and isinstance(raw[0], bytes)
    status = status_pb2.Status.FromString(raw[0])
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert status.message == error.details()
    fields = []
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        assert detail.Unpack(bad)
        fields += [v.field for v in bad.field_violations]
    return fields


def test_values_at_their_bounds_are_answered(channel: grpc.Channel) -> None:
    at_limit = pb.DecideRetryRequest(
        attempt=1,
        http_status=503,
        capability="c" * 256,
        upstream="u" * 256,
        headers={f"h{i}": "v" * 8_192 for i in range(63)} | {"retry-after": "2"},
    )
    at_limit.deadline.seconds = 315_576_000_000
    reply = _call(channel, "DecideRetry", at_limit)
    assert isinstance(reply, pb.DecideRetryResponse)
    assert reply.action == pb.ACTION_RETRY
    assert reply.delay.ToTimedelta() == timedelta(seconds=2)
    classified = _call(channel, "Classify", pb.ClassifyRequest(error_message="e" * 65_536))
    assert isinstance(classified, pb.ClassifyResponse)


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("Retry-After", "9" * 20),
        ("Retry-After", "99999999999"),
        ("Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"),
        ("grpc-retry-pushback-ms", "9" * 15),
        ("Retry-After", "9" * 5_000),
    ],
)
def test_a_server_hint_is_capped_at_one_day(channel: grpc.Channel, header: str, value: str) -> None:
    # With a day's deadline: without one, a wait past the profile's
    # max_retry_wait fails at once (REASON_WAIT_TOO_LONG), whatever the cap.
    request = pb.DecideRetryRequest(
        attempt=1,
        http_status=503,
        headers={header: value},
        deadline=duration_pb2.Duration(seconds=86_400),
    )
    reply = _call(channel, "DecideRetry", request)
    assert isinstance(reply, pb.DecideRetryResponse)
    assert reply.action == pb.ACTION_RETRY
    assert reply.delay.ToTimedelta() == timedelta(days=1)
    assert reply.classification.retry_after.ToTimedelta() == timedelta(days=1)


def test_a_lone_surrogate_in_an_envelope_comes_back_as_a_replacement_character(
    channel: grpc.Channel,
) -> None:
    body = b'{"success": false, "error": {"message": "bad \\ud800 city", "retryable": true}}'
    request = pb.DecideRetryRequest(attempt=1, http_status=503, response_body=body)
    reply = _call(channel, "DecideRetry", request)
    assert isinstance(reply, pb.DecideRetryResponse)
    assert reply.classification.redacted_message == "bad \ufffd city"


@pytest.mark.parametrize(
    "rpc", ["Classify", "DecideRetry", "DecideRetryBatch", "AnalyzeError", "CheckDispatch"]
)
# The last is over 64 KiB, so it is parsed in slices (bodies.py), and only
# its end is broken.
@pytest.mark.parametrize(
    "body",
    [b"\xff\xff\xff\xff", b"\x0a\x05ab", b"\x08" + b"\xff" * 11, b"\x0a\x00" * 40_000 + b"\xff"],
    ids=["garbage", "truncated", "overlong varint", "large with a broken end"],
)
def test_a_malformed_body_is_an_invalid_argument_naming_the_request(
    channel: grpc.Channel, rpc: str, body: bytes
) -> None:
    raw = channel.unary_unary(
        f"/squawk.v1.PolicyService/{rpc}",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.RpcError) as caught:
        raw(body, timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == f"request: not a valid squawk.v1.{rpc}Request message"


def test_one_bad_item_answers_alone_and_the_batch_goes_on(channel: grpc.Channel) -> None:
    bad = pb.DecideRetryRequest(attempt=1, http_status=503)
    bad.deadline.seconds = 10**14
    request = pb.DecideRetryBatchRequest(
        requests=[
            pb.DecideRetryRequest(attempt=1, http_status=503),
            bad,
            pb.DecideRetryRequest(attempt=1, http_status=503, profile="nope password=hunter2"),
            pb.DecideRetryRequest(attempt=1, http_status=400),
        ]
    )
    reply = _call(channel, "DecideRetryBatch", request)
    assert isinstance(reply, pb.DecideRetryBatchResponse)
    kinds = [r.WhichOneof("result") for r in reply.results]
    assert kinds == ["decision", "error", "error", "decision"]
    assert reply.results[1].error.startswith("requests[1].deadline.seconds:")
    assert reply.results[2].error.startswith("requests[2].profile:")
    assert "hunter2" not in reply.results[2].error


@pytest.fixture
def logged_daemon(tmp_path: Path) -> tuple[Daemon, Path]:
    log = tmp_path / "decisions.jsonl"
    return start_daemon("--decision-log", str(log)), log


def test_garbage_costs_a_throttled_log_line_not_a_traceback_each(
    logged_daemon: tuple[Daemon, Path],
) -> None:
    daemon, _ = logged_daemon
    with grpc.insecure_channel(daemon.target) as channel:
        raw = channel.unary_unary(
            "/squawk.v1.PolicyService/DecideRetry",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        for i in range(300):
            with pytest.raises(grpc.RpcError):
                raw(bytes([0xFF, i % 256, 0xFF]), timeout=5)
    output = daemon.output()
    daemon.stop()
    assert "Traceback" not in output
    assert output.count("not a valid message") == 1, output


def test_answers_whose_call_had_ended_cost_a_throttled_line_not_a_traceback_each() -> None:
    # grpc logs an ERROR and a traceback for an answer it cannot send
    # because the call has ended: its deadline passed while the answer was
    # made, or its caller refused it. Which of those calls grpc logs is a
    # race in grpc, likelier under load: without the daemon's filter, this
    # test saw a traceback in 3 runs of 4 on an idle machine and in every
    # run on a busy one. (tests/daemon/telemetry/test_grpc_log.py logs
    # grpc's record itself, every time.)
    daemon = start_daemon()
    slow = pb.ClassifyRequest(http_status=503, error_message="password=" + "x" * 65_000)
    message = ("status " * 40 + "password=" + "p" * 40)[:300]
    body = json.dumps({"success": False, "error": {"message": message}}).encode()
    # An answer of some 4.5 MB (the item decided once, then reused).
    batch = pb.DecideRetryBatchRequest(
        requests=[pb.DecideRetryRequest(attempt=1, response_body=body)] * 10_000
    )
    try:
        # Under overload, as when many callers' deadlines pass at once.
        with _largest_in_bound_load(daemon.target):
            # A deadline shorter than the answer takes (some 5 ms to redact).
            with grpc.insecure_channel(daemon.target) as channel:
                stub = pb_grpc.PolicyServiceStub(channel)
                for _ in range(200):
                    try:
                        stub.Classify(slow, timeout=0.002)
                    except grpc.RpcError as exc:
                        assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            # An answer over the caller's receive limit, which the caller refuses.
            for _ in range(8):
                small = [("grpc.max_receive_message_length", 1_000)]
                with grpc.insecure_channel(daemon.target, options=small) as channel:
                    stub = pb_grpc.PolicyServiceStub(channel)
                    with pytest.raises(grpc.RpcError) as caught:
                        stub.DecideRetryBatch(batch, timeout=30)
                    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        output = daemon.output()
        daemon.stop()
    assert "Traceback" not in output
    assert " ERROR " not in output
    ended = [line for line in output.splitlines() if "an answer was not sent" in line]
    rpcs = [line.split(": ")[1] for line in ended]
    # Within the test's few seconds, at most one line per RPC.
    assert sorted(set(rpcs)) == sorted(rpcs), ended


def test_caller_names_reach_the_decision_log_redacted_and_bounded(
    logged_daemon: tuple[Daemon, Path],
) -> None:
    daemon, log = logged_daemon
    secrets = ("hunter2", "sk-LEAKLEAK1234567890", "abcdefghijklmnop")
    with grpc.insecure_channel(daemon.target) as channel:
        _call(
            channel,
            "DecideRetry",
            pb.DecideRetryRequest(
                attempt=1,
                http_status=503,
                capability="search password=hunter2 sk-LEAKLEAK1234567890",
                upstream="Bearer abcdefghijklmnop " + "x" * 200,
            ),
        )
    daemon.stop()
    (line,) = log.read_text().splitlines()
    assert not [s for s in secrets if s in line]
    entry = json.loads(line)
    assert entry["squawk.capability"] == "search password=[REDACTED] [REDACTED]"
    assert entry["squawk.upstream"].startswith("Bearer [REDACTED] xxx")
    assert len(entry["squawk.upstream"]) <= 257


@pytest.mark.parametrize(
    "char", ["😀", "\x00", "\x7f", "\x9f"], ids=["4-byte", "escaped", "DEL", "escaped C1"]
)
def test_a_decision_log_line_stays_within_4_kib_with_both_names_at_their_limit(
    logged_daemon: tuple[Daemon, Path], char: str
) -> None:
    daemon, log = logged_daemon
    name = char * 256
    with grpc.insecure_channel(daemon.target) as channel:
        decide = pb.DecideRetryRequest(attempt=1, http_status=503, capability=name, upstream=name)
        _call(channel, "DecideRetry", decide)
        _call(channel, "Admit", pb.AdmitRequest(capability=name, upstream=name))
    daemon.stop()
    lines = log.read_bytes().splitlines()
    assert [json.loads(line)["rpc"] for line in lines] == ["DecideRetry", "Admit"]
    for line in lines:
        assert len(line) <= 4096
        entry = json.loads(line)
        assert (entry["squawk.capability"], entry["squawk.upstream"]) == (name, name)


def test_the_decision_log_on_stdout_is_utf_8_whatever_the_locale() -> None:
    daemon = start_daemon("--decision-log", "-", env={"PYTHONIOENCODING": "latin-1"})
    with grpc.insecure_channel(daemon.target) as channel:
        _call(channel, "Admit", pb.AdmitRequest(upstream="😀"))
    output = daemon.output()
    daemon.stop()
    assert '"squawk.upstream":"😀"' in output


def test_breakers_opened_by_one_report_cost_one_log_line_that_no_name_can_break(
    logged_daemon: tuple[Daemon, Path],
) -> None:
    daemon, _ = logged_daemon
    forged = "\n2026-01-01 00:00:00,000 ERROR squawk: forged"
    outcomes = [
        pb.Outcome(upstream=f"u{i}{forged}", http_status=503) for i in range(100) for _ in range(10)
    ]
    with grpc.insecure_channel(daemon.target) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)
        reply = stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=outcomes), timeout=30)
        listed = stub.GetUpstreams(pb.GetUpstreamsRequest(), timeout=30).upstreams
    assert reply.recorded == 1000
    assert [u.breaker_state for u in listed] == [pb.BREAKER_STATE_OPEN] * 100
    output = daemon.output()
    daemon.stop()
    (line,) = [line for line in output.splitlines() if "circuit breaker" in line]
    assert "CLOSED -> OPEN for upstream 'u0\\n2026-01-01" in line
    assert "forged" not in output.replace(line, "")


def test_health_answers_while_a_worst_case_batch_is_decided(daemon: Daemon) -> None:
    # 10,000 items whose bodies each take the JSON parse and a long
    # redaction, within gRPC's 4 MiB: the longest a batch can keep the
    # daemon busy. The batch yields between slices, so health keeps answering.
    message = ("status " * 40 + "password=" + "p" * 40)[:300]
    body = json.dumps({"success": False, "error": {"message": message}}).encode()
    # Each item distinct, so none is answered from the kept stateless
    # decisions: every one is decided afresh, as the worst case would be.
    items = [
        pb.DecideRetryRequest(
            attempt=1, response_body=body, headers={"retry-after": "1"}, capability=f"c{i}"
        )
        for i in range(10_000)
    ]
    batch = pb.DecideRetryBatchRequest(requests=items)
    assert batch.ByteSize() < 4 << 20

    # Ten thousand answers with their classifications outgrow gRPC's default
    # 4 MiB receive limit; a caller of such batches raises it.
    options = [("grpc.max_receive_message_length", 64 << 20)]

    def load() -> None:
        with grpc.insecure_channel(daemon.target, options=options) as channel:
            for _ in range(3):
                reply = _call(channel, "DecideRetryBatch", batch)
                assert isinstance(reply, pb.DecideRetryBatchResponse)
                assert len(reply.results) == 10_000

    # Health is probed from another process (tests/support/health_probe.py).
    latencies = health_latencies(daemon.target, load)
    assert len(latencies) >= 20
    # On a shared 2-core machine a busy process also waits for a core now and
    # then, which no code of ours can prevent (with other jobs running, a
    # probe's p95 reached 0.25 s): the bound is on 95 % of the answers, and
    # none may wait a second. A handler that held the loop for a whole batch
    # (1-3 s) fails both.
    assert latencies[int(len(latencies) * 0.95)] < 0.5, latencies[-10:]
    assert latencies[-1] < 1.0, latencies[-10:]


def _headers(i: int) -> dict[str, str]:
    # 64 headers of some 55 bytes each, none a rate-limit one: every one is
    # checked, and scanned by each header lookup.
    return {f"x-header-{j:02d}-{i:04d}": f"value-{j:02d}-" + "v" * 30 for j in range(64)}


@contextmanager
def _largest_in_bound_load(target: str) -> Iterator[dict[str, int]]:
    """Eight callers sending 1,000 items of 64 headers each in a loop, four
    of each RPC, for as long as the block runs: the most a report holds
    (MAX_OUTCOMES), and a batch as large within gRPC's 4 MiB. Yields the
    calls served per RPC."""
    batch = pb.DecideRetryBatchRequest(
        requests=[
            pb.DecideRetryRequest(
                attempt=1, http_status=503, headers=_headers(i), upstream=f"load-{i % 10}"
            )
            for i in range(1_000)
        ]
    )
    report = pb.ReportOutcomeRequest(
        outcomes=[
            pb.Outcome(upstream=f"load-{i % 10}", http_status=503, headers=_headers(i))
            for i in range(1_000)
        ]
    )
    bodies = {
        "DecideRetryBatch": batch.SerializeToString(),
        "ReportOutcome": report.SerializeToString(),
    }
    assert all(3 << 20 < len(body) < 4 << 20 for body in bodies.values())
    served = {"DecideRetryBatch": 0, "ReportOutcome": 0}
    stop = threading.Event()
    failures: list[BaseException] = []

    def caller(rpc: str) -> None:
        # Bytes in, bytes out: the test's process spends nothing on protobuf.
        with grpc.insecure_channel(target) as channel:
            call = channel.unary_unary(
                f"/squawk.v1.PolicyService/{rpc}",
                request_serializer=lambda b: b,
                response_deserializer=lambda b: b,
            )
            try:
                reply = call(bodies[rpc], timeout=60)
                if rpc == "ReportOutcome":
                    assert pb.ReportOutcomeResponse.FromString(reply).recorded == 1_000
                else:
                    results = pb.DecideRetryBatchResponse.FromString(reply).results
                    assert [r.WhichOneof("result") for r in results] == ["decision"] * 1_000
                while not stop.is_set():
                    call(bodies[rpc], timeout=60)
                    served[rpc] += 1
            except (grpc.RpcError, AssertionError) as exc:
                failures.append(exc)

    callers = [threading.Thread(target=caller, args=(rpc,)) for rpc in bodies for _ in range(4)]
    for thread in callers:
        thread.start()
    try:
        yield served
    finally:
        stop.set()
        for thread in callers:
            thread.join(timeout=60)
    assert not failures, failures


def test_health_answers_while_eight_largest_in_bound_calls_are_served(daemon: Daemon) -> None:
    # Health is probed from another process while the load runs.
    def load() -> None:
        with _largest_in_bound_load(daemon.target) as served:
            time.sleep(3)
        assert min(served.values()) >= 4, served

    latencies = health_latencies(daemon.target, load)
    assert len(latencies) >= 20
    p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
    # Served alongside eight such calls, a health check waits behind one
    # slice of one of them at a time: some 13 ms at the median, and at the
    # 99th percentile 23 ms on an idle 2-core machine, 50-100 ms on a busy
    # one, where a probe also waits for a core now and then. Every call
    # working at once (each yielding every 32 items), the median was 80 ms
    # idle and 100-160 ms busy, the 99th percentile 130 ms and 400-700 ms:
    # the median tells the two apart on any machine.
    assert p50 < 0.05, latencies[-10:]
    assert p99 < 0.25, latencies[-10:]
