"""The peers' own scenarios for failure counting, the budgets' ranges and
half-open probes, replayed over the wire against a real daemon.

Each case names the peer test it comes from. The peer's client calls become
the executor's calls: an attempt that fails goes to DecideRetry with its
upstream (which records the failure, then guards the retry), a success is
reported with ReportOutcome, a dispatch asks Admit first, and what the
budget holds is read back with GetUpstreams. Every upstream below has its
own state, so the cases do not meet; the breaker is off where only a budget
is under test.
"""

from __future__ import annotations

import hashlib
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import redis

from conftest import Daemon, start_daemon
from squawk.daemon.config import ConfigError, parse_config
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

# bench/ holds the Redis server the fleet tests share.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench.redis_server import RedisServer

Stub = pb_grpc.PolicyServiceStub
# The upstreams whose breakers the half-open cases need opened.
_HALF_OPEN = ("r4j-release", "r4j-ignore")

_OFF = "circuit_breaker: {enabled: false}"


def _tb(max_tokens: float, token_ratio: float) -> str:
    """A token bucket's settings, with the breaker off."""
    bucket = f"kind: token_bucket, max_tokens: {max_tokens:g}, token_ratio: {token_ratio:g}"
    return f"{{{_OFF}, retry_budget: {{{bucket}}}}}"


POLICY = f"""\
profiles:
  default:
    max_attempts: 4
    upstreams:
      # grpc-go TestRetryThrottling: maxTokens 10, tokenRatio 0.5.
      go-throttle: {_tb(10, 0.5)}
      # grpc-core ServerRetryThrottleData.Basic: 4 tokens, 1.6 per success.
      core-basic: {_tb(4, 1.6)}
      # gRFC A6: a decimal maxTokens, and its bound.
      decimal: {_tb(2.5, 0.5)}
      largest: {_tb(1000, 0.001)}
      full-bucket: {_tb(10, 0.1)}
      # Finagle RetryBudgetTest.
      finagle-empty: {{{_OFF}, retry_budget: {{ratio: 0, min_per_second: 0, ttl: 10s}}}}
      finagle-200pct: {{{_OFF}, retry_budget: {{ratio: 2.0, min_per_second: 0, ttl: 60s}}}}
      finagle-1000pct: {{{_OFF}, retry_budget: {{ratio: 10, min_per_second: 0, ttl: 60s}}}}
      finagle-reserve: {{{_OFF}, retry_budget: {{ratio: 0, min_per_second: 1, ttl: 60s}}}}
      finagle-both: {{{_OFF}, retry_budget: {{ratio: 0.25, min_per_second: 1, ttl: 60s}}}}
      # resilience4j CircuitBreakerStateMachineTest: 4 calls in half-open,
      # a 50 % failure rate threshold.
      r4j-release: &r4j
        circuit_breaker:
          {{minimum_calls: 5, failure_ratio: 0.5, open_for: 5s, half_open_probes: 4,
           close_ratio: 0.75}}
      r4j-ignore: *r4j
      r4j-open: *r4j
  llm:
    upstreams:
      # issue 22: two 501s drained this bucket of 4 to 2.
      llm-bucket: {_tb(4, 0.1)}
      r4j-llm: *r4j
  lookup:
    retryable_statuses: [404]
    max_attempts: 100
    upstreams:
      lookup-bucket: {_tb(10, 0.1)}
      r4j-404: *r4j
"""


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stub]:
    policy = tmp_path_factory.mktemp("peers") / "policy.yaml"
    policy.write_text(POLICY)
    daemon = start_daemon("--policy", str(policy))
    with grpc.insecure_channel(daemon.target) as channel:
        stub = Stub(channel)
        # Opened first, so their open period passes while the other cases run.
        for upstream in _HALF_OPEN:
            for _ in range(5):
                failed(stub, upstream)
            assert not admit(stub, upstream).allowed
        yield stub
    daemon.stop()


def failed(
    stub: Stub, upstream: str, status: int = 503, profile: str = "", attempt: int = 1
) -> pb.DecideRetryResponse:
    """A failed attempt, as the executor asks DecideRetry about it."""
    request = pb.DecideRetryRequest(
        attempt=attempt, http_status=status, upstream=upstream, profile=profile
    )
    reply: pb.DecideRetryResponse = stub.DecideRetry(request, timeout=10)
    return reply


def retried(stub: Stub, upstream: str, status: int = 503, profile: str = "") -> bool:
    """Whether the failed attempt's RETRY stands; else the budget refused it."""
    reply = failed(stub, upstream, status, profile)
    if reply.action != pb.ACTION_RETRY:
        assert reply.reason == pb.REASON_RETRY_BUDGET_EXHAUSTED, reply
    return reply.action == pb.ACTION_RETRY


def report(stub: Stub, upstream: str, status: int = 0, profile: str = "") -> None:
    """One dispatch's outcome: a success when `status` is 0."""
    outcome = pb.Outcome(upstream=upstream, profile=profile, success=not status, http_status=status)
    stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=[outcome]), timeout=10)


def admit(stub: Stub, upstream: str, profile: str = "") -> pb.AdmitResponse:
    reply: pb.AdmitResponse = stub.Admit(
        pb.AdmitRequest(upstream=upstream, profile=profile), timeout=10
    )
    return reply


def view(stub: Stub, upstream: str, profile: str = "default") -> pb.UpstreamState:
    reply = stub.GetUpstreams(pb.GetUpstreamsRequest(profile=profile), timeout=10)
    (found,) = [u for u in reply.upstreams if u.upstream == upstream]
    return found


# -- gRFC A6's retry throttle ---------------------------------------------


def test_grpc_go_retry_throttling(stub: Stub) -> None:
    """grpc-go test/retry_test.go TestRetryThrottling: MaxAttempts 4,
    UNAVAILABLE retryable, maxTokens 10, tokenRatio 0.5. The server's i-th
    attempt succeeds for i in {0, 3, 6, 10, 11, 12, 13, 14, 16, 18}; each RPC
    ends OK or UNAVAILABLE with the server's count at the value shown."""
    successes = {0, 3, 6, 10, 11, 12, 13, 14, 16, 18}
    expected = [
        ("OK", 0),
        ("OK", 3),
        ("OK", 6),
        ("UNAVAILABLE", 8),  # tokens 5: the first failure is retried, the second is not
        ("UNAVAILABLE", 9),
        ("OK", 10),
        ("OK", 11),
        ("OK", 12),
        ("OK", 13),
        ("OK", 14),
        ("OK", 16),
        ("UNAVAILABLE", 17),
    ]
    i = -1
    seen = []
    for _ in expected:
        attempt = 1
        while True:
            assert admit(stub, "go-throttle").allowed
            i += 1
            if i in successes:
                report(stub, "go-throttle")
                seen.append(("OK", i))
                break
            reply = failed(stub, "go-throttle", 503, attempt=attempt)
            if reply.action != pb.ACTION_RETRY:
                assert reply.reason == pb.REASON_RETRY_BUDGET_EXHAUSTED
                seen.append(("UNAVAILABLE", i))
                break
            attempt += 1
    assert seen == expected


def test_grpc_core_throttle_basic(stub: Stub) -> None:
    """grpc-core test/core/client_channel/retry_throttle_test.cc,
    ServerRetryThrottleData.Basic: max 4 tokens (threshold 2), 1.6 per
    success (a tokenRatio above 1, which A6 allows). True: a retry is let
    through after that failure."""
    # F+: a failure after which a retry is let through; F-: one refused.
    steps = ["F+", "S", "F+", "F-", "F-", "F-", "F-", "S", "S", "F+", "F-", "S", "F-", "S", "F+"]
    for n, step in enumerate(steps):
        if step == "S":
            report(stub, "core-basic")
        else:
            assert retried(stub, "core-basic") is (step == "F+"), f"step {n}: {step}"


@pytest.mark.parametrize(
    ("upstream", "grants", "balance"),
    [
        # A full 10/0.1 bucket: 9, 8, 7, 6 are above 5; at 5 it stops.
        ("full-bucket", 4, 4),
        # A6's decimal maxTokens: 2.5 tokens, threshold 1.25: 1.5 is above it.
        ("decimal", 1, 1),
        # A6's largest bucket, and grpc-core's smallest tokenRatio (0.001).
        ("largest", 499, 499),
    ],
)
def test_budget_balance_is_the_retries_granted_now(
    stub: Stub, upstream: str, grants: int, balance: int
) -> None:
    """issue 22 item 4: GetUpstreams shows exactly the retries the bucket
    would grant now, one failed attempt after another."""
    assert admit(stub, upstream).allowed  # tracked from here on, still full
    assert view(stub, upstream).budget_balance == balance
    assert [retried(stub, upstream) for _ in range(grants + 1)] == [True] * grants + [False]
    assert view(stub, upstream).budget_balance == 0


# -- What counts: the statuses the profile retries -------------------------


def test_a_status_the_profile_does_not_retry_spends_no_tokens(stub: Stub) -> None:
    """issue 22 item 2, after A6 ("a failed RPC whose status is in
    retryableStatusCodes" counts): profile llm does not retry a 501, so two
    501s leave its bucket of 4 full and the next 503 is retried."""
    for _ in range(2):
        reply = failed(stub, "llm-bucket", 501, profile="llm")
        assert reply.reason == pb.REASON_NOT_RETRYABLE_STATUS
    assert view(stub, "llm-bucket", "llm").budget_balance == 1
    assert retried(stub, "llm-bucket", 503, profile="llm")
    assert not retried(stub, "llm-bucket", 503, profile="llm")


def test_a_status_the_profile_retries_spends_tokens_and_counts_for_the_breaker(
    stub: Stub,
) -> None:
    """issue 22 item 2: with retryable_statuses [404], retried 404s spend the
    bucket's tokens (4 retries from 10 tokens) and the breaker counts them."""
    granted = [retried(stub, "lookup-bucket", 404, profile="lookup") for _ in range(20)]
    assert granted == [True] * 4 + [False] * 16
    for _ in range(3):
        failed(stub, "r4j-404", 404, profile="lookup")
    state = view(stub, "r4j-404", "lookup")
    assert (state.window_calls, state.window_failures) == (3, 3)


@pytest.mark.parametrize(
    ("upstream", "profile", "ignored"),
    [("r4j-open", "", 404), ("r4j-llm", "llm", 501)],
)
def test_resilience4j_opens_on_counted_failures_only(
    stub: Stub, upstream: str, profile: str, ignored: int
) -> None:
    """resilience4j CircuitBreakerStateMachineTest
    shouldOpenAfterFailureRateThresholdExceeded: a window of 5, threshold
    50 %: F F F S S opens it at the fifth call. An ignored exception (here a
    status the profile does not retry) between them counts for nothing."""
    states = []
    for step in "FFFSS":
        report(stub, upstream, ignored, profile=profile)
        failed(stub, upstream, ignored, profile)
        if step == "F":
            failed(stub, upstream, 503, profile)
        else:
            report(stub, upstream, profile=profile)
        states.append(view(stub, upstream, profile or "default").breaker_state)
    assert states == [pb.BREAKER_STATE_CLOSED] * 4 + [pb.BREAKER_STATE_OPEN]


# -- Finagle's RetryBudget -------------------------------------------------


@pytest.mark.parametrize(
    ("upstream", "requests", "retries"),
    [
        # "apply minRetriesPerSec=0 maxPercentOver=0 should be empty".
        ("finagle-empty", 20, 0),
        # "apply with minRetries and maxPercentOver=0": only the reserve,
        # ttl x minRetriesPerSec = 60.
        ("finagle-reserve", 100, 60),
        # "apply with minRetries and maxPercentOver": 25 % of 100 plus 60.
        ("finagle-both", 100, 85),
    ],
)
def test_finagle_retry_budget(stub: Stub, upstream: str, requests: int, retries: int) -> None:
    """Finagle RetryBudgetTest's testBudget: each request deposits, then
    tries one withdrawal; the retries granted are nReqs x percentCanRetry +
    ttl x minRetriesPerSec (Finagle allows itself +-1 for its token scale;
    the daemon's counts are exact)."""
    granted = 0
    for _ in range(requests):
        assert admit(stub, upstream).allowed
        granted += retried(stub, upstream)
    assert granted == retries
    assert view(stub, upstream).budget_balance == 0


@pytest.mark.parametrize(
    ("upstream", "percent"), [("finagle-200pct", 2.0), ("finagle-1000pct", 10)]
)
def test_finagle_percent_can_retry_above_one(stub: Stub, upstream: str, percent: float) -> None:
    """Finagle RetryBudgetTest "apply minRetries=0 maxPercentOver greater
    than 1.0": no reserve, so nothing before the first deposit; after n
    deposits the balance is n x percentCanRetry."""
    assert not retried(stub, upstream)
    for _ in range(50):
        admit(stub, upstream)
    assert view(stub, upstream).budget_balance == 50 * percent


# -- Half-open probes ------------------------------------------------------


def half_open(stub: Stub, upstream: str) -> None:
    """Wait out the open period of a breaker the fixture opened. The round
    then has its own 5 s from the first probe on."""
    deadline = time.monotonic() + 30  # a hang is the defect, not the wait
    while view(stub, upstream).breaker_state != pb.BREAKER_STATE_HALF_OPEN:
        assert time.monotonic() < deadline, "the breaker never half-opened"
        time.sleep(0.05)


def test_resilience4j_releases_the_permission_of_an_ignored_probe(stub: Stub) -> None:
    """resilience4j shouldReleasePermissionWhenExceptionIgnored: 4 calls
    permitted in half-open; three succeed, the fourth ends in an ignored
    exception (a 404 the profile does not retry) and gives its permission
    back, so a fifth is permitted; its failure makes 3 of 4: CLOSED."""
    half_open(stub, "r4j-release")
    for _ in range(3):
        assert admit(stub, "r4j-release").probe
        report(stub, "r4j-release")
        assert view(stub, "r4j-release").breaker_state == pb.BREAKER_STATE_HALF_OPEN
    assert admit(stub, "r4j-release").probe
    report(stub, "r4j-release", 404)
    assert view(stub, "r4j-release").breaker_state == pb.BREAKER_STATE_HALF_OPEN
    assert admit(stub, "r4j-release").probe
    report(stub, "r4j-release", 503)
    assert view(stub, "r4j-release").breaker_state == pb.BREAKER_STATE_CLOSED


def test_resilience4j_ignores_exceptions_and_then_closes(stub: Stub) -> None:
    """resilience4j shouldIgnoreExceptionsAndThenTransitionToClosed: four
    probes end ignored, each gives its permission back; four successes then
    close the breaker."""
    half_open(stub, "r4j-ignore")
    for _ in range(4):
        assert admit(stub, "r4j-ignore").probe
        report(stub, "r4j-ignore", 404)
        assert view(stub, "r4j-ignore").breaker_state == pb.BREAKER_STATE_HALF_OPEN
    for n in range(4):
        assert admit(stub, "r4j-ignore").probe
        report(stub, "r4j-ignore")
        want = pb.BREAKER_STATE_CLOSED if n == 3 else pb.BREAKER_STATE_HALF_OPEN
        assert view(stub, "r4j-ignore").breaker_state == want


# -- The ranges the parser accepts and refuses ----------------------------

_BUDGET = "profiles:\n  default:\n    retry_budget: {{{}}}\n"


@pytest.mark.parametrize(
    "settings",
    [
        "kind: token_bucket, token_ratio: 1.6",  # grpc-core's own test
        "kind: token_bucket, token_ratio: 1000",
        "kind: token_bucket, max_tokens: 0.001",
        "kind: token_bucket, max_tokens: 1000",
        "kind: token_bucket, max_tokens: 2.5",
        "kind: ratio, ratio: 0",  # Finagle: percentCanRetry 0, only the reserve
        "kind: ratio, ratio: 0, min_per_second: 0",  # Finagle's RetryBudget.Empty
        "kind: ratio, ratio: 10",  # 1000 %
    ],
)
def test_the_peers_ranges_are_accepted(settings: str) -> None:
    parse_config(_BUDGET.format(settings))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        # A6: 0 < maxTokens <= 1000, tokenRatio > 0; read in thousandths.
        ("kind: token_bucket, max_tokens: 0", "max_tokens (line 3): must be in (0, 1000]"),
        ("kind: token_bucket, max_tokens: 1000.5", "max_tokens (line 3): must be in (0, 1000]"),
        ("kind: token_bucket, max_tokens: 0.0004", "max_tokens (line 3): must be at least 0.001"),
        ("kind: token_bucket, token_ratio: 0", "token_ratio (line 3): must be in (0, 1000]"),
        ("kind: token_bucket, token_ratio: -1.6", "token_ratio (line 3): must be in (0, 1000]"),
        ("kind: token_bucket, token_ratio: 1001", "token_ratio (line 3): must be in (0, 1000]"),
        ("kind: token_bucket, token_ratio: nan", "token_ratio (line 3): must be in (0, 1000]"),
        ("kind: token_bucket, max_tokens: inf", "max_tokens (line 3): must be in (0, 1000]"),
        # Finagle: "percentCanRetry must be non-negative".
        ("kind: ratio, ratio: -1.0", "ratio (line 3): must be in [0, 10]"),
        ("kind: ratio, ratio: 10.5", "ratio (line 3): must be in [0, 10]"),
        # Finagle: "minRetriesPerSec must be non-negative".
        ("kind: ratio, min_per_second: -1", "min_per_second (line 3): must be >= 0"),
    ],
)
def test_out_of_range_values_are_refused_naming_the_field(settings: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(_BUDGET.format(settings))
    assert message in str(info.value)


# -- A reload that changes a token bucket ---------------------------------


def _bucket_policy(max_tokens: int, token_ratio: float) -> str:
    return (
        "profiles:\n  default:\n    upstreams:\n      reloaded:\n"
        f"        {_OFF}\n"
        f"        retry_budget: {{kind: token_bucket, max_tokens: {max_tokens}, "
        f"token_ratio: {token_ratio}}}\n"
    )


def test_grpc_core_throttle_replacement_keeps_the_fill_fraction(tmp_path: Path) -> None:
    """grpc-core retry_throttle_test.cc ServerRetryThrottleData.Replacement:
    a bucket of 4 (1 per success) at 3 tokens is replaced by one of 10 (3
    per success), which starts at 7.5, the same fraction, not full."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(_bucket_policy(4, 1))
    daemon: Daemon = start_daemon("--policy", str(policy), "--policy-poll", "3600")
    try:
        with grpc.insecure_channel(daemon.target) as channel:
            s = Stub(channel)
            assert retried(s, "reloaded")  # 3 tokens: above the threshold of 2
            policy.write_text(_bucket_policy(10, 3))
            daemon.process.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 30
            # 7.5 tokens of 10: 6.5 and 5.5 are above 5, so 2 show.
            while (balance := view(s, "reloaded").budget_balance) != 2:
                assert balance == 0, f"not reloaded as a fraction: {balance} retries left"
                assert time.monotonic() < deadline, "the reload never applied"
                time.sleep(0.05)
            # 6.5, 5.5 above 5; 4.5, 3.5 not; a success: 6.5; then 5.5; then 4.5.
            for step in ["F+", "F+", "F-", "F-", "S", "F+", "F-"]:
                if step == "S":
                    report(s, "reloaded")
                else:
                    assert retried(s, "reloaded") is (step == "F+"), step
    finally:
        daemon.stop()


# -- The fleet store counts what the profile retries too -------------------

_FLEET = f"""\
state: {{store: redis, key_prefix: "peer:", deadline: 1s, min_pods: 1}}
profiles:
  llm:
    upstreams:
      fleet-llm: {_tb(4, 0.1)}
  lookup:
    retryable_statuses: [404]
    upstreams:
      fleet-404: {_tb(10, 0.1)}
"""


def spent_in_fleet(server: RedisServer, profile: str, upstream: str, thousandths: int) -> None:
    """Wait until the fleet's token bucket has `thousandths` spent, then
    for every pod's next sync (a few intervals): what a pod answers from
    the fleet is as old as its last sync."""
    name = f"{profile}\0{upstream}".encode()
    key = f"peer:{{{hashlib.blake2b(name, digest_size=12).hexdigest()}}}:s"
    store = redis.Redis(port=server.port)
    try:
        deadline = time.monotonic() + 30
        while float(store.hget(key, "t") or 0) < thousandths:
            assert time.monotonic() < deadline, "the fleet never got the retries"
            time.sleep(0.02)
    finally:
        store.close()
    time.sleep(0.5)


def test_the_fleet_store_counts_what_the_profile_retries(tmp_path: Path) -> None:
    """issue 22 item 2 on the fleet's shared token bucket: pod A's 501s under
    llm leave it full, pod A's retried 404s under lookup spend it; pod B,
    whose own bucket is full, sees each through the fleet's answer."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(_FLEET)
    server = RedisServer().start()
    pods: list[Daemon] = []
    try:
        for name in ("pod-a", "pod-b"):
            env = {"SQUAWK_STATE_URL": server.url, "SQUAWK_STATE_POD": name}
            pods.append(start_daemon("--policy", str(policy), env=env))
        with (
            grpc.insecure_channel(pods[0].target) as ca,
            grpc.insecure_channel(pods[1].target) as cb,
        ):
            a, b = Stub(ca), Stub(cb)
            # Two 501s then a success, written in order in the background:
            # once the success's key is there, the 501s went before it.
            for status in (501, 501, 0):
                report(a, "fleet-llm", status, profile="llm")
            store = redis.Redis(port=server.port)
            deadline = time.monotonic() + 30
            while not list(store.scan_iter(match="peer:*")):
                assert time.monotonic() < deadline, "the fleet never got the report"
                time.sleep(0.02)
            store.close()
            # Full (4): 3 is above 2, so pod B's 503 is retried fleet-wide.
            reply = failed(b, "fleet-llm", 503, profile="llm")
            assert reply.action == pb.ACTION_RETRY, reply.explanation
            # Pod B asks for the upstream once, so its syncs read the fleet's
            # state of it (a pod syncs the upstreams it touched).
            b.Admit(pb.AdmitRequest(upstream="fleet-404", profile="lookup"), timeout=5)
            # Three retried 404s from pod A take the fleet's 10 tokens to 7.
            assert all(retried(a, "fleet-404", 404, "lookup") for _ in range(3))
            # Pod B reads them at its next sync after they reach the fleet.
            spent_in_fleet(server, "lookup", "fleet-404", 3000)
            # Pod B's own bucket is full; the fleet's goes to 6, then to 5.
            assert retried(b, "fleet-404", 404, "lookup")
            refused = failed(b, "fleet-404", 404, profile="lookup")
            assert refused.reason == pb.REASON_RETRY_BUDGET_EXHAUSTED
            assert "fleet-wide retry budget is spent" in refused.explanation
    finally:
        for pod in pods:
            pod.stop()
        server.stop()
