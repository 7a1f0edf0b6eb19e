"""The pod's shared upstream state over the wire: one daemon, several
executors (one channel each), the breaker, the retry budget and the shared
Retry-After cool-down as they see them.

Settings are per upstream in the policy file, short enough that the
breaker's open period is one second of real time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from conftest import Daemon, free_port, scrape, squawk, start_daemon
from health_probe import health_latencies
from squawk.daemon.config import parse_config
from squawk.daemon.server.tracking.registry import Key, Upstreams, UpstreamView
from squawk.policy import BreakerState, Outcome, Policy, TokenBucketConfig, builtin_policy
from squawk.policy import Reason as PolicyReason
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc
from squawk_client import Reason, SquawkClient, StepError, StepFailed, StepOptions, run_step_sync
from test_fleet import eventually  # isort: split

from bench.redis_server import RedisServer  # on the path once test_fleet is imported

POLICY = """\
max_upstreams: 50
profiles:
  default:
    upstreams:
      flaky:
        circuit_breaker:
          {minimum_calls: 4, window: 10s, open_for: 1s, half_open_probes: 2, close_ratio: 0.5}
      budgeted:
        retry_budget: {kind: ratio, ratio: 0.5, min_per_second: 0, ttl: 10s}
"""

Stub = pb_grpc.PolicyServiceStub


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, int]]:
    policy = tmp_path_factory.mktemp("policy") / "policy.yaml"
    policy.write_text(POLICY)
    port = free_port()
    daemon = start_daemon("--policy", str(policy), "--metrics-listen", f"127.0.0.1:{port}")
    yield daemon, port
    daemon.stop()


@pytest.fixture
def executors(pod: tuple[Daemon, int]) -> Iterator[list[Stub]]:
    """Three executors of the pod, each on its own channel."""
    channels = [grpc.insecure_channel(pod[0].target) for _ in range(3)]
    yield [Stub(c) for c in channels]
    for c in channels:
        c.close()


def _admit(stub: Stub, upstream: str) -> pb.AdmitResponse:
    reply: pb.AdmitResponse = stub.Admit(pb.AdmitRequest(upstream=upstream), timeout=5)
    return reply


def _failed(stub: Stub, upstream: str, status: int, **headers: str) -> pb.DecideRetryResponse:
    request = pb.DecideRetryRequest(attempt=1, http_status=status, upstream=upstream)
    request.headers.update({k.replace("_", "-"): v for k, v in headers.items()})
    reply: pb.DecideRetryResponse = stub.DecideRetry(request, timeout=5)
    return reply


def _ms(d: object) -> int:
    assert hasattr(d, "ToMilliseconds")
    ms: int = d.ToMilliseconds()
    return ms


def test_an_empty_upstream_is_admitted_and_never_tracked(executors: list[Stub]) -> None:
    a = executors[0]
    reply = _admit(a, "")
    assert (reply.allowed, reply.reason, reply.breaker_state, reply.probe) == (
        True,
        pb.REASON_ADMITTED,
        pb.BREAKER_STATE_CLOSED,
        False,
    )
    decision = _failed(a, "", 503)
    assert (decision.action, _ms(decision.delay)) == (pb.ACTION_RETRY, 542)
    listed = a.GetUpstreams(pb.GetUpstreamsRequest(), timeout=5).upstreams
    assert "" not in {u.upstream for u in listed}


def test_the_breaker_opens_for_the_whole_pod_then_probes_and_closes(
    pod: tuple[Daemon, int], executors: list[Stub]
) -> None:
    a, b, c = executors
    # Four failures from two executors: the window holds 4 calls, all failed.
    answers = [_failed(x, "flaky", 503) for x in (a, b, a)]
    assert [d.action for d in answers] == [pb.ACTION_RETRY] * 3
    opened = _failed(b, "flaky", 503)
    assert (opened.action, opened.reason) == (pb.ACTION_FAIL, pb.REASON_CIRCUIT_OPEN)
    # The time until it half-opens, plus a jitter of up to a fifth of it.
    assert 900 <= _ms(opened.retry_after) <= 1200
    # A third executor, which saw no failure, is refused too.
    refused = _admit(c, "flaky")
    assert (refused.allowed, refused.reason, refused.breaker_state) == (
        False,
        pb.REASON_CIRCUIT_OPEN,
        pb.BREAKER_STATE_OPEN,
    )
    assert 0 < _ms(refused.retry_after) <= 1200
    time.sleep(_ms(refused.retry_after) / 1000 + 0.05)
    # Half-open: exactly two probes, whoever asks.
    probes = [_admit(x, "flaky") for x in (a, b, c)]
    assert [(p.allowed, p.probe) for p in probes] == [(True, True), (True, True), (False, False)]
    assert probes[2].reason == pb.REASON_CIRCUIT_OPEN
    assert probes[2].breaker_state == pb.BREAKER_STATE_HALF_OPEN
    ok = pb.Outcome(upstream="flaky", success=True)
    assert a.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[ok, ok]), timeout=5).recorded == 2
    closed = _admit(c, "flaky")
    assert (closed.allowed, closed.breaker_state, closed.probe) == (
        True,
        pb.BREAKER_STATE_CLOSED,
        False,
    )
    metrics = scrape(pod[1])
    for before, after in (("CLOSED", "OPEN"), ("OPEN", "HALF_OPEN"), ("HALF_OPEN", "CLOSED")):
        labels = f'from="{before}",profile="default",to="{after}",upstream="flaky"'
        assert metrics[f"squawk_breaker_transitions_total{{{labels}}}"] == 1.0
    assert metrics['squawk_breaker_state{profile="default",upstream="flaky"}'] == 1.0  # closed


def test_one_executors_retry_after_holds_back_every_executor(executors: list[Stub]) -> None:
    a, b, _ = executors
    told = _failed(a, "cooling", 429, Retry_After="2")
    assert (told.action, _ms(told.delay)) == (pb.ACTION_RETRY, 2000)
    refused = _admit(b, "cooling")
    assert (refused.allowed, refused.reason) == (False, pb.REASON_UPSTREAM_COOLING_DOWN)
    # The time left, plus a cool-down's jitter of up to all of it.
    assert 1500 <= _ms(refused.retry_after) <= 4000
    # Another executor's own failure waits out the time left, not its backoff.
    other = _failed(b, "cooling", 503)
    assert other.action == pb.ACTION_RETRY
    assert 1500 <= _ms(other.delay) <= 4000


def test_retries_across_executors_are_capped_by_the_budget(executors: list[Stub]) -> None:
    a, b, c = executors
    for x in (a, b, c, a):
        assert _admit(x, "budgeted").allowed
    # Four admitted calls at ratio 0.5 and no floor: two retries, pod-wide.
    answers = [_failed(x, "budgeted", 503) for x in (a, b, c)]
    assert [(d.action, d.reason) for d in answers] == [
        (pb.ACTION_RETRY, pb.REASON_TRANSIENT_STATUS),
        (pb.ACTION_RETRY, pb.REASON_TRANSIENT_STATUS),
        (pb.ACTION_FAIL, pb.REASON_RETRY_BUDGET_EXHAUSTED),
    ]


@pytest.mark.parametrize(
    ("outcomes", "field"),
    [
        ([], "outcomes"),
        ([pb.Outcome(upstream="r", success=True)] * 1001, "outcomes"),
        (
            [pb.Outcome(upstream="r", success=True)] * 2
            + [pb.Outcome(upstream="r", http_status=700)],
            "outcomes[2].http_status",
        ),
        ([pb.Outcome(upstream="u" * 257)], "outcomes[0].upstream"),
    ],
    ids=["none", "over 1,000", "a bad status", "a long name"],
)
def test_a_bad_report_is_refused_whole_naming_the_field(
    executors: list[Stub], outcomes: list[pb.Outcome], field: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        executors[0].ReportOutcome(pb.ReportOutcomeRequest(outcomes=outcomes), timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith(field + ":")
    listed = executors[0].GetUpstreams(pb.GetUpstreamsRequest(), timeout=5).upstreams
    assert "r" not in {u.upstream for u in listed}


def test_get_upstreams_refuses_an_unknown_profile(executors: list[Stub]) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        executors[0].GetUpstreams(pb.GetUpstreamsRequest(profile="nope"), timeout=5)
    assert (caught.value.details() or "").startswith("profile:")


# An hour's Retry-After cools for the hour (max_cool_down), as in the audit.
CROWDED = """\
max_upstreams: 50
profiles:
  default:
    max_cool_down: 2h
    upstreams:
      pinned-api: {}
  slow: {base: default, max_cool_down: 2h}
"""


@contextmanager
def _daemon(tmp_path: Path, policy: str) -> Iterator[tuple[Stub, int]]:
    """A daemon of its own running `policy`, with metrics: (a stub, the metrics port)."""
    path = tmp_path / "policy.yaml"
    path.write_text(policy)
    port = free_port()
    daemon = start_daemon("--policy", str(path), "--metrics-listen", f"127.0.0.1:{port}")
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            yield Stub(channel), port
    finally:
        daemon.stop()


def _report(stub: Stub, outcomes: list[pb.Outcome]) -> None:
    for i in range(0, len(outcomes), 1000):
        report = pb.ReportOutcomeRequest(outcomes=outcomes[i : i + 1000])
        assert stub.ReportOutcome(report, timeout=30).recorded == len(report.outcomes)


def _listed(stub: Stub, **fields: Any) -> list[pb.UpstreamState]:
    """Every page of GetUpstreams."""
    request, states = pb.GetUpstreamsRequest(**fields), list[pb.UpstreamState]()
    while True:
        reply = stub.GetUpstreams(request, timeout=30)
        states += reply.upstreams
        if not reply.next_page_token:
            return states
        request.page_token = reply.next_page_token


def _failure(upstream: str, profile: str = "", status: int = 503, wait: str = "") -> pb.Outcome:
    out = pb.Outcome(upstream=upstream, profile=profile, http_status=status)
    if wait:
        out.headers["Retry-After"] = wait
    return out


def test_tracked_upstreams_are_bounded_and_no_flood_drops_a_cautious_one(
    tmp_path: Path,
) -> None:
    with _daemon(tmp_path, CROWDED) as (stub, port):
        _report(
            stub,
            [_failure("closed-victim", "slow")] * 9  # one failure short of opening
            + [_failure("open-victim", "slow")] * 10
            + [_failure("cool-victim", "slow", 429, "3600")]
            + [_failure("pinned-api")] * 9,
        )
        # A thousand names with a failure each, then a thousand cooling down.
        _report(stub, [_failure(f"junk-{i}", "slow") for i in range(1000)])
        _report(stub, [_failure(f"cool-{i}", "slow", 429, "3600") for i in range(1000)])
        late = stub.Admit(pb.AdmitRequest(upstream="late", profile="slow"), timeout=5)
        states = _listed(stub)
        # The two floods' states each held something a fresh one would not.
        _report(stub, [_failure(n, p) for n, p in (("closed-victim", "slow"), ("pinned-api", ""))])
        after = {(u.profile, u.upstream): u for u in _listed(stub)}
        untracked = scrape(port)['squawk_untracked_calls_total{profile="slow"}']
    # The floods' untracked names failed in the profile's overflow state,
    # which a new name shares: it is refused while they fail, not let through.
    assert (late.allowed, late.reason) == (False, pb.REASON_CIRCUIT_OPEN)
    assert len(states) == 51  # max_upstreams callers' names and the policy file's one
    assert states[0].upstream == "pinned-api"
    assert "late" not in {u.upstream for u in states}
    assert after["slow", "closed-victim"].breaker_state == pb.BREAKER_STATE_OPEN
    assert after["slow", "open-victim"].breaker_state == pb.BREAKER_STATE_OPEN
    assert after["slow", "cool-victim"].cool_down_left.ToSeconds() > 3500
    assert after["default", "pinned-api"].breaker_state == pb.BREAKER_STATE_OPEN
    assert untracked >= 1950  # each junk name past the first 46, and `late`


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_million_distinct_upstreams_keep_memory_bounded() -> None:
    clock = [0.0]
    upstreams = Upstreams(builtin_policy(), clock=lambda: clock[0])
    profile = builtin_policy().profile("default")
    for i in range(1_000_000):
        if i == 50_000:
            warm = _rss_bytes()
        clock[0] = i / 1000
        upstreams.admit(profile, f"upstream-{i}")
    grown = _rss_bytes() - warm
    assert len(upstreams) == 10_000  # the default max_upstreams, oldest dropped
    # Unbounded, 950,000 more states would take hundreds of MB.
    assert grown < 32 * 2**20, f"RSS grew {grown / 2**20:.1f} MiB"
    views = upstreams.views()
    assert [v.upstream for v in views[-2:]] == ["upstream-999998", "upstream-999999"]


def test_the_runner_asks_before_each_dispatch_and_reports_success(
    pod: tuple[Daemon, int], executors: list[Stub]
) -> None:
    calls: list[int] = []

    def step(n: int) -> str:
        calls.append(n)
        if len(calls) == 1:
            raise StepError("busy", http_status=503)
        return "ok"

    with SquawkClient(pod[0].target, call_timeout=timedelta(seconds=5)) as client:
        result = run_step_sync(
            client, step, 1, options=StepOptions(upstream="runner-ok"), sleep=lambda s: None
        )
    assert (result, calls) == ("ok", [1, 1])
    (state,) = [
        u
        for u in executors[0].GetUpstreams(pb.GetUpstreamsRequest(), timeout=5).upstreams
        if u.upstream == "runner-ok"
    ]
    # The failure (recorded by DecideRetry) and the reported success.
    assert (state.window_calls, state.window_failures) == (2, 1)


def test_the_runner_waits_out_another_executors_retry_after(
    pod: tuple[Daemon, int], executors: list[Stub]
) -> None:
    _failed(executors[0], "runner-cool", 429, Retry_After="2")
    waits: list[float] = []
    calls: list[int] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    with SquawkClient(pod[0].target, call_timeout=timedelta(seconds=5)) as client:
        options = StepOptions(upstream="runner-cool", deadline=timedelta(milliseconds=500))
        with pytest.raises(StepFailed) as failed:
            run_step_sync(client, calls.append, 1, options=options, sleep=sleep)
        assert failed.value.decision.reason == Reason.UPSTREAM_COOLING_DOWN
        assert (failed.value.attempts, calls, waits) == (0, [], [])
        run_step_sync(
            client, calls.append, 1, options=StepOptions(upstream="runner-cool"), sleep=sleep
        )
    assert calls == [1]
    assert len(waits) == 1 and 1.0 < waits[0] <= 4.0  # the time left, jittered by up to as much


def test_the_runner_fails_open_without_the_daemon() -> None:
    with SquawkClient(f"127.0.0.1:{free_port()}") as client:
        admission = client.admit("anywhere")
        assert (admission.allowed, admission.fallback) == (True, True)
        assert run_step_sync(client, lambda n: n + 1, 1, options=StepOptions(upstream="x")) == 2
    # One admission above, then the runner's admission and its report (sent
    # in a batch, by close at the latest), which the daemon never got.
    assert (client.fallback_count, client.dropped_outcomes) == (3, 1)


def test_the_cli_prints_the_pods_upstreams_as_a_table(
    pod: tuple[Daemon, int], executors: list[Stub]
) -> None:
    failed = pb.Outcome(upstream="cli-shown", http_status=502)
    executors[0].ReportOutcome(pb.ReportOutcomeRequest(outcomes=[failed]), timeout=5)
    done = subprocess.run(
        [sys.executable, "-m", "squawk.daemon.cli", "upstreams", "--target", pod[0].target],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    header, *rows = done.stdout.splitlines()
    assert header.split() == [
        "PROFILE",
        "UPSTREAM",
        "BREAKER",
        "FOR",
        "CALLS",
        "FAILURES",
        "RETRIES",
        "COOL-DOWN",
        "PACE",
        "RATE",
        "QUEUE",
        "IN-FLIGHT",
        "PACED",
        "SHED",
        "THROTTLED",
    ]
    (row,) = [r.split() for r in rows if r.split()[1] == "cli-shown"]
    assert row[:3] == ["default", "cli-shown", "CLOSED"]
    assert row[4:7] == ["1", "1", "100"]
    # Nothing paces it: no source, no rate, no queue, nothing paced or shed;
    # a 502 is no throttle.
    assert row[8:] == ["none", "-", "0.000s", "0", "0", "0", "0"]


def test_a_client_decision_says_when_the_breaker_half_opens(
    pod: tuple[Daemon, int], executors: list[Stub]
) -> None:
    with SquawkClient(pod[0].target, call_timeout=timedelta(seconds=5)) as client:
        request = pb.DecideRetryRequest(attempt=1, http_status=503, upstream="flaky-client")
        decisions = [client.decide_retry(request) for _ in range(12)]
    # The default breaker: 10 calls, all failed, open it for 30 s.
    assert decisions[8].retry_after is None
    opened = decisions[9]
    assert opened.reason == Reason.CIRCUIT_OPEN
    assert opened.retry_after is not None
    # The time until it half-opens, plus a jitter of at most 5 s.
    assert timedelta(seconds=29) < opened.retry_after <= timedelta(seconds=35)


def test_every_reported_transition_is_one_the_breaker_has() -> None:
    clock = [0.0]
    seen: list[tuple[str, str]] = []
    upstreams = Upstreams(
        builtin_policy(),
        clock=lambda: clock[0],
        on_transition=lambda t: seen.append((t.before.name, t.after.name)),
    )
    default = builtin_policy().profile("default")
    # One probe: a single outcome both half-opens (time) and closes (the probe).
    profile = replace(default, circuit_breaker=replace(default.circuit_breaker, half_open_probes=1))
    for _ in range(10):  # the default breaker: 10 calls, all failed
        upstreams.record(profile, "api", Outcome(success=False, http_status=503))
    clock[0] = 31.0  # past the 30 s open period, nobody asked in between
    upstreams.record(profile, "api", Outcome(success=True))
    assert seen == [("CLOSED", "OPEN"), ("OPEN", "HALF_OPEN"), ("HALF_OPEN", "CLOSED")]


def test_a_listing_of_long_names_stays_within_a_clients_limit() -> None:
    daemon = start_daemon()  # the default policy: up to 10,000 upstreams
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = Stub(channel)
            for batch in range(10):  # 10,000 names of 256 four-byte characters
                outcomes = [
                    pb.Outcome(upstream=f"{batch:02}{i:04}" + "😀" * 250, success=True)
                    for i in range(1000)
                ]
                report = pb.ReportOutcomeRequest(outcomes=outcomes)
                assert stub.ReportOutcome(report, timeout=30).recorded == 1000
            reply = stub.GetUpstreams(pb.GetUpstreamsRequest(), timeout=30)
        table = squawk("upstreams", "--target", daemon.target)
    finally:
        daemon.stop()
    assert reply.truncated
    assert 0 < len(reply.upstreams) < 10_000
    assert reply.ByteSize() < 4 << 20
    # The CLI reads every page.
    header, *rows = table.stdout.splitlines()
    assert (table.returncode, header.split()[:2], len(rows)) == (0, ["PROFILE", "UPSTREAM"], 10_000)


def test_a_name_cannot_forge_a_row_of_the_cli_table(pod: tuple[Daemon, int]) -> None:
    forged = "evil\ndefault  payments-api  CLOSED\x1b[2J"
    with grpc.insecure_channel(pod[0].target) as channel:
        failed = pb.Outcome(upstream=forged, http_status=502)
        Stub(channel).ReportOutcome(pb.ReportOutcomeRequest(outcomes=[failed]), timeout=5)
    done = subprocess.run(
        [sys.executable, "-m", "squawk.daemon.cli", "upstreams", "--target", pod[0].target],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "\x1b" not in done.stdout
    assert not any(line.startswith("default  payments-api") for line in done.stdout.splitlines())
    assert "evil\\ndefault" in done.stdout


def test_churning_names_does_not_reset_an_open_breaker() -> None:
    clock = [0.0]
    policy = replace(builtin_policy(), max_upstreams=100)
    upstreams = Upstreams(policy, clock=lambda: clock[0])
    profile = policy.profile("default")
    for _ in range(10):  # the default breaker opens: 10 calls, all failed
        upstreams.record(profile, "victim", Outcome(success=False, http_status=503))
    assert not upstreams.admit(profile, "victim").allowed
    for i in range(1000):  # the oldest key, ten times over
        upstreams.admit(profile, f"churn-{i}")
    assert len(upstreams) == 100
    refused = upstreams.admit(profile, "victim")
    assert (refused.allowed, refused.breaker_state) == (False, BreakerState.OPEN)


def test_a_secret_in_an_upstream_name_is_not_listed(executors: list[Stub]) -> None:
    secret = "sk-live-" + "A1b2C3d4" * 4
    assert _admit(executors[0], f"api password={secret}").allowed
    listed = executors[1].GetUpstreams(pb.GetUpstreamsRequest(), timeout=5).upstreams
    shown = [u.upstream for u in listed if u.upstream.startswith("api password=")]
    assert shown == ["api password=[REDACTED]"]
    assert all(secret not in u.upstream for u in listed)


# The registry's bound never makes an upstream less cautious (issue 22, item
# 10): a new name takes only an idle key's place (a fresh state would behave
# exactly the same), or is answered from a fresh state it does not keep.

_FLOOD_MAX = 100
_TOKENS = TokenBucketConfig(max_tokens=4, token_ratio=0.1)
_OUTAGE = Outcome(success=False, http_status=503)
_HOUR_429 = Outcome(success=False, http_status=429, retry_after=timedelta(hours=1))


def _registry(
    clock: list[float], forgot: list[Key] | None = None, untracked: list[str] | None = None
) -> tuple[Upstreams, Policy]:
    base = builtin_policy()
    tokens = replace(base.profile("default"), name="tokens", retry_budget=_TOKENS)
    policy = replace(base.with_profile(tokens), max_upstreams=_FLOOD_MAX)
    hooks: dict[str, Any] = {}
    if forgot is not None:
        hooks["on_forget"] = lambda p, u: forgot.append((p, u))
    if untracked is not None:
        hooks["on_untracked"] = untracked.append
    upstreams = Upstreams(policy, clock=lambda: clock[0], **hooks)
    return upstreams, policy


def _closed_with_counts(u: Upstreams, p: Policy, clock: list[float]) -> None:
    for _ in range(9):  # one short of the default breaker's 10
        u.record(p.profile("default"), "payments-api", _OUTAGE)


def _open(u: Upstreams, p: Policy, clock: list[float]) -> None:
    for _ in range(10):
        u.record(p.profile("default"), "payments-api", _OUTAGE)


def _half_open_with_probes_taken(u: Upstreams, p: Policy, clock: list[float]) -> None:
    _open(u, p, clock)
    clock[0] += 30.0
    for _ in range(2):  # two of its five probe slots
        assert u.admit(p.profile("default"), "payments-api").probe


def _cooling_down(u: Upstreams, p: Policy, clock: list[float]) -> None:
    u.record(p.profile("default"), "payments-api", _HOUR_429)


def _drained_bucket(u: Upstreams, p: Policy, clock: list[float]) -> None:
    for _ in range(2):  # 4 tokens to 2: at half, retries stop
        u.record(
            p.profile("tokens"), "payments-api", Outcome(success=False, transport_failure=True)
        )


def _successes(name: str) -> list[Outcome]:
    return [Outcome(success=True)]


def _ten_failures(name: str) -> list[Outcome]:
    return [_OUTAGE] * 10


def _long_retry_after(name: str) -> list[Outcome]:
    return [_HOUR_429]


@pytest.mark.parametrize(
    "victim",
    [_closed_with_counts, _open, _half_open_with_probes_taken, _cooling_down, _drained_bucket],
)
@pytest.mark.parametrize("flood", [_successes, _ten_failures, _long_retry_after])
def test_a_flood_of_names_leaves_every_state_that_is_not_idle_as_it_was(
    victim: Callable[[Upstreams, Policy, list[float]], None],
    flood: Callable[[str], list[Outcome]],
) -> None:
    flooded_clock, calm_clock = [1000.0], [1000.0]
    flooded, policy = _registry(flooded_clock)
    calm, _ = _registry(calm_clock)
    victim(flooded, policy, flooded_clock)
    victim(calm, policy, calm_clock)
    (key,) = [(v.profile, v.upstream) for v in flooded.views()]
    # Ten times the bound, in every profile, a millisecond apart: each new
    # name looks for an idle key again and again as time passes.
    for i in range(10 * _FLOOD_MAX):
        flooded_clock[0] += 0.001
        for outcome in flood(f"junk-{i}"):
            flooded.record(policy.profile(("default", "tokens")[i % 2]), f"junk-{i}", outcome)
    calm_clock[0] = flooded_clock[0]
    assert len(flooded) <= _FLOOD_MAX
    assert _view(flooded, key) == _view(calm, key)


def _view(upstreams: Upstreams, key: Key) -> list[UpstreamView]:
    return [v for v in upstreams.views() if (v.profile, v.upstream) == key]


def test_an_idle_key_makes_room_for_a_new_name_and_is_forgotten() -> None:
    clock, forgot, untracked = [0.0], list[Key](), list[str]()
    upstreams, policy = _registry(clock, forgot, untracked)
    default = policy.profile("default")
    for i in range(_FLOOD_MAX):
        upstreams.record(default, f"used-{i}", Outcome(success=True))
    clock[0] = 59.0  # still in the breaker's 60 s window: not idle
    upstreams.record(default, "new-0", Outcome(success=True))
    assert (len(upstreams), untracked, forgot) == (_FLOOD_MAX, ["default"], [])
    clock[0] = 61.0  # out of it: a fresh state would behave the same
    upstreams.record(default, "new-1", Outcome(success=True))
    # The 16 keys looked at in vain at 59 s went to the back of the line.
    assert forgot == [("default", "used-16")]
    assert [v.upstream for v in upstreams.views()][-1] == "new-1"


def test_untracked_names_share_their_profiles_overflow_state() -> None:
    """A full registry must not leave a failing new upstream unprotected: its
    failures, and those of every other name the pod could not track, open
    one overflow breaker per profile. No cool-down is shared there."""
    clock, untracked = [0.0], list[str]()
    upstreams, policy = _registry(clock, untracked=untracked)
    default = policy.profile("default")
    for i in range(_FLOOD_MAX):
        for _ in range(10):
            upstreams.record(default, f"open-{i}", _OUTAGE)
    # Another name's Retry-After cools nothing for the names after it.
    upstreams.record(default, "hinted", _HOUR_429)
    assert upstreams.admit(default, "first-new").allowed
    for _ in range(10):
        upstreams.record(default, "late", _OUTAGE)
    late = upstreams.admit(default, "late")
    other = upstreams.admit(default, "other-new")
    assert (late.allowed, late.reason) == (False, PolicyReason.CIRCUIT_OPEN)
    assert (other.allowed, other.reason) == (False, PolicyReason.CIRCUIT_OPEN)
    assert {"late", "other-new", "hinted"}.isdisjoint(v.upstream for v in upstreams.views())
    assert set(untracked) == {"default"} and len(untracked) == 14
    # Each profile has its own: the flood of "default" does not refuse "llm".
    assert upstreams.admit(policy.profile("llm"), "late").allowed


# The overflow state paces nothing: one untracked name's quota, throttles or
# the profile's declared rate would otherwise pace every other untracked
# name of the profile together. Two callers' names in use fill the registry.
OVERFLOW = """\
max_upstreams: 2
profiles:
  learning:
    circuit_breaker: {enabled: false}
  rated:
    rate_limit: {rate: 1}
"""
_GITHUB_SPENT = {
    "x-ratelimit-limit": "5000",
    "x-ratelimit-remaining": "0",
    "x-ratelimit-reset": "300",
}


def _nothing_left(stub: Stub) -> str:
    # One untracked name's "nothing left until 5 minutes from now".
    _report(
        stub,
        [pb.Outcome(upstream="spent", profile="learning", success=True, headers=_GITHUB_SPENT)],
    )
    return "learning"


def _throttled(stub: Stub) -> str:
    # One untracked name's throttles, enough to learn a rate from.
    calls = [pb.Outcome(upstream="throttled", profile="learning", success=True)] * 20
    _report(
        stub, calls + [pb.Outcome(upstream="throttled", profile="learning", http_status=429)] * 20
    )
    return "learning"


def _declared(stub: Stub) -> str:
    # One untracked name's call under the profile's 1 call/s.
    assert stub.Admit(pb.AdmitRequest(upstream="first", profile="rated"), timeout=5).allowed
    return "rated"


def _slowed(stub: Stub) -> str:
    # One untracked name's latency doubling: enough for a concurrency limit of 2.
    fast = pb.Outcome(
        upstream="slowed", profile="learning", success=True, latency=Duration(nanos=10**7)
    )
    slow = pb.Outcome(
        upstream="slowed", profile="learning", success=True, latency=Duration(seconds=1)
    )
    _report(stub, [fast] + [slow] * 30)
    return "learning"


@pytest.mark.parametrize("other", [_nothing_left, _throttled, _slowed, _declared])
def test_no_untracked_name_paces_another(tmp_path: Path, other: Callable[[Stub], str]) -> None:
    with _daemon(tmp_path, OVERFLOW) as (stub, port):
        _report(stub, [pb.Outcome(upstream=f"busy-{i}", success=True) for i in range(2)])
        profile = other(stub)
        deadline = Duration(seconds=10)
        replies = [
            stub.Admit(
                pb.AdmitRequest(upstream=f"bystander-{i}", profile=profile, deadline=deadline),
                timeout=5,
            )
            for i in range(3)
        ]
        listed = {u.upstream for u in _listed(stub)}
        untracked = scrape(port)[f'squawk_untracked_calls_total{{profile="{profile}"}}']
    assert listed == {"busy-0", "busy-1"}
    assert untracked >= 3
    assert [(r.allowed, r.wait.ToMilliseconds()) for r in replies] == [(True, 0)] * 3


def test_the_policy_files_names_are_tracked_first_and_never_dropped() -> None:
    clock = [0.0]

    def policy(pinned: bool) -> Policy:
        entry = "{upstreams: {payments-api: {}}}" if pinned else "{}"
        return parse_config(f"max_upstreams: 2\nprofiles:\n  default: {entry}\n").policy

    upstreams = Upstreams(policy(True), clock=lambda: clock[0])
    default = policy(True).profile("default")
    assert [(v.upstream, v.snapshot.calls) for v in upstreams.views()] == [("payments-api", 0)]
    for _ in range(9):
        upstreams.record(default, "payments-api", _OUTAGE)
    for i in range(100):  # names that cannot be dropped: their breakers open
        for _ in range(10):
            upstreams.record(default, f"junk-{i}", _OUTAGE)
    assert len(upstreams) == 3  # max_upstreams callers' names, and the policy file's
    upstreams.record(default, "payments-api", _OUTAGE)
    assert upstreams.views()[0].snapshot.breaker_state is BreakerState.OPEN
    # Gone from the file, it is one of the callers' names, state and all.
    upstreams.use_policy(policy(False))
    assert upstreams.views()[0].upstream == "payments-api"
    assert not upstreams.admit(policy(False).profile("default"), "payments-api").allowed


def test_a_page_token_goes_on_after_its_page_while_keys_come_and_go() -> None:
    clock = [0.0]
    upstreams, policy = _registry(clock)
    default, tokens = policy.profile("default"), policy.profile("tokens")
    for i in range(6):
        upstreams.record(default if i % 2 else tokens, f"u{i}", Outcome(success=True))
    first, more = upstreams.page(size=2)
    assert ([k for _, k in first], more) == ([("tokens", "u0"), ("default", "u1")], True)
    clock[0] = 61.0  # every key idle: a new name drops the oldest, u0
    upstreams.record(default, "u6", Outcome(success=True))
    upstreams.record(default, "u1", Outcome(success=True))  # used: still where it was
    second, more = upstreams.page(first[-1][0], size=3)
    assert ([k[1] for _, k in second], more) == (["u2", "u3", "u4"], True)
    rest, more = upstreams.page(second[-1][0], size=3, profile="default")
    assert ([k[1] for _, k in rest], more) == (["u5", "u6"], False)
    assert [k for _, k in upstreams.page(profile="tokens", upstream="u2")[0]] == [("tokens", "u2")]


LABELLED = """\
max_upstreams: 200
profiles:
  default:
    upstreams:
      pinned-api: {}
  quick:
    circuit_breaker: {minimum_calls: 1, open_for: 1s, half_open_probes: 1}
"""


def _metrics_text(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text: str = reply.read().decode()
    return text


def test_the_policy_files_names_have_metric_labels_whatever_the_callers_took(
    tmp_path: Path,
) -> None:
    with _daemon(tmp_path, LABELLED) as (stub, port):
        _report(stub, [_failure(f"caller-{i:03}", "quick") for i in range(150)])
        _report(stub, [_failure("pinned-api")] * 10)
        metrics = scrape(port)
    assert metrics['squawk_breaker_state{profile="default",upstream="pinned-api"}'] == 2.0  # open
    quick = [k for k in metrics if k.startswith('squawk_breaker_state{profile="quick"')]
    assert len(quick) == 100  # MAX_UPSTREAM_LABELS of the callers' names
    other = (
        'squawk_breaker_transitions_total{from="CLOSED",profile="quick",to="OPEN",upstream="other"}'
    )
    assert metrics[other] == 50.0


def test_a_label_value_carries_no_control_character(tmp_path: Path) -> None:
    name = "esc\x1b[2J\r\x00\u2028\u0085api"
    with _daemon(tmp_path, LABELLED) as (stub, port):
        _report(stub, [_failure(name, "quick")])
        text = _metrics_text(port)
    assert not {"\x1b", "\r", "\x00", "\u2028", "\u0085"} & set(text)
    # Escaped as Python writes it, each backslash then doubled by the text format.
    assert 'upstream="esc\\\\x1b[2J\\\\r\\\\x00\\\\u2028\\\\x85api"' in text


def test_a_dropped_key_takes_its_metric_series_with_it(tmp_path: Path) -> None:
    policy = "max_upstreams: 1\nprofiles:\n" + LABELLED.split("profiles:\n", 1)[1]
    with _daemon(tmp_path, policy) as (stub, port):
        _report(stub, [_failure("gone-api", "quick")])  # opens for 1 s
        assert 'upstream="gone-api"' in _metrics_text(port)
        time.sleep(1.1)
        # The probe closes it afresh: idle, so a new name takes its place.
        _report(stub, [pb.Outcome(upstream="gone-api", profile="quick", success=True)])
        _report(stub, [pb.Outcome(upstream="next-api", profile="quick", success=True)])
        listed = [u.upstream for u in _listed(stub, profile="quick")]
        text = _metrics_text(port)
    assert listed == ["next-api"]
    assert 'upstream="gone-api"' not in text


def test_a_dropped_name_called_other_leaves_the_other_series(tmp_path: Path) -> None:
    # "other" is also the label of every name past the first hundred: a
    # caller's name "other", dropped, removed the series they all count in.
    policy = "max_upstreams: 1\nprofiles:\n" + LABELLED.split("profiles:\n", 1)[1]
    opened = (
        'squawk_breaker_transitions_total{from="CLOSED",profile="quick",to="OPEN",upstream="other"}'
    )
    with _daemon(tmp_path, policy) as (stub, port):
        _report(stub, [_failure("other", "quick")])  # opens for 1 s
        time.sleep(1.1)
        _report(stub, [pb.Outcome(upstream="other", profile="quick", success=True)])
        _report(stub, [pb.Outcome(upstream="next-api", profile="quick", success=True)])
        listed = [u.upstream for u in _listed(stub, profile="quick")]
        metrics = scrape(port)
    assert listed == ["next-api"]
    assert metrics[opened] == 1.0


def test_a_fleet_transition_of_an_untracked_name_takes_no_label(tmp_path: Path) -> None:
    # The fleet's breaker can move for names the pod could not track; their
    # labels were never given back, so junk names took every label slot.
    server = RedisServer().start()
    path = tmp_path / "policy.yaml"
    path.write_text(
        f"max_upstreams: 1\nstate: {{store: redis, url: '{server.url}', min_pods: 1}}\n"
        + "profiles:\n"
        + LABELLED.split("profiles:\n", 1)[1]
    )
    port = free_port()
    daemon = start_daemon("--policy", str(path), "--metrics-listen", f"127.0.0.1:{port}")
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            stub = Stub(channel)
            _report(stub, [_failure("busy", "quick")])  # tracked, and open: not idle
            for i in range(5):
                stub.DecideRetry(
                    pb.DecideRetryRequest(
                        attempt=1, http_status=503, upstream=f"junk-{i}", profile="quick"
                    ),
                    timeout=5,
                )

            def fleet() -> list[str]:
                text = _metrics_text(port)
                return [line for line in text.splitlines() if line.startswith("squawk_fleet_")]

            eventually(
                lambda: any('upstream="other"' in line for line in fleet()), "the fleet opens"
            )
            lines = fleet()
    finally:
        daemon.stop()
        server.stop()
    assert not any("junk-" in line for line in lines), lines


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, Stub]]:
    """A daemon of the built-in registry bound (max_upstreams 10,000), whose
    cool-downs may last the hour the audit used, after the audit's floods:
    `payments-api` opened and `billing-api` cooling down for an hour, then
    10,016 names with a 429 and an hour's Retry-After each (11 calls), then
    10,016 names with ten failures each (101 calls)."""
    path = tmp_path_factory.mktemp("full") / "policy.yaml"
    path.write_text("profiles:\n  default:\n    max_cool_down: 2h\n")
    daemon = start_daemon("--policy", str(path))
    channel = grpc.insecure_channel(daemon.target)
    stub = Stub(channel)
    _report(stub, [_failure("payments-api")] * 10 + [_failure("billing-api", "", 429, "3600")])
    _report(stub, [_failure(f"cool-{i}", "", 429, "3600") for i in range(10_016)])
    _report(stub, [_failure(f"open-{i}") for i in range(10_016) for _ in range(10)])
    yield daemon, stub
    channel.close()
    daemon.stop()


def test_the_audits_floods_leave_an_open_breaker_and_a_cool_down_as_they_were(
    full: tuple[Daemon, Stub],
) -> None:
    _, stub = full
    opened = stub.Admit(pb.AdmitRequest(upstream="payments-api"), timeout=5)
    cooling = stub.Admit(pb.AdmitRequest(upstream="billing-api"), timeout=5)
    assert (opened.allowed, opened.reason) == (False, pb.REASON_CIRCUIT_OPEN)
    assert (cooling.allowed, cooling.reason) == (False, pb.REASON_UPSTREAM_COOLING_DOWN)
    assert cooling.retry_after.ToSeconds() > 3000


def test_get_upstreams_pages_through_a_full_registry(full: tuple[Daemon, Stub]) -> None:
    _, stub = full
    first = stub.GetUpstreams(pb.GetUpstreamsRequest(page_size=3), timeout=5)
    assert [u.upstream for u in first.upstreams] == ["payments-api", "billing-api", "cool-0"]
    assert first.truncated and first.next_page_token
    rest = _listed(stub, page_token=first.next_page_token)
    names = [u.upstream for u in first.upstreams] + [u.upstream for u in rest]
    assert len(names) == len(set(names)) == 10_000
    (one,) = _listed(stub, upstream="cool-7", profile="default")
    assert one.cool_down_left.ToSeconds() > 3000
    assert _listed(stub, upstream="open-7") == []  # never tracked: no room


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"page_size": -1}, "page_size"),
        ({"page_token": "x"}, "page_token"),
        ({"upstream": "u" * 257}, "upstream"),
    ],
)
def test_a_bad_listing_request_is_refused_naming_the_field(
    full: tuple[Daemon, Stub], fields: dict[str, Any], field: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        full[1].GetUpstreams(pb.GetUpstreamsRequest(**fields), timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith(f"{field}:")


def test_health_answers_while_get_upstreams_is_hammered_on_a_full_registry(
    full: tuple[Daemon, Stub],
) -> None:
    daemon, _ = full
    options = [("grpc.max_receive_message_length", 64 << 20)]

    def hammer() -> None:
        # Eight callers, each listing in a loop as the audit's did: unpaged
        # callers, so each call is a full page of 1,000.
        with grpc.insecure_channel(daemon.target, options=options) as channel:
            stub = Stub(channel)
            for _ in range(40):
                assert stub.GetUpstreams(pb.GetUpstreamsRequest(), timeout=30).upstreams

    def load() -> None:
        with ThreadPoolExecutor(8) as pool:
            for done in [pool.submit(hammer) for _ in range(8)]:
                done.result()

    latencies = health_latencies(daemon.target, load)
    assert len(latencies) >= 20
    # The defect held health for over a second (p99 1.28 s, max 2.47 s);
    # now its median is 13-18 ms and its p99 20-55 ms on a 2-core machine. The bound leaves room for
    # other jobs on a shared one (one run with them passed 100 ms) and still
    # fails a listing that holds the loop.
    p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
    assert (p50 < 0.1, p99 < 0.25) == (True, True), latencies[-10:]


# A flood of rate-limit headers: as many as the boundary lets in on each
# outcome, of the forms the parser reads, 3.2 MB a report.
_FLOOD_NAMES = [
    f"{family}-{i}"
    for i in range(4)
    for family in (
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
        "x-ratelimit-limit-tokens",
        "x-ratelimit-remaining-tokens",
        "x-ratelimit-reset-tokens",
        "anthropic-ratelimit-requests-limit",
        "anthropic-ratelimit-requests-remaining",
        "anthropic-ratelimit-requests-reset",
        "ratelimit",
        "ratelimit-policy",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "x-rate-limit-limit",
        "x-rate-limit-remaining",
    )
]


def _flood(marker: str) -> pb.ReportOutcomeRequest:
    """1,000 outcomes: the first cools `marker` for a minute, the last ten
    open its breaker (the default one: 10 calls, all failed), and the 988
    between carry 64 rate-limit headers each. An Admit of `marker` refused
    for the cool-down with its breaker still closed was answered while the
    report was being recorded."""
    headers = {name: "9" * 16 for name in _FLOOD_NAMES}
    assert len(headers) == 64
    flooded = pb.Outcome(upstream="flooded", success=True, headers=headers)
    cooled = pb.Outcome(upstream=marker, http_status=429, headers={"Retry-After": "60"})
    failed = pb.Outcome(upstream=marker, http_status=503)
    request = pb.ReportOutcomeRequest(outcomes=[cooled] + [flooded] * 989 + [failed] * 10)
    assert len(request.outcomes) == 1000 and request.ByteSize() < 4 << 20
    return request


def test_another_callers_admit_is_answered_while_a_header_flood_is_recorded() -> None:
    daemon = start_daemon()
    try:
        with grpc.insecure_channel(daemon.target) as a, grpc.insecure_channel(daemon.target) as b:
            flooder, caller = Stub(a), Stub(b)
            seen: set[tuple[bool, int, int]] = set()
            # Floods, each with a marker of its own, until one is seen in
            # the middle: the caller's Admits may all fall outside one
            # flood's recording (on a busy machine, 20 floods once did).
            for n in range(60):
                marker, flooding = f"marker-{n}", threading.Event()
                flooding.set()

                def ask(marker: str = marker, flooding: threading.Event = flooding) -> None:
                    while flooding.is_set():
                        reply = caller.Admit(pb.AdmitRequest(upstream=marker), timeout=30)
                        seen.add((reply.allowed, reply.reason, reply.breaker_state))

                with ThreadPoolExecutor(1) as pool:
                    asking = pool.submit(ask)
                    try:
                        assert flooder.ReportOutcome(_flood(marker), timeout=60).recorded == 1000
                    finally:
                        flooding.clear()
                    asking.result()
                if (False, pb.REASON_UPSTREAM_COOLING_DOWN, pb.BREAKER_STATE_CLOSED) in seen:
                    break
            after = caller.Admit(pb.AdmitRequest(upstream=marker), timeout=5)
    finally:
        daemon.stop()
    # Answered after the flood's first outcome was recorded, before its last.
    assert (False, pb.REASON_UPSTREAM_COOLING_DOWN, pb.BREAKER_STATE_CLOSED) in seen
    assert (after.reason, after.breaker_state) == (
        pb.REASON_UPSTREAM_COOLING_DOWN,
        pb.BREAKER_STATE_OPEN,
    )
