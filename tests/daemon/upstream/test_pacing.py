"""The pod's pacer over the wire: Admit's deadline, cost and permits, the
paced wait, the deadline's refusal, and what GetUpstreams shows of it.

One daemon runs a policy with a declared rate (`rate_limit: {rate: 5,
burst: 1}`: a call every 200 ms) and an upstream nothing limits. The
daemon's clock is real, so a wait is asserted against the rule's bound
(0 < wait <= 200 ms for the second of two quick calls), never against how
fast this machine is.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from conftest import Daemon, free_port, scrape, serving, squawk, start_daemon
from squawk.daemon.config import parse_config
from squawk.daemon.server.rpc.servicer import _fill_upstream
from squawk.daemon.server.telemetry.spans import SERVICE
from squawk.daemon.server.tracking.registry import Upstreams
from squawk.policy import PaceSource, Policy, RateLimitConfig, Reason, builtin_policy, pacer
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc
from squawk_client import SquawkClient, StepFailed, StepOptions, run_step_sync
from test_fleet import eventually  # isort: split

from test_telemetry import run_in_process  # isort: split

from bench.redis_server import RedisServer  # on the path once test_fleet is imported

Stub = pb_grpc.PolicyServiceStub
# The Admit span's pace attributes (docs/observability.md, "Tracing").
PACE_ATTRIBUTES = (
    "squawk.pace.wait_ms",
    "squawk.pace.source",
    "squawk.pace.rate",
    "squawk.admit.permits",
)


POLICY = """\
profiles:
  default:
    upstreams:
      open: {}
"""


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stub]:
    with serving(tmp_path_factory, POLICY) as channel:
        yield Stub(channel)


def _seconds(seconds: int, nanos: int = 0) -> Duration:
    return Duration(seconds=seconds, nanos=nanos)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"deadline": _seconds(-1)}, "deadline"),
        ({"deadline": _seconds(0, -5)}, "deadline"),
        ({"deadline": _seconds(86_401)}, "deadline"),
        ({"deadline": _seconds(10**12)}, "deadline.seconds"),
        ({"cost": -1.0}, "cost"),
        ({"cost": float("nan")}, "cost"),
        ({"cost": float("inf")}, "cost"),
        ({"cost": 1e9 + 1}, "cost"),
        ({"permits": -1}, "permits"),
        ({"permits": 101}, "permits"),
    ],
    ids=[
        "negative deadline",
        "negative nanos",
        "deadline over a day",
        "deadline past Duration's range",
        "negative cost",
        "NaN cost",
        "infinite cost",
        "cost over 1e9",
        "negative permits",
        "permits over 100",
    ],
)
@pytest.mark.parametrize("upstream", ["open", ""], ids=["tracked", "no upstream"])
def test_a_bad_admit_is_refused_naming_the_field(
    stub: Stub, fields: dict[str, Any], field: str, upstream: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        stub.Admit(pb.AdmitRequest(upstream=upstream, **fields), timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith(f"{field}:")


@pytest.mark.parametrize(
    "fields",
    [
        {"deadline": _seconds(86_400)},
        {"deadline": _seconds(0)},
        {"cost": 1e9},
        {"cost": 0.0},
        {"permits": 100},
        {"permits": 0},
    ],
    ids=["a day", "zero deadline", "cost 1e9", "cost 0", "100 permits", "0 permits"],
)
def test_admit_accepts_every_bound_itself(stub: Stub, fields: dict[str, Any]) -> None:
    reply = stub.Admit(pb.AdmitRequest(upstream="open", **fields), timeout=5)
    assert reply.reason in (pb.REASON_ADMITTED, pb.REASON_UPSTREAM_SATURATED)


@pytest.mark.parametrize(
    ("outcome", "field"),
    [
        (pb.Outcome(upstream="open", success=True, cost=-1.0), "outcomes[1].cost"),
        (pb.Outcome(upstream="open", success=True, cost=float("nan")), "outcomes[1].cost"),
        (pb.Outcome(upstream="open", success=True, cost=2e9), "outcomes[1].cost"),
        (
            pb.Outcome(upstream="open", success=True, estimated_cost=float("inf")),
            "outcomes[1].estimated_cost",
        ),
        (pb.Outcome(upstream="open", success=True, latency=_seconds(-1)), "outcomes[1].latency"),
        (
            pb.Outcome(upstream="open", success=True, latency=_seconds(86_401)),
            "outcomes[1].latency",
        ),
    ],
    ids=[
        "negative cost",
        "NaN cost",
        "cost over 1e9",
        "infinite estimate",
        "negative latency",
        "latency over a day",
    ],
)
def test_a_bad_outcome_cost_or_latency_is_refused_naming_it(
    stub: Stub, outcome: pb.Outcome, field: str
) -> None:
    fine = pb.Outcome(
        upstream="open", success=True, cost=1e9, estimated_cost=1e9, latency=_seconds(86_400)
    )
    with pytest.raises(grpc.RpcError) as caught:
        stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[fine, outcome]), timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith(f"{field}:")


LEASE_MS = 200  # docs/upstreams.md says so (squawk.policy.pacer.LEASE)


@pytest.mark.parametrize("upstream", ["open", "a-caller-name", ""])
def test_an_unlimited_upstream_grants_the_permits_asked_with_a_lease(
    stub: Stub, upstream: str
) -> None:
    reply = stub.Admit(pb.AdmitRequest(upstream=upstream, permits=7), timeout=5)
    assert (reply.allowed, reply.permits, reply.wait.ToMilliseconds()) == (True, 7, 0)
    assert reply.HasField("lease")
    assert reply.lease.ToMilliseconds() == LEASE_MS


@pytest.mark.parametrize("permits", [0, 1])
def test_one_permit_is_granted_without_a_lease(stub: Stub, permits: int) -> None:
    for upstream in ("open", ""):
        reply = stub.Admit(pb.AdmitRequest(upstream=upstream, permits=permits), timeout=5)
        assert (reply.allowed, reply.permits, reply.HasField("lease")) == (True, 1, False)


def test_the_admit_span_carries_the_pace() -> None:
    admits = [
        ("Admit", pb.AdmitRequest(upstream="api", permits=3)),
        ("Admit", pb.AdmitRequest(permits=2)),
    ]
    spans = run_in_process(calls=admits)
    assert [s.name for s in spans] == [f"/{SERVICE}/Admit"] * 2
    for span, permits in zip(spans, (3, 2), strict=True):
        attributes = dict(span.attributes or {})
        assert {k: attributes[k] for k in PACE_ATTRIBUTES} == {
            "squawk.pace.wait_ms": 0,
            "squawk.pace.source": "NONE",
            "squawk.pace.rate": 0.0,
            "squawk.admit.permits": permits,
        }


# Profile "paced": every upstream one call per 200 ms (wide enough that two
# calls in a row on a loaded machine still meet the pace), one at a time; each
# test takes a name of its own, and so a pacer of its own.
PACED = """\
profiles:
  paced:
    rate_limit: {rate: 5, burst: 1}
  tokens:
    rate_limit: {token_rate: 10000, token_burst: 10000}
  slow:
    rate_limit: {rate: 0.1, burst: 1}
  capped:
    rate_limit: {max_in_flight: 1}
"""
SLOT_MS = 200  # 1 / rate
MS = timedelta(milliseconds=1)


@pytest.fixture(scope="module")
def paced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, Stub, int]]:
    path = tmp_path_factory.mktemp("paced") / "policy.yaml"
    path.write_text(PACED)
    port = free_port()
    daemon = start_daemon("--policy", str(path), "--metrics-listen", f"127.0.0.1:{port}")
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            yield daemon, Stub(channel), port
    finally:
        daemon.stop()


def _paced_admit(stub: Stub, upstream: str, **fields: Any) -> pb.AdmitResponse:
    reply: pb.AdmitResponse = stub.Admit(
        pb.AdmitRequest(profile="paced", upstream=upstream, **fields), timeout=5
    )
    return reply


def _row(stub: Stub, profile: str, upstream: str) -> pb.UpstreamState:
    listed = stub.GetUpstreams(
        pb.GetUpstreamsRequest(profile=profile, upstream=upstream), timeout=5
    ).upstreams
    (row,) = listed
    return row


def test_a_declared_rate_paces_the_second_of_two_quick_calls(
    paced: tuple[Daemon, Stub, int],
) -> None:
    _, stub, _ = paced
    first, second = (_paced_admit(stub, "two-quick") for _ in range(2))
    # Burst 1: the first starts now; the second one slot after it, less
    # the time between the two calls (the daemon's clock is real).
    assert (first.allowed, first.wait.ToMilliseconds(), first.permits) == (True, 0, 1)
    assert second.allowed and second.permits == 1
    assert timedelta(0) < second.wait.ToTimedelta() <= SLOT_MS * MS
    row = _row(stub, "paced", "two-quick")
    assert row.pace_source == pb.PACE_SOURCE_POLICY
    assert row.rate == 5
    assert (row.paced, row.shed) == (1, 0)


def test_a_shed_step_names_the_queues_limit_not_its_long_deadline(
    paced: tuple[Daemon, Stub, int],
) -> None:
    """A step with 60 s left, shed by the queue's 1 s limit, was told the
    pace could not start it "before the step's deadline": its caller
    raised a deadline that was never the limit. The daemon now names the
    queue's limit and the pace behind the wait, and the runner says so."""
    daemon, _, _ = paced
    options = StepOptions(upstream="queue-limit", profile="slow", deadline=timedelta(seconds=60))
    with SquawkClient(daemon.target, call_timeout=timedelta(seconds=5)) as client:
        assert run_step_sync(client, lambda n: n + 1, 1, options=options) == 2
        with pytest.raises(StepFailed) as failed:
            # 0.1/s: the second start is 10 s after the first (less the
            # time between them), far past the queue's 1 s.
            run_step_sync(client, lambda n: n + 1, 1, options=options)
    decision = failed.value.decision
    assert (decision.reason, failed.value.attempts) == (Reason.UPSTREAM_SATURATED, 0)
    assert re.fullmatch(
        r"The pod refused the dispatch to queue-limit: REASON_UPSTREAM_SATURATED\. "
        r"The call would wait [\d.]+ s for the pace of 0\.1/s \(declared in the policy\), "
        r"past the queue's limit of 1 s \(rate_limit\.max_queue_delay\)\.",
        decision.explanation,
    ), decision.explanation


def test_a_deadline_shorter_than_the_wait_is_refused_at_once(
    paced: tuple[Daemon, Stub, int],
) -> None:
    _, stub, _ = paced
    queued = [_paced_admit(stub, "short-deadline") for _ in range(4)]
    assert all(q.allowed for q in queued)
    # Four calls hold the next start up to four slots away (less the time
    # they took); one with a millisecond left cannot make it.
    refused = _paced_admit(stub, "short-deadline", deadline=Duration(nanos=1_000_000))
    assert not refused.allowed
    assert refused.reason == pb.REASON_UPSTREAM_SATURATED
    assert (refused.permits, refused.wait.ToMilliseconds()) == (0, 0)
    # This time the deadline is the limit, and the answer says so.
    assert refused.explanation.endswith(", past the step's deadline 1 ms away.")
    # Its turn after the queue (one slot past the queue's end, at most five
    # slots away), jittered upwards by at most a fifth
    # (squawk.policy.cooldown.spread).
    left = refused.retry_after.ToTimedelta()
    assert timedelta(0) < left <= (4 + 1) * SLOT_MS * MS * 1.2 + MS
    # Shedding reserved no slot: a call with time enough still gets one.
    later = _paced_admit(stub, "short-deadline", deadline=Duration(seconds=5))
    assert later.allowed
    row = _row(stub, "paced", "short-deadline")
    assert row.shed == 1 and row.paced >= 1


def test_an_outcome_s_estimated_cost_lets_the_token_pace_charge_only_the_real_cost(
    paced: tuple[Daemon, Stub, int],
) -> None:
    _, stub, _ = paced

    def admit(upstream: str) -> pb.AdmitResponse:
        reply: pb.AdmitResponse = stub.Admit(
            pb.AdmitRequest(profile="tokens", upstream=upstream, cost=4000), timeout=5
        )
        return reply

    for upstream, report in (("tokens-estimated", True), ("tokens-unreported", False)):
        # 10,000 units/s with a burst of 10,000: two calls of 4,000 start at
        # once and hold the third 8,000 - 10,000 + 4,000 = 2,000 units, 200 ms.
        assert all(admit(upstream).wait.ToMilliseconds() == 0 for _ in range(2))
        if report:
            # Each used 1,000 of the 4,000 it was charged: 6,000 come back.
            done = pb.Outcome(
                profile="tokens", upstream=upstream, success=True, cost=1000, estimated_cost=4000
            )
            stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[done, done]), timeout=5)
        third = admit(upstream).wait.ToTimedelta()
        if report:
            assert third == timedelta(0)
        else:
            assert timedelta(0) < third <= 200 * MS


def test_a_paced_upstream_grants_one_permit_at_a_time(
    paced: tuple[Daemon, Stub, int],
) -> None:
    _, stub, _ = paced
    reply = _paced_admit(stub, "permits", permits=10)
    assert (reply.allowed, reply.permits, reply.HasField("lease")) == (True, 1, False)


def test_the_pace_is_in_the_metrics_and_the_log(paced: tuple[Daemon, Stub, int]) -> None:
    daemon, stub, port = paced
    for _ in range(3):
        _paced_admit(stub, "watched")
    _paced_admit(stub, "watched", deadline=Duration(nanos=1_000_000))
    labels = '{profile="paced",upstream="watched"}'
    samples = scrape(port)
    assert samples[f"squawk_pace_rate{labels}"] == 5
    assert samples[f"squawk_pace_wait_seconds_count{labels}"] == 3
    assert samples[f"squawk_admit_shed_total{labels}"] == 1
    # A pace switched on is a log line; one per source every 10 s, so the
    # line may name another test's upstream of this daemon.
    eventually(
        lambda: "pace none 0/s -> policy 5/s for upstream '" in daemon.output(),
        "the pace's log line",
    )


def test_the_admit_span_carries_a_paced_wait(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(PACED)
    admit = pb.AdmitRequest(profile="paced", upstream="traced")
    spans = run_in_process(calls=[("Admit", admit)] * 2, policy=str(path))
    first, second = (dict(s.attributes or {}) for s in spans)
    assert (first["squawk.pace.source"], first["squawk.pace.rate"]) == ("POLICY", 5.0)
    assert first["squawk.pace.wait_ms"] == 0
    assert second["squawk.pace.wait_ms"] in range(SLOT_MS + 1)


LEARNING = """\
profiles:
  default:
    circuit_breaker: {enabled: false}
"""


@pytest.fixture(scope="module")
def learning(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stub]:
    with serving(tmp_path_factory, LEARNING) as channel:
        yield Stub(channel)


def test_throttling_outcomes_switch_a_learned_pace_on(learning: Stub) -> None:
    name = "throttles"
    assert learning.Admit(pb.AdmitRequest(upstream=name), timeout=5).allowed
    assert _row(learning, "default", name).pace_source == pb.PACE_SOURCE_NONE
    outcomes = [pb.Outcome(upstream=name, success=True)] * 20 + [
        pb.Outcome(upstream=name, http_status=429)
    ] * 20
    learning.ReportOutcome(pb.ReportOutcomeRequest(outcomes=outcomes), timeout=5)
    row = _row(learning, "default", name)
    assert row.pace_source == pb.PACE_SOURCE_LEARNED
    assert row.rate > 0


def test_rate_limit_headers_on_a_success_set_the_pace(learning: Stub) -> None:
    name = "announces"
    # 401 of 600 used, refilled in 4 s written in whole seconds (so by 5 s
    # at the latest): at least (401 - 1) / 5 s = 80/s.
    headers = {
        "x-ratelimit-limit-requests": "600",
        "x-ratelimit-remaining-requests": "199",
        "x-ratelimit-reset-requests": "4s",
    }
    success = pb.Outcome(upstream=name, success=True, headers=headers)
    learning.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[success]), timeout=5)
    row = _row(learning, "default", name)
    assert row.pace_source == pb.PACE_SOURCE_HEADERS
    assert row.rate == pytest.approx(80)


def test_a_report_reads_the_rate_limit_headers_of_its_first_100_outcomes_that_carry_any(
    learning: Stub,
) -> None:
    """A runner's report (at most 100 outcomes) is read whole; in a longer
    one, the outcomes after the first 100 with rate-limit headers count,
    but their headers are not read (servicer.MAX_HINTS)."""
    quota = {
        "x-ratelimit-limit-requests": "600",
        "x-ratelimit-remaining-requests": "199",
        "x-ratelimit-reset-requests": "1s",
    }
    noise = pb.Outcome(upstream="noise", success=True, headers={"x-ratelimit-noise": "?"})
    outcomes = [noise] * 99 + [
        pb.Outcome(upstream=name, success=True, headers=quota)
        for name in ("hundredth", "hundred-first")
    ]
    assert (
        learning.ReportOutcome(pb.ReportOutcomeRequest(outcomes=outcomes), timeout=5).recorded
        == 101
    )
    assert _row(learning, "default", "hundredth").pace_source == pb.PACE_SOURCE_HEADERS
    # Recorded (the registry tracks it), unread.
    assert _row(learning, "default", "hundred-first").pace_source == pb.PACE_SOURCE_NONE


FLEET_PACED = """\
state:
  store: redis
  key_prefix: "pace:"
  deadline: 250ms
profiles:
  paced:
    rate_limit: {rate: 5, burst: 1}
"""


def test_admit_paces_with_the_redis_store(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(FLEET_PACED)
    redis = RedisServer().start()
    try:
        daemon = start_daemon("--policy", str(path), env={"SQUAWK_STATE_URL": redis.url})
        try:
            with grpc.insecure_channel(daemon.target) as channel:
                stub = Stub(channel)
                first, second = (_paced_admit(stub, "fleet-paced") for _ in range(2))
                assert first.allowed and first.wait.ToMilliseconds() == 0
                assert second.allowed
                assert timedelta(0) < second.wait.ToTimedelta() <= SLOT_MS * MS
                for _ in range(3):
                    _paced_admit(stub, "fleet-paced")
                refused = _paced_admit(stub, "fleet-paced", deadline=Duration(nanos=1_000_000))
                assert refused.reason == pb.REASON_UPSTREAM_SATURATED
                # Decided from memory as on the memory store: an upstream
                # nothing limits grants the permits asked (the fleet's
                # budget counts the grant once, as the pod's does).
                unpaced = stub.Admit(pb.AdmitRequest(upstream="fleet-open", permits=5), timeout=5)
                assert (unpaced.allowed, unpaced.permits) == (True, 5)
        finally:
            daemon.stop()
    finally:
        redis.stop()


def test_the_cli_prints_the_pace(paced: tuple[Daemon, Stub, int]) -> None:
    daemon, stub, _ = paced
    for _ in range(2):
        _paced_admit(stub, "cli-paced")
    table = squawk("upstreams", "--target", daemon.target, "--profile", "paced")
    assert table.returncode == 0, table.stderr
    header, *rows = (line.split() for line in table.stdout.splitlines())
    (row,) = [r for r in rows if r[1] == "cli-paced"]
    shown = dict(zip(header, row, strict=True))
    assert (shown["PACE"], shown["RATE"], shown["PACED"], shown["SHED"]) == (
        "policy",
        "5/s",
        "1",
        "0",
    )
    assert 0 <= float(shown["QUEUE"].removesuffix("s")) <= SLOT_MS / 1000


def test_rate_limit_headers_on_a_failure_decide_retry_saw_set_the_pace(learning: Stub) -> None:
    name = "decided"
    request = pb.DecideRetryRequest(
        attempt=1,
        http_status=429,
        upstream=name,
        headers={
            "x-ratelimit-limit-requests": "60",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "1s",
        },
    )
    learning.DecideRetry(request, timeout=5)
    assert _row(learning, "default", name).pace_source == pb.PACE_SOURCE_HEADERS


# An upstream's headers are hostile input: each set must leave a pace that
# answers within its bounds (squawk.policy.pacer: every rate has a floor,
# every hold an end of at most 5 minutes), never an error or a stall.
HOSTILE = [
    {"x-ratelimit-limit-requests": "NaN", "x-ratelimit-remaining-requests": "-1"},
    {"x-ratelimit-limit-requests": "1e308", "x-ratelimit-reset-requests": "inf"},
    {"x-ratelimit-limit-requests": "9" * 400, "x-ratelimit-remaining-requests": "0"},
    {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "99999999h"},
    {"x-ratelimit-limit": "10", "x-ratelimit-remaining": "0", "x-ratelimit-reset": "99999999999"},
    {
        "anthropic-ratelimit-requests-limit": "10",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "9999-12-31T23:59:59Z",
    },
    {"ratelimit": '"d";r=0;t=' + "9" * 60, "ratelimit-policy": '"d";q=0;w=0'},
    # A flood: as many headers as the boundary lets in, each as long as it lets.
    {f"x-ratelimit-{i}": "9" * 8_192 for i in range(64)},
]
MAX_HOLD = pacer.MAX_HOLD
MAX_QUEUE_DELAY = RateLimitConfig().max_queue_delay


@pytest.mark.parametrize("headers", HOSTILE, ids=[f"hostile{i}" for i in range(len(HOSTILE))])
def test_hostile_rate_limit_headers_leave_a_bounded_pace(
    learning: Stub, headers: dict[str, str]
) -> None:
    name = f"hostile-{HOSTILE.index(headers)}"
    report = pb.ReportOutcomeRequest(
        outcomes=[pb.Outcome(upstream=name, success=True, headers=headers)]
    )
    assert learning.ReportOutcome(report, timeout=10).recorded == 1
    row = _row(learning, "default", name)
    held = row.queue_delay.ToTimedelta()
    assert held <= MAX_HOLD
    if row.pace_source != pb.PACE_SOURCE_NONE:
        # A rate, or a hold ("remaining 0" until a reset) that ends.
        assert row.rate > 0 or held > timedelta(0)
    reply = learning.Admit(pb.AdmitRequest(upstream=name, deadline=Duration(seconds=10)), timeout=5)
    if reply.allowed:
        assert reply.wait.ToTimedelta() <= MAX_QUEUE_DELAY
    else:
        assert reply.reason == pb.REASON_UPSTREAM_SATURATED
        assert reply.retry_after.ToTimedelta() <= MAX_HOLD * 1.2 + timedelta(seconds=5)


def _rated(rate: float) -> Policy:
    return parse_config(f"profiles:\n  default:\n    rate_limit: {{rate: {rate}}}\n").policy


def test_a_pace_change_is_reported_when_its_source_changes_or_its_rate_moves_a_fifth() -> None:
    """PaceChange: a source change, or a rate off by more than 20 % from the
    one last reported (not the one last seen, so a slow drift is reported
    once it adds up); looked at no more than every 0.1 s."""
    clock = [0.0]
    policy = [_rated(20)]
    seen: list[tuple[str, float, str, float]] = []
    upstreams = Upstreams(
        policy[0],
        clock=lambda: clock[0],
        on_pace=lambda c: seen.append((c.before.name, c.rate_before, c.after.name, c.rate_after)),
    )

    def admit_at(t: float, reloaded: Policy | None = None) -> None:
        clock[0] = t
        if reloaded is not None:
            policy[0] = reloaded
            upstreams.use_policy(reloaded)
        upstreams.admit(policy[0].profile("default"), "api")

    admit_at(0.0)
    assert seen == [("NONE", 0.0, "POLICY", 20.0)]
    admit_at(1.0, _rated(23))  # +15 %: not a change
    admit_at(2.0, _rated(25))  # +25 % from the 20 reported
    assert seen[1:] == [("POLICY", 20.0, "POLICY", 25.0)]
    admit_at(2.05, _rated(100))  # within 0.1 s of the last look: not looked at
    assert len(seen) == 2
    admit_at(2.2)
    assert seen[2:] == [("POLICY", 25.0, "POLICY", 100.0)]
    admit_at(3.0, builtin_policy())  # no rate_limit: nothing paces it
    assert seen[3:] == [("POLICY", 100.0, "NONE", 0.0)]


def test_the_registry_counts_paced_and_shed_calls_and_get_upstreams_shows_the_queue() -> None:
    """With a fake clock the waits are exact: at 20 calls/s and burst 1,
    three calls at t=0 start at 0, 50 and 100 ms, so the next would wait
    150 ms; one with 100 ms left is shed, and reserves nothing."""
    clock = [0.0]
    upstreams = Upstreams(_rated(20), clock=lambda: clock[0])
    profile = _rated(20).profile("default")
    waits = [upstreams.admit(profile, "api").wait for _ in range(3)]
    assert waits == [timedelta(0), 50 * MS, 100 * MS]
    shed = upstreams.admit(profile, "api", deadline=100 * MS)
    assert (shed.allowed, shed.reason, shed.permits) == (False, Reason.UPSTREAM_SATURATED, 0)
    (view,) = upstreams.views()
    row = pb.UpstreamState()
    _fill_upstream(view, row)
    assert (row.pace_source, row.rate, row.paced, row.shed) == (pb.PACE_SOURCE_POLICY, 20, 2, 1)
    assert row.queue_delay.ToTimedelta() == 150 * MS
    assert upstreams.pace_of("default", "api") == (PaceSource.POLICY, 20.0)
    assert upstreams.pace_of("default", "never-seen") == (PaceSource.NONE, 0.0)


# A generic quota read wrong once (one call left for a day, a window that
# does not refill): the floor of one call an hour. The true reading: 4000
# of 5000 left for 2000 s, 1.9 calls/s with most of them free to start.
LIE = {"x-ratelimit-remaining": "1", "x-ratelimit-reset": "86400"}
TRUE = {"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "4000", "x-ratelimit-reset": "2000"}


def test_a_later_true_reading_takes_over_from_a_lie_at_once(learning: Stub) -> None:
    # The lie's pace reserved the call after its grant an hour ahead (a
    # hold of an hour, past max_cool_down): the true headers on the next
    # success must pace the calls after it, not the lie's reservation.
    name = "lied-to"

    def report(headers: dict[str, str]) -> None:
        outcome = pb.Outcome(upstream=name, success=True, headers=headers)
        learning.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[outcome]), timeout=5)

    report(LIE)
    assert learning.Admit(pb.AdmitRequest(upstream=name), timeout=5).allowed
    report(TRUE)
    replies = [learning.Admit(pb.AdmitRequest(upstream=name), timeout=5) for _ in range(5)]
    assert all(r.allowed and r.wait.ToTimedelta() <= MAX_QUEUE_DELAY for r in replies)
    row = _row(learning, "default", name)
    assert row.pace_source == pb.PACE_SOURCE_HEADERS
    # 95 % of 4000 left over a reset of 2000 whole seconds (2001 at most).
    assert row.rate == pytest.approx(0.95 * 4000 / 2001)


def test_one_cost_outlier_does_not_price_every_cost_less_admit(
    paced: tuple[Daemon, Stub, int],
) -> None:
    # 10000 token units/s, a burst of 10000. Five calls of cost 100 make
    # the mean real cost 100; one of 1e9 counts as at most twice the mean:
    # 100 + 0.2 x (200 - 100) = 120. A cost-less Admit is charged the mean,
    # so once the outlier's own debt is paid (at most the 1 s queue and one
    # burst, 2 s) 10000 / 120 = 83 of them start together: 40 asked one
    # after another all start within the queue, not one a second.
    _, stub, _ = paced
    name = "outlier"

    def report(cost: float) -> None:
        outcome = pb.Outcome(
            upstream=name, profile="tokens", success=True, cost=cost, estimated_cost=100
        )
        request = pb.ReportOutcomeRequest(outcomes=[outcome])
        assert stub.ReportOutcome(request, timeout=5).recorded == 1

    def admit(**fields: Any) -> pb.AdmitResponse:
        request = pb.AdmitRequest(profile="tokens", upstream=name, **fields)
        reply: pb.AdmitResponse = stub.Admit(request, timeout=5)
        return reply

    for _ in range(5):
        assert admit(cost=100).allowed
        report(100)
    assert admit(cost=100).allowed
    report(1e9)
    time.sleep(2.2)
    replies = [admit() for _ in range(40)]
    assert all(r.allowed and r.wait.ToTimedelta() <= MAX_QUEUE_DELAY for r in replies)


def test_a_full_cap_refuses_in_flight_cap_and_counts_it(paced: tuple[Daemon, Stub, int]) -> None:
    _, stub, port = paced

    def admit() -> pb.AdmitResponse:
        reply: pb.AdmitResponse = stub.Admit(
            pb.AdmitRequest(profile="capped", upstream="one-key"), timeout=5
        )
        return reply

    first = admit()
    # The call holds a slot: its outcome is to be reported at once.
    assert first.allowed and first.admission_id and first.holds_slot
    assert not _paced_admit(stub, "uncapped").holds_slot
    refused = admit()
    assert (refused.allowed, refused.reason) == (False, pb.REASON_IN_FLIGHT_CAP)
    assert refused.explanation == (
        "The upstream's cap of 1 calls in flight (rate_limit.max_in_flight) is full."
    )
    # The outcome naming the admission frees the slot; one naming none
    # (made up) would not.
    made_up = pb.Outcome(profile="capped", upstream="one-key", success=True)
    stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[made_up] * 3), timeout=5)
    assert not admit().allowed
    done = pb.Outcome(
        profile="capped", upstream="one-key", success=True, admission_id=first.admission_id
    )
    stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[done]), timeout=5)
    assert admit().allowed
    row = _row(stub, "capped", "one-key")
    assert (row.concurrency_limit, row.in_flight) == (1, 1)
    labels = '{profile="capped",upstream="one-key"}'
    assert scrape(port)[f"squawk_admit_cap_full_total{labels}"] == 2


def test_a_sheddable_call_is_refused_at_a_shorter_wait(paced: tuple[Daemon, Stub, int]) -> None:
    # rate 5 (a slot of 200 ms), the queue's limit 1 s: a SHEDDABLE call may
    # wait a quarter of it (250 ms), so the third is refused; a CRITICAL call
    # takes the lane ahead of them (squawk.policy.precedence) and starts at once.
    _, stub, port = paced
    sheddable = [
        _paced_admit(stub, "levels", criticality=pb.CRITICALITY_SHEDDABLE) for _ in range(3)
    ]
    assert [a.allowed for a in sheddable] == [True, True, False]
    assert sheddable[2].reason == pb.REASON_UPSTREAM_SATURATED
    critical = _paced_admit(stub, "levels")
    assert critical.allowed and critical.wait.ToMilliseconds() == 0
    # Which levels the pod shed, and admitted, in the metrics.
    samples = scrape(port)
    level = (
        'squawk_admit_levels_total{{criticality="{}",profile="paced",result="{}",'
        'upstream="levels"}}'
    )
    assert samples[level.format("SHEDDABLE", "admitted")] == 2
    assert samples[level.format("SHEDDABLE", "shed")] == 1
    assert samples[level.format("CRITICAL", "admitted")] == 1
    assert samples[level.format("CRITICAL", "shed")] == 0


def _tenants(stub: Stub, upstream: str, keyed: bool) -> tuple[int, int, list[str]]:
    """A light tenant asks every 500 ms and a flooding one every 20 ms, for
    4 s, against a pace of 5/s; the light one's (asked, granted) over the
    last 2 s, and the explanations of the flood's refusals."""
    light = pb.AdmitRequest(profile="paced", upstream=upstream)
    flood = pb.AdmitRequest(profile="paced", upstream=upstream)
    if keyed:
        light.fairness_key, flood.fairness_key = "tenant-light", "tenant-flood"
    asked = granted = 0
    refusals: list[str] = []
    start = time.monotonic()
    next_light = start
    while (now := time.monotonic()) < start + 4.0:
        if now >= next_light:
            reply = stub.Admit(light, timeout=5)
            if now >= start + 2.0:
                asked, granted = asked + 1, granted + reply.allowed
            next_light += 0.5
        reply = stub.Admit(flood, timeout=5)
        if not reply.allowed:
            refusals.append(reply.explanation)
        time.sleep(0.02)
    return asked, granted, refusals


def test_a_flooding_fairness_key_leaves_the_light_one_its_calls(
    paced: tuple[Daemon, Stub, int],
) -> None:
    # Max-min by key: the light tenant asks 2/s of the 5/s pace and keeps
    # them; the flood gets the 3/s left and is refused past it, by name.
    _, stub, port = paced
    asked, granted, refusals = _tenants(stub, "fair", keyed=True)
    assert asked >= 3 and granted == asked
    by_share = [r for r in refusals if "fairness key asks more than its share" in r]
    assert by_share
    # Counted apart (the keys are not labels), and among the sheds.
    labels = 'profile="paced",upstream="fair"'
    samples = scrape(port)
    assert samples[f"squawk_admit_share_refused_total{{{labels}}}"] == len(by_share)
    assert samples[f"squawk_admit_shed_total{{{labels}}}"] >= len(refusals)


def test_without_fairness_keys_the_flood_takes_the_queue(
    paced: tuple[Daemon, Stub, int],
) -> None:
    # The same calls unkeyed: first come, first served, so the flood holds
    # the queue and the light tenant gets few of its calls.
    _, stub, _ = paced
    asked, granted, refusals = _tenants(stub, "unfair", keyed=False)
    assert asked >= 3 and granted < asked
    assert not any("fairness key" in r for r in refusals)


def test_a_fairness_key_is_bounded_and_printable(paced: tuple[Daemon, Stub, int]) -> None:
    _, stub, _ = paced
    cases: list[tuple[dict[str, Any], str]] = [
        ({"fairness_key": "k" * 257}, "fairness_key"),
        ({"fairness_key": "tenant\n2"}, "fairness_key"),
        ({"fairness_weight": 101.0}, "fairness_weight"),
        ({"fairness_weight": -1.0}, "fairness_weight"),
        ({"fairness_weight": math.nan}, "fairness_weight"),
    ]
    for fields, field in cases:
        with pytest.raises(grpc.RpcError) as raised:
            _paced_admit(stub, "bounded", **fields)
        assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert (raised.value.details() or "").startswith(f"{field}:"), raised.value.details()
