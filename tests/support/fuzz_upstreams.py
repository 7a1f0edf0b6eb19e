"""The wire fuzz's cases for the pod's upstream state: Admit, ReportOutcome
and GetUpstreams (fuzz_cases draws them as it draws every RPC's).

These RPCs read and change one state per (profile, upstream) that outlives
the call, and one case alone reaches little of it. So the fuzz daemon runs
POLICY (a breaker that opens and half-opens within a run, a token-bucket
profile), and before its first case it is sent its RPC's PRELUDES entry:
reports that put named upstreams into every state (closed with counts in
its window, open, half-open with probes taken, cooling down for a day, a
drained bucket), some under names with control characters, and for Admit
then fill the registry to max_upstreams with names none of which is idle,
so every fresh name a case sends is answered untracked. The cases then hit
those names, churn new ones, and list them a page at a time.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from fuzz_values import (
    DURATION_NANOS,
    DURATION_SECONDS,
    INT32S,
    hostile_string,
    profile_name,
    wait_headers,
    wait_value,
)
from squawk.policy.profiles import DEFAULT_MAX_UPSTREAMS
from squawk.v1 import policy_pb2 as pb

__all__ = ["HOSTILE", "MAX_OUTCOMES", "POLICY", "PRELUDES", "SEEDS"]

MAX_OUTCOMES = 1_000  # the documented limit (proto, ReportOutcomeRequest)

POLICY = """\
profiles:
  default:
    upstreams:
      flapping:
        circuit_breaker: {minimum_calls: 2, window: 1s, open_for: 300ms, half_open_probes: 2}
      probing:
        circuit_breaker: {minimum_calls: 2, open_for: 1s, half_open_probes: 5}
  tokens:
    base: llm
    retry_budget: {kind: token_bucket, max_tokens: 4, token_ratio: 0.5}
    circuit_breaker: {minimum_calls: 1, failure_ratio: 1.0, open_for: 100ms, half_open_probes: 1}
    share_retry_after: false
"""
# The names the prelude gives a state, under their profile.
# Names that a terminal, a line-splitting log reader or the metrics text
# format would act on.
CONTROL_NAMES = (
    "esc\x1b[2J\x1b[H",
    "cr\rlf\n",
    "nul\x00",
    "ls\u2028ps\u2029nel\u0085",
    "del\x7f",
    "tab\tbell\x07",
)
STATES = (
    ("default", "counting"),
    ("default", "probing"),
    *(("default", name) for name in CONTROL_NAMES),
    ("default", "open"),
    ("default", "flapping"),
    ("default", "cooling"),
    ("default", "pushback"),
    ("default", "healthy"),
    ("llm", "cooling"),
    ("tokens", "drained"),
    ("tokens", "flapping"),
)
_PROFILES = ("default", "llm", "tokens")
_AT_LIMIT = ("u" * 256, "😀" * 256, "\x00" * 256, "api_key=" * 32)
_OVER_LIMIT = ("u" * 257, "😀" * 257, "x" * 100_000)


def _failed(
    upstream: str, profile: str = "default", status: int = 503, wait: str = "", hint: str = ""
) -> pb.Outcome:
    """A failure; with `wait`, its `hint` header (Retry-After by default)."""
    out = pb.Outcome(upstream=upstream, profile=profile, http_status=status)
    if wait:
        out.headers[hint or "Retry-After"] = wait
    return out


def _report(outcomes: list[pb.Outcome]) -> bytes:
    return pb.ReportOutcomeRequest(outcomes=outcomes).SerializeToString()


def _states() -> list[bytes | float]:
    """Every STATES name in its state; `flapping` opens again and again during
    the run, and `probing` is half-open, two of its five probes in, for the
    first second of it."""
    outcomes = [
        *[_failed("counting")] * 9,  # one short of opening
        *[_failed("probing")] * 2,
        *[_failed(name) for name in CONTROL_NAMES for _ in range(10)],
        *[_failed("open")] * 10,
        *[_failed("flapping")] * 2,
        _failed("cooling", wait="86400"),
        _failed("cooling", "llm", 529, "Fri, 31 Dec 9999 23:59:59 GMT"),
        _failed("pushback", status=429, wait="9" * 20, hint="grpc-retry-pushback-ms"),
        *[pb.Outcome(upstream="healthy", success=True)] * 20,
        *[pb.Outcome(upstream="drained", profile="tokens", transport_failure=True)] * 4,
        _failed("flapping", "tokens"),
    ]
    probes = [pb.Outcome(upstream="probing", success=True), _failed("probing")]
    return [_report(outcomes), 1.05, _report(probes)]


def _named(rng: random.Random, count: int) -> list[bytes]:
    """`count` upstreams of hostile but valid names, each in some state."""
    outcomes = []
    for i in range(count):
        name = f"{hostile_string(rng, 240)}{i}"
        roll = rng.random()
        if roll < 0.2:
            outcomes += [_failed(name)] * 10
        elif roll < 0.5:
            outcomes.append(_failed(name, rng.choice(_PROFILES), 429, "3600"))
        else:
            outcomes.append(pb.Outcome(upstream=name, profile=rng.choice(_PROFILES), success=True))
    return [_report(outcomes[i : i + MAX_OUTCOMES]) for i in range(0, len(outcomes), MAX_OUTCOMES)]


def _fill() -> list[bytes | float]:
    """The registry full of names with a success each, none idle for a minute:
    every fresh name after this is answered untracked."""
    names = [pb.Outcome(upstream=f"fill-{i}", success=True) for i in range(DEFAULT_MAX_UPSTREAMS)]
    return [_report(names[i : i + MAX_OUTCOMES]) for i in range(0, len(names), MAX_OUTCOMES)]


# ReportOutcome requests sent before the cases (a float: a pause, in
# seconds); the states come first, so the fill cannot leave them untracked.
PRELUDES: dict[str, Callable[[], list[bytes | float]]] = {
    "Admit": lambda: _states() + _fill(),
    "ReportOutcome": _states,
    # A few hundred: a listing costs time per entry, and about a thousand are sent.
    "GetUpstreams": lambda: _named(random.Random("GetUpstreams"), 300) + _states(),
    # The states' transitions and cool-downs, some under hostile names: the history.
    "GetEvents": _states,
}


def _seeds() -> dict[str, list[bytes]]:
    admit = [
        pb.AdmitRequest(upstream="payments-api"),
        pb.AdmitRequest(upstream="api.openai.com", capability="chat", profile="llm"),
        pb.AdmitRequest(upstream="open", capability="search_hotels"),
        pb.AdmitRequest(upstream="drained", profile="tokens"),
        pb.AdmitRequest(capability="search_hotels"),
    ]
    outcomes = [
        pb.Outcome(upstream="payments-api", success=True),
        _failed("payments-api", wait="3"),
        _failed("api.openai.com", "llm", 429, "1500", "grpc-retry-pushback-ms"),
        pb.Outcome(upstream="flapping", transport_failure=True),
        pb.Outcome(upstream="payments-api", capability="pay", http_status=404),
        pb.Outcome(success=True),
    ]
    outcomes[0].latency.FromMilliseconds(120)
    reports = [pb.ReportOutcomeRequest(outcomes=[o]) for o in outcomes]
    reports.append(pb.ReportOutcomeRequest(outcomes=outcomes))
    listings = [pb.GetUpstreamsRequest(profile=p) for p in ("", *_PROFILES)] + [
        pb.GetUpstreamsRequest(page_size=1000),
        pb.GetUpstreamsRequest(page_size=1, page_token="5"),
        pb.GetUpstreamsRequest(upstream="open", profile="default"),
    ]
    return {
        "Admit": [m.SerializeToString() for m in admit],
        "ReportOutcome": [m.SerializeToString() for m in reports],
        "GetUpstreams": [m.SerializeToString() for m in listings],
        "GetEvents": [
            m.SerializeToString()
            for m in (
                pb.GetEventsRequest(),
                pb.GetEventsRequest(after=1, page_size=2),
                pb.GetEventsRequest(profile="default", upstream="open"),
                pb.GetEventsRequest(page_size=500),
            )
        ],
    }


SEEDS = _seeds()


def _upstream(rng: random.Random, valid: bool = False) -> tuple[str, str]:
    """(kind, name): a state's name, a fresh one, none, one at or past the
    limit, or hostile text; `valid`: never past the limit."""
    roll = rng.random()
    if roll < 0.35:
        return "state", rng.choice(STATES)[1]
    if roll < 0.55:
        return "churn", f"churn-{rng.getrandbits(64):x}"
    if roll < 0.6:
        return "control", rng.choice(CONTROL_NAMES)
    if roll < 0.68:
        return "untracked", ""
    if roll < 0.78:
        return "limit", rng.choice(_AT_LIMIT if valid else rng.choice((_AT_LIMIT, _OVER_LIMIT)))
    return "hostile", hostile_string(rng, 250) if valid else hostile_string(rng)


def _profile(rng: random.Random) -> str:
    return rng.choice(_PROFILES) if rng.random() < 0.3 else profile_name(rng)


def _admit(rng: random.Random) -> tuple[str, bytes]:
    kind, upstream = _upstream(rng)
    profile = _profile(rng)
    if kind == "state" and rng.random() < 0.5:
        profile, upstream = rng.choice(STATES)  # the key the prelude readied
    capability = hostile_string(rng) if rng.random() < 0.3 else rng.choice(("", "search"))
    request = pb.AdmitRequest(upstream=upstream, capability=capability, profile=profile)
    return f"upstream.{kind}", request.SerializeToString()


# Statuses the pod counts as the upstream's failure, and some it does not.
_STATUSES = (0, 408, 429, 500, 502, 503, 504, 529, 599, 100, 200, 302, 400, 401, 404)


def _outcome(rng: random.Random, words: set[str], valid: bool) -> pb.Outcome:
    """One outcome; `valid`: every field within its bounds, so the report is recorded."""
    kind, upstream = _upstream(rng, valid)
    words.add(f"upstream.{kind}")
    out = pb.Outcome(
        upstream=upstream,
        profile=rng.choice(("", *_PROFILES)) if valid else _profile(rng),
        success=rng.random() < 0.3,
        http_status=rng.choice(_STATUSES if valid or rng.random() < 0.6 else INT32S),
        transport_failure=rng.random() < 0.1,
    )
    if rng.random() < 0.1:
        out.capability = hostile_string(rng, 250 if valid else None)
    if rng.random() < 0.4:
        # A counted failure with one of these starts (or stretches) a cool-down.
        out.headers.update({"Retry-After": wait_value(rng)} if valid else wait_headers(rng))
        words.add("headers")
    if rng.random() < 0.2:
        out.latency.seconds = rng.choice(DURATION_SECONDS)
        out.latency.nanos = rng.choice(DURATION_NANOS)
        words.add("latency")
    if rng.random() < 0.2:
        # An admission nobody gave, or a hostile id: a made-up report.
        out.admission_id = f"{rng.getrandbits(64):016x}" if valid else hostile_string(rng, 40)
        words.add("admission_id")
    if rng.random() < 0.2:
        if valid:
            out.age.FromMilliseconds(rng.randrange(0, 60_001))
        else:
            out.age.seconds = rng.choice(DURATION_SECONDS)
            out.age.nanos = rng.choice(DURATION_NANOS)
        words.add("age")
    return out


def _one_bad(rng: random.Random, out: pb.Outcome) -> str:
    """Damage one outcome so the whole report is refused; the label says how."""
    roll = rng.random()
    if roll < 0.4:
        out.http_status = rng.choice((-1, 1, 99, 600, 999, -(2**31), 2**31 - 1))
        return "status"
    if roll < 0.6:
        out.headers.update({f"x-{i}": "v" for i in range(65)})
        return "headers"
    if roll < 0.7:
        out.upstream = rng.choice(_OVER_LIMIT)
        return "upstream"
    if roll < 0.8:
        out.admission_id = rng.choice(("0" * 15, "0" * 17, "0123456789ABCDEF", "g" * 16, "😀" * 16))
        return "admission_id"
    if roll < 0.9:
        out.age.seconds = rng.choice((-1, 61, 2**63 - 1))
        return "age"
    out.profile = rng.choice(("unknown", "DEFAULT", "llm\x00"))
    return "profile"


def _report_case(rng: random.Random) -> tuple[str, bytes]:
    roll = rng.random()
    if roll < 0.05:
        # A thousand fresh names, each cooling down: past max_upstreams in a few calls.
        wait = str(rng.randrange(1, 86_400))
        outcomes = [
            _failed(f"churn-{rng.getrandbits(64):x}", status=429, wait=wait)
            for _ in range(MAX_OUTCOMES)
        ]
        return "churn", _report(outcomes)
    if roll < 0.15:
        # Enough failures on each of a few names to open their breakers.
        names = [_upstream(rng, valid=True)[1] for _ in range(rng.choice((2, 10, 50)))]
        return "breakers", _report([_failed(n) for n in names for _ in range(10)])
    n = rng.choice((1, 2, 5, 20)) if rng.random() < 0.95 else 200
    words: set[str] = set()
    valid = roll < 0.7
    outcomes = [_outcome(rng, words, valid) for _ in range(n)]
    while len(outcomes) > 1 and sum(o.ByteSize() for o in outcomes) > 2**21:
        outcomes.pop()  # stay under gRPC's 4 MiB message limit most of the time
    if roll < 0.35:
        bad = rng.randrange(len(outcomes))
        return f"one_bad_outcome.{_one_bad(rng, outcomes[bad])}", _report(outcomes)
    label = "outcomes" if valid else "hostile_outcomes"
    return "+".join([label, *sorted(words)]), _report(outcomes)


_PAGE_SIZES = (0, 1, 999, 1000, 1001, -1, 2**31 - 1, -(2**31))


def _page_token(rng: random.Random) -> str:
    return rng.choice(
        (str(rng.randrange(20_000)), "0", "-1", "9" * 18, "9" * 19, "1e3", hostile_string(rng, 40))
    )


def _list(rng: random.Random) -> tuple[str, bytes]:
    """A listing, a page of it, or one name's: bounds and hostile tokens included."""
    request, words = pb.GetUpstreamsRequest(profile=_profile(rng)), ["profile"]
    if rng.random() < 0.4:
        request.page_size = rng.choice(_PAGE_SIZES)
        words.append("page_size")
    if rng.random() < 0.4:
        request.page_token = _page_token(rng)
        words.append("page_token")
    if rng.random() < 0.3:
        kind, request.upstream = _upstream(rng)
        words.append(f"upstream.{kind}")
    return "+".join(words), request.SerializeToString()


def _events(rng: random.Random) -> tuple[str, bytes]:
    """A page of the history: numbers and sizes at and past their bounds,
    and filters by state names, churned, hostile and over-long ones."""
    request, words = pb.GetEventsRequest(), []
    if rng.random() < 0.5:
        request.after = rng.choice((-(2**63), -1, 0, 1, 5, 4096, 2**31, 2**63 - 1))
        words.append("after")
    if rng.random() < 0.4:
        request.page_size = rng.choice(_PAGE_SIZES)
        words.append("page_size")
    if rng.random() < 0.3:
        request.profile = _profile(rng)
        words.append("profile")
    if rng.random() < 0.4:
        kind, request.upstream = _upstream(rng)
        words.append(f"upstream.{kind}")
    return "+".join(words) or "empty", request.SerializeToString()


HOSTILE: dict[str, Callable[[random.Random], tuple[str, bytes]]] = {
    "Admit": _admit,
    "ReportOutcome": _report_case,
    "GetUpstreams": _list,
    "GetEvents": _events,
}
