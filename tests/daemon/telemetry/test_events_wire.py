"""GetEvents over the wire: a real daemon, executors reporting what their
upstreams answered, and the event history telling each change with its
cause: the breaker's trip with the window that tripped it and the outcome
that did, its half-open after open_for, a cool-down with the Retry-After
that began it and when it ends; paged, filtered, bounded, and every bad
field refused by name."""

from __future__ import annotations

import html
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from conftest import Daemon, free_port, start_daemon
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc

POLICY = """\
profiles:
  default:
    upstreams:
      flaky:
        circuit_breaker:
          {minimum_calls: 4, failure_ratio: 0.5, window: 10s, open_for: 1s, half_open_probes: 2}
      explain-me:
        circuit_breaker: {minimum_calls: 4, failure_ratio: 0.5, window: 60s, open_for: 60s}
      shed-me:
        rate_limit: {rate: 1, burst: 1, max_queue_delay: 50ms}
      status-trip:
        circuit_breaker: {minimum_calls: 4, failure_ratio: 0.5, window: 60s, open_for: 60s}
"""
SECRET = "sk-" + "q" * 40


METRICS_PORT = free_port()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    policy = tmp_path_factory.mktemp("policy") / "policy.yaml"
    policy.write_text(POLICY)
    d = start_daemon("--policy", str(policy), "--metrics-listen", f"127.0.0.1:{METRICS_PORT}")
    yield d
    d.stop()


def _http(path: str) -> tuple[int, str, bytes]:
    """(status, content type, body) of a GET on the daemon's metrics port."""
    url = f"http://127.0.0.1:{METRICS_PORT}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


@pytest.fixture(scope="module")
def stubs(daemon: Daemon) -> Iterator[list[pb_grpc.PolicyServiceStub]]:
    """Three executors of the pod, each on its own channel."""
    channels = [grpc.insecure_channel(daemon.target) for _ in range(3)]
    yield [pb_grpc.PolicyServiceStub(c) for c in channels]
    for c in channels:
        c.close()


def _report(stub: pb_grpc.PolicyServiceStub, *outcomes: pb.Outcome) -> None:
    stub.ReportOutcome(pb.ReportOutcomeRequest(outcomes=outcomes), timeout=5)


def _events(stub: pb_grpc.PolicyServiceStub, **fields: Any) -> pb.GetEventsResponse:
    reply: pb.GetEventsResponse = stub.GetEvents(pb.GetEventsRequest(**fields), timeout=5)
    return reply


def _all(stub: pb_grpc.PolicyServiceStub, upstream: str) -> list[pb.Event]:
    return list(_events(stub, upstream=upstream).events)


def test_a_trip_a_half_open_and_a_cool_down_come_with_their_causes(
    stubs: list[pb_grpc.PolicyServiceStub],
) -> None:
    a, b, c = stubs
    started = time.time()
    # Three executors' failures fill the breaker's window: 3 of 4 failed.
    _report(a, pb.Outcome(upstream="flaky", success=True, http_status=200))
    _report(b, pb.Outcome(upstream="flaky", http_status=503))
    _report(c, pb.Outcome(upstream="flaky", http_status=502))
    _report(a, pb.Outcome(upstream="flaky", http_status=503))
    (opened,) = _all(c, "flaky")
    assert opened.kind == pb.EVENT_KIND_BREAKER
    assert (opened.profile, opened.before, opened.after) == ("default", "CLOSED", "OPEN")
    assert opened.cause == (
        "3 of 4 calls in the window failed (75%): at or over failure_ratio 50% "
        "with minimum_calls 4; last: HTTP 503"
    )
    # It half-opens by itself one open_for later: `until` says when.
    until = opened.until.ToNanoseconds() / 1e9
    assert started < until <= time.time() + 1.0
    at = opened.time.ToNanoseconds() / 1e9
    assert started - 1 <= at <= time.time()
    time.sleep(max(0.0, until - time.time()) + 0.05)
    a.Admit(pb.AdmitRequest(upstream="flaky"), timeout=5)  # time moves it when next read
    events = _all(b, "flaky")
    assert [(e.before, e.after) for e in events] == [("CLOSED", "OPEN"), ("OPEN", "HALF_OPEN")]
    assert events[1].cause == "open for 1 s (open_for): up to 2 probes go through"
    assert not events[1].HasField("until")
    # A 429 with a Retry-After begins the upstream's shared cool-down.
    _report(
        b,
        pb.Outcome(upstream="busy", http_status=429, headers={"retry-after": "30"}),
    )
    (cooled,) = _all(a, "busy")
    assert cooled.kind == pb.EVENT_KIND_COOL_DOWN
    assert (cooled.before, cooled.after) == ("", "cooling for 30 s")
    assert cooled.cause == "HTTP 429 (throttled), Retry-After 30 s"
    left = cooled.until.ToNanoseconds() / 1e9 - time.time()
    assert 25 < left <= 30
    # Further throttles while it runs extend it, and are no new event.
    for _ in range(5):
        _report(c, pb.Outcome(upstream="busy", http_status=429, headers={"retry-after": "31"}))
    assert len(_all(a, "busy")) == 1


def test_pages_follow_on_and_filters_skip(stubs: list[pb_grpc.PolicyServiceStub]) -> None:
    a = stubs[0]
    for i in range(6):
        _report(a, pb.Outcome(upstream=f"page-{i}", http_status=429, headers={"retry-after": "9"}))
    everything = _events(a, page_size=500)
    numbers = [e.number for e in everything.events]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    assert everything.next_after == numbers[-1] and everything.lost == 0
    # Two at a time from the start, every event once, in order.
    seen, after = [], 0
    while True:
        page = _events(a, after=after, page_size=2)
        if not page.events:
            break
        assert len(page.events) <= 2
        seen += [e.number for e in page.events]
        after = page.next_after
    assert seen == numbers
    # A filter by name moves the reader past what it skipped.
    only = _events(a, upstream="page-3")
    assert [e.upstream for e in only.events] == ["page-3"]
    assert only.next_after == numbers[-1]
    assert _events(a, profile="default", after=numbers[-1]).events == []


def test_a_secret_in_a_name_is_redacted_and_still_found(
    stubs: list[pb_grpc.PolicyServiceStub],
) -> None:
    a = stubs[0]
    name = f"api.example/{SECRET}"
    _report(a, pb.Outcome(upstream=name, http_status=503, headers={"retry-after": "5"}))
    (event,) = _all(a, name)
    assert SECRET not in event.upstream and event.upstream.startswith("api.example/")
    assert event.cause == "HTTP 503 (throttled), Retry-After 5 s"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"after": -1}, "after"),
        ({"after": 10**12}, "after"),
        ({"page_size": -1}, "page_size"),
        ({"upstream": "x" * 257}, "upstream"),
        ({"profile": "no-such-profile"}, "profile"),
    ],
)
def test_a_bad_field_is_refused_by_name(
    stubs: list[pb_grpc.PolicyServiceStub], fields: dict[str, object], field: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        _events(stubs[0], **fields)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith(f"{field}:"), caught.value.details()


def test_a_page_is_at_most_500(stubs: list[pb_grpc.PolicyServiceStub]) -> None:
    a = stubs[0]
    for start in range(0, 600, 100):
        _report(
            a,
            *(
                pb.Outcome(upstream=f"flood-{i}", http_status=429, headers={"retry-after": "2"})
                for i in range(start, start + 100)
            ),
        )
    assert len(_events(a, page_size=10**6).events) == 500
    assert len(_events(a).events) == 100


def test_the_metrics_port_serves_the_same_page_as_json(
    stubs: list[pb_grpc.PolicyServiceStub],
) -> None:
    a = stubs[0]
    _report(a, pb.Outcome(upstream="json-port", http_status=429, headers={"retry-after": "6"}))
    status, kind, body = _http("/events?upstream=json-port&page_size=5")
    assert (status, kind) == (200, "application/json")
    page = json_format.Parse(body, pb.GetEventsResponse())
    assert page == _events(a, upstream="json-port", page_size=5)
    (event,) = json.loads(body)["events"]
    assert (event["kind"], event["after"]) == ("EVENT_KIND_COOL_DOWN", "cooling for 6 s")
    # Paged as the RPC is: past the last event, nothing, and the same place.
    status, _, body = _http(f"/events?after={page.next_after}&upstream=json-port")
    assert status == 200 and json.loads(body).get("events", []) == []
    # The metrics are still where they were.
    status, kind, body = _http("/metrics")
    assert status == 200 and kind.startswith("text/plain") and b"squawk_" in body


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("after=-1", "after"),
        ("after=ten", "after"),
        ("after=1&after=2", "after"),
        ("page_size=-3", "page_size"),
        ("page_size=9999999999999999999", "page_size"),
        ("limit=5", "limit"),
        ("upstream=" + "x" * 300, "upstream"),
        ("profile=" + SECRET, "profile"),
        ("x" * 3000, "query"),
    ],
)
def test_a_bad_query_is_a_400_naming_the_field(daemon: Daemon, query: str, field: str) -> None:
    status, kind, body = _http(f"/events?{query}")
    assert (status, kind) == (400, "application/json")
    error = json.loads(body)["error"]
    assert error.startswith(f"{field}:"), error
    assert SECRET not in error


def test_the_status_page_shows_upstreams_and_events_and_no_markup_of_theirs(
    stubs: list[pb_grpc.PolicyServiceStub],
) -> None:
    a = stubs[0]
    hostile = "<script>alert(1)</script>"
    _report(a, pb.Outcome(upstream=hostile, http_status=429, headers={"retry-after": "8"}))
    for _ in range(4):
        _report(a, pb.Outcome(upstream="status-trip", http_status=503))
    status, kind, body = _http("/status")
    assert (status, kind) == (200, "text/html; charset=utf-8")
    page = body.decode()
    assert page.startswith("<!doctype html>")
    assert '<meta http-equiv="refresh" content="5">' in page
    # Nothing to load from elsewhere, and no script of its own or a caller's.
    assert (
        "<script" not in page
        and "src=" not in page
        and "http" not in page.replace('http-equiv="refresh"', "")
    )
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # The tripped upstream's row, coloured by its state, and its events.
    assert '<tr class="OPEN"><td>default</td><td>status-trip</td><td>OPEN</td>' in page
    assert (
        "<td>breaker</td><td>default</td><td>status-trip</td><td>CLOSED -&gt; OPEN (until "
    ) in page
    assert "4 of 4 calls in the window failed (100%)" in page
    assert "<td>cooling for 8 s (until " in page
    # The newest event comes first.
    assert page.index("status-trip</td><td>CLOSED") < page.index("cooling for 8 s")


def test_a_burst_of_sheds_is_one_event_with_the_first_ones_explanation(
    stubs: list[pb_grpc.PolicyServiceStub],
) -> None:
    a = stubs[0]
    refused = []
    # A pace of 1/s with a 50 ms queue: most of 20 Admits at once are shed.
    for _ in range(20):
        reply = a.Admit(pb.AdmitRequest(upstream="shed-me"), timeout=5)
        if not reply.allowed:
            refused.append(reply)
    assert len(refused) >= 10
    assert all(r.reason == pb.REASON_UPSTREAM_SATURATED for r in refused)
    sheds = [e for e in _all(a, "shed-me") if e.kind == pb.EVENT_KIND_SHED]
    assert len(sheds) == 1
    (shed,) = sheds
    assert (shed.before, shed.after) == ("", "shedding: upstream saturated")
    assert shed.cause == refused[0].explanation and shed.cause.startswith("The call would wait")


def test_a_refusal_names_a_decision_that_explains_itself(
    stubs: list[pb_grpc.PolicyServiceStub],
) -> None:
    a, b, _ = stubs
    allowed = a.Admit(pb.AdmitRequest(upstream="explain-me"), timeout=5)
    assert allowed.allowed and allowed.decision_id == ""
    for _ in range(4):
        _report(b, pb.Outcome(upstream="explain-me", http_status=503))
    refused = a.Admit(pb.AdmitRequest(upstream="explain-me"), timeout=5)
    assert not refused.allowed and refused.reason == pb.REASON_CIRCUIT_OPEN
    assert refused.decision_id
    why: pb.ExplainDecisionResponse = b.ExplainDecision(
        pb.ExplainDecisionRequest(decision_id=refused.decision_id), timeout=5
    )
    assert (why.decision_id, why.rpc, why.profile, why.upstream) == (
        refused.decision_id,
        "Admit",
        "default",
        "explain-me",
    )
    assert (why.reason, why.explanation) == (refused.reason, refused.explanation)
    assert why.breaker_state == pb.BREAKER_STATE_OPEN
    # What changed before it: the trip, with the window that tripped it.
    assert [(e.before, e.after) for e in why.events] == [("CLOSED", "OPEN")]
    assert why.events[0].cause.startswith("4 of 4 calls in the window failed")
    # A DecideRetry that fails the step on the open upstream names its own.
    failed = a.DecideRetry(
        pb.DecideRetryRequest(attempt=1, http_status=503, upstream="explain-me"), timeout=5
    )
    assert failed.action == pb.ACTION_FAIL and failed.decision_id
    assert failed.decision_id != refused.decision_id
    again = b.ExplainDecision(pb.ExplainDecisionRequest(decision_id=failed.decision_id), timeout=5)
    assert (again.rpc, again.reason) == ("DecideRetry", failed.reason)


@pytest.mark.parametrize(
    ("decision_id", "code", "starts"),
    [
        ("", grpc.StatusCode.INVALID_ARGUMENT, "decision_id:"),
        ("x" * 65, grpc.StatusCode.INVALID_ARGUMENT, "decision_id:"),
        ("000000-1", grpc.StatusCode.NOT_FOUND, "decision_id: '000000-1' is not kept"),
        (SECRET, grpc.StatusCode.NOT_FOUND, "decision_id: '[REDACTED]' is not kept"),
    ],
)
def test_an_id_not_kept_is_not_found_and_a_bad_one_refused(
    stubs: list[pb_grpc.PolicyServiceStub], decision_id: str, code: grpc.StatusCode, starts: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        stubs[0].ExplainDecision(pb.ExplainDecisionRequest(decision_id=decision_id), timeout=5)
    assert caught.value.code() == code
    details = caught.value.details() or ""
    assert details.startswith(starts), details
    assert SECRET not in details


def test_get_upstreams_names_the_newest_event(stubs: list[pb_grpc.PolicyServiceStub]) -> None:
    a, b, _ = stubs
    # A cool-down begun is an event; every page of GetUpstreams names it.
    _report(a, pb.Outcome(upstream="newest", http_status=429, headers={"retry-after": "5"}))
    listed = b.GetUpstreams(pb.GetUpstreamsRequest(page_size=1), timeout=5)
    newest = listed.last_event
    assert newest > 0
    # It is GetEvents' number of the cool-down just begun, the last one held.
    (cooled,) = _all(a, "newest")
    page = _events(a, after=newest - 1, page_size=500)
    assert [e.upstream for e in page.events] == ["newest"] == [cooled.upstream]
    assert page.next_after == newest
    assert not _events(a, after=newest).events


def _openai(remaining: int) -> dict[str, str]:
    """OpenAI's request-quota headers, as its rate-limit guide states them."""
    return {
        "x-ratelimit-limit-requests": "100",
        "x-ratelimit-remaining-requests": str(remaining),
        "x-ratelimit-reset-requests": "1s",
    }


def test_answers_near_the_quotas_limit_are_counted(
    stubs: list[pb_grpc.PolicyServiceStub],
) -> None:
    a, b, _ = stubs
    _report(
        a,
        # 80 of 100 used, and 95: near the limit; 50 used: not.
        pb.Outcome(upstream="nearly", success=True, http_status=200, headers=_openai(20)),
        pb.Outcome(upstream="nearly", success=True, http_status=200, headers=_openai(5)),
        pb.Outcome(upstream="nearly", success=True, http_status=200, headers=_openai(50)),
        # A refusal is over the limit, a throttle: not near it.
        pb.Outcome(upstream="nearly", http_status=429, headers=_openai(0)),
        # An answer with no quota header says nothing.
        pb.Outcome(upstream="nearly", success=True, http_status=200),
    )
    (row,) = b.GetUpstreams(pb.GetUpstreamsRequest(upstream="nearly"), timeout=5).upstreams
    assert (row.near_limit, row.throttled) == (2, 1)
    _, _, body = _http("/metrics")
    assert 'squawk_quota_near_limit_total{profile="default",upstream="nearly"} 2.0' in body.decode()


def test_a_row_counts_the_calls_admitted_and_the_successes(
    stubs: list[pb_grpc.PolicyServiceStub],
) -> None:
    a, b, c = stubs
    for stub in (a, b, c):
        stub.Admit(pb.AdmitRequest(upstream="counted"), timeout=5)
    # A grant of 4 permits is 4 calls admitted.
    leased = a.Admit(pb.AdmitRequest(upstream="counted", permits=4), timeout=5)
    _report(
        b,
        pb.Outcome(upstream="counted", success=True, http_status=200),
        pb.Outcome(upstream="counted", success=True, http_status=200),
        pb.Outcome(upstream="counted", http_status=500),
    )
    (row,) = c.GetUpstreams(pb.GetUpstreamsRequest(upstream="counted"), timeout=5).upstreams
    assert (row.admitted, row.succeeded) == (3 + leased.permits, 2)


def test_the_status_page_explains_a_refusal_it_is_asked_about(
    stubs: list[pb_grpc.PolicyServiceStub],
) -> None:
    a, _, _ = stubs
    answers = [a.Admit(pb.AdmitRequest(upstream="shed-me"), timeout=5) for _ in range(3)]
    refused = next(r for r in answers if not r.allowed)
    status, kind, body = _http(f"/status?decision={refused.decision_id}")
    page = body.decode()
    assert (status, kind) == (200, "text/html; charset=utf-8")
    asked = page.split("<h2>Decision</h2><pre>", 1)[1].split("</pre>", 1)[0]
    assert asked.startswith(f"decision {refused.decision_id}: Admit refused at ")
    assert "upstream: default shed-me\nreason: UPSTREAM_SATURATED\n" in asked
    assert html.escape(refused.explanation) in asked
    assert "<h2>Upstreams</h2>" in page  # and the page as ever below it
    # An id not kept is said so; a bad query is a 400 naming its field.
    _, _, body = _http("/status?decision=000000-1")
    assert "000000-1 is not kept" in body.decode()
    _, _, body = _http(f"/status?decision={SECRET}")
    assert "[REDACTED] is not kept" in body.decode() and SECRET not in body.decode()
    for query, field in (
        ("decision=a&decision=b", "decision"),
        ("decision=" + "x" * 65, "decision"),
        ("upstream=shed-me", "query"),
        ("decision=%00%0d", "decision"),
        ("decision=%ff%fe", "decision"),
        ("decision", "query"),
    ):
        status, _, body = _http(f"/status?{query}")
        assert status == 400 and body.decode().startswith(f"{field}: "), (query, body)


def test_a_header_pace_names_the_quota_it_read(stubs: list[pb_grpc.PolicyServiceStub]) -> None:
    a, b, _ = stubs
    # 10 of 100 requests left for the next second: the headers pace it.
    _report(a, pb.Outcome(upstream="announced", success=True, http_status=200, headers=_openai(10)))
    b.Admit(pb.AdmitRequest(upstream="announced"), timeout=5)  # the pace is looked at
    paced = [e for e in _all(b, "announced") if e.kind == pb.EVENT_KIND_PACE]
    assert paced and paced[0].after.startswith("headers ")
    assert paced[0].cause == (
        "read from the upstream's rate-limit headers: requests 10 of 100 left, resetting in 1 s"
    )
