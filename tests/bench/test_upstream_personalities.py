"""The outcome benchmark's upstream personalities, the instrument its goals
are read with: each header dialect's answers, read by the daemon's own
parser (rate_limit_hint), say the true bucket's limit and a reset its
provider's documentation allows; its true bucket serves what it says; the
storm answers its share 529 in Anthropic's form; the SDK paths answer what
the official SDKs parse. Loopback, a few seconds."""

from __future__ import annotations

import json
import math
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import anthropic
import openai
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.outcome import run
from bench.procs import Processes, free_port
from conftest import ROOT
from go_build import go_build
from squawk.policy.ratelimit import Quota, rate_limit_hint

C = 2.0  # calls/s: a token every 0.5 s, so the few calls of a test refill next to nothing
KEY = "sk-test-0000000000000000"
Answer = tuple[int, dict[str, str], bytes, float]  # status, headers, body, wall time
Start = Callable[..., int]  # the upstream with these flags: its port


@pytest.fixture(scope="module")
def upstream_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("upstream-bin")
    return go_build(ROOT / "bench", "./upstream-go", out) / "upstream-go"


@pytest.fixture
def start(upstream_bin: Path, tmp_path: Path) -> Iterator[Start]:
    with Processes(tmp_path) as procs:

        def started(*flags: str) -> int:
            port = free_port()
            argv = [str(upstream_bin), "-listen", f"127.0.0.1:{port}", *flags]
            run.wait_port(procs.start(f"upstream-{port}", argv, os.environ), port)
            return port

        yield started


def call(port: int, path: str = "/call?step=1") -> Answer:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"X-Executor": "t"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            status, headers, body = reply.status, reply.headers, reply.read()
    except urllib.error.HTTPError as exc:
        status, headers, body = exc.code, exc.headers, exc.read()
    return status, {k.lower(): v for k, v in headers.items()}, body, time.time()


def until_throttled(port: int, most: int = 8) -> list[Answer]:
    """Calls back to back up to and including the first 429."""
    answers: list[Answer] = []
    while len(answers) < most:
        answers.append(call(port))
        if answers[-1][0] == 429:
            break
    return answers


def quota(answer: Answer) -> Quota:
    hint = rate_limit_hint(answer[1], answer[3])
    assert hint is not None and hint.requests is not None, answer[1]
    return hint.requests


# (dialect, the limit its headers state, the calls its true bucket holds at
# the start). Per-second buckets hold C; per-minute ones state 60 x C and
# start nearly spent, at C x -burst (0.5 s).
BUCKETS = [
    ("openai-s", C, C),
    ("openai-m", 60 * C, 0.5 * C),
    ("anthropic-s", C, C),
    ("anthropic-m", 60 * C, 0.5 * C),
    ("coarse", C, C),
]


@pytest.mark.parametrize(("dialect", "limit", "holds"), BUCKETS, ids=[b[0] for b in BUCKETS])
def test_a_dialects_headers_read_as_its_true_bucket(
    start: Start, dialect: str, limit: float, holds: float
) -> None:
    port = start("-capacity", str(C), "-dialect", dialect)
    answers = until_throttled(port)
    served = [a for a in answers if a[0] == 200]
    assert answers[-1][0] == 429
    assert holds <= len(served) <= holds + 1  # + a token refilled while calling, at most
    for answer in answers:
        q = quota(answer)
        assert q.limit == limit
        assert q.remaining is not None and q.reset is not None
        if answer[0] == 429:
            assert q.remaining == 0
        reset = q.reset.total_seconds()
        # What the bucket lacks, (limit - tokens) / C, with remaining = floor(tokens).
        lacks = ((limit - q.remaining - 1) / C, (limit - q.remaining) / C)
        if dialect.startswith("openai"):
            # "the time until the rate limit resets to its initial state"
            assert q.refills
            assert lacks[0] - 0.001 <= reset <= lacks[1] + 0.001
        elif dialect.startswith("anthropic"):
            # "the time when the rate limit will be fully replenished", RFC 3339,
            # at whole seconds: up to a second later.
            assert q.refills
            raw = answer[1]["anthropic-ratelimit-requests-reset"]
            assert raw.endswith("Z") and len(raw) == len("2026-01-02T03:04:05Z"), raw
            assert lacks[0] - 0.1 <= reset <= lacks[1] + 1.0
        else:
            # Whole seconds until the next token (one every 1 / C = 0.5 s), rounded up.
            assert not q.refills
            assert reset == math.ceil(1 / C)


def test_the_upstream_tells_what_its_bucket_holds(start: Start) -> None:
    # The benchmark counts it in a phase's capacity: a second's bucket
    # starts full (C = 2 calls), and a call takes one (refilling 2/s).
    port = start("-capacity", str(C), "-dialect", "openai-s")
    assert float(run.get(f"http://127.0.0.1:{port}/tokens")) == pytest.approx(C)
    assert call(port)[0] == 200
    assert 1.0 <= float(run.get(f"http://127.0.0.1:{port}/tokens")) < 1.5


def test_the_openai_per_minute_reset_is_a_go_duration_of_minutes(start: Start) -> None:
    # 60 x 0.05/s = 3 calls a minute. A rejection that costs a whole token
    # empties the bucket: it lacks all 3, 60 s of refill, which Go writes "1m0s".
    flags = ("-capacity", "0.05", "-dialect", "openai-m", "-reject-cost", "1")
    port = start(*flags)
    answers = until_throttled(port)
    status, headers, _, _ = answers[-1]
    assert status == 429
    assert headers["x-ratelimit-limit-requests"] == "3"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"] == "1m0s"


def test_the_ietf_dialect_is_a_window_that_starts_over(start: Start) -> None:
    port = start("-capacity", str(C), "-dialect", "ietf")
    # Start just after a whole second, so the calls fall in one window.
    time.sleep(1.02 - time.time() % 1)
    answers = until_throttled(port)
    assert [a[0] for a in answers] == [200] * int(C) + [429]
    for answer in answers:
        assert answer[1]["ratelimit-policy"] == f'"default";q={int(C)};w=1'
        q = quota(answer)
        assert (q.limit, q.window, q.refills) == (C, timedelta(seconds=1), False)
        # t: whole seconds until the window starts over, rounded up.
        assert q.reset == timedelta(seconds=1)
    assert [quota(a).remaining for a in answers] == [C - 1, 0, 0]


def test_the_lying_dialect_claims_a_huge_quota_or_a_day_while_its_bucket_is_c(
    start: Start,
) -> None:
    port = start("-capacity", str(C), "-dialect", "lying")
    answers = [call(port) for _ in range(100)]
    assert C <= sum(a[0] == 200 for a in answers) <= C + 1
    quotas = [quota(a) for a in answers]
    assert {q.limit for q in quotas} == {1e6}
    day = [q for q in quotas if q.reset == timedelta(days=1)]
    # One answer in ten says a single call is left for a day (P(none in 100) < 1e-4).
    assert day and all(q.remaining == 1 for q in day)
    assert all(q.remaining == 999_999 for q in quotas if q not in day)


def test_the_storm_answers_its_share_529_as_anthropic_does(start: Start) -> None:
    port = start("-capacity", "1000", "-dialect", "anthropic-s", "-storm", "0.5")
    answers = [call(port) for _ in range(400)]
    stormed = [a for a in answers if a[0] == 529]
    assert {a[0] for a in answers} == {200, 529}
    # Binomial(400, 0.5): 200 +- 10; 4 standard deviations either way.
    assert 160 <= len(stormed) <= 240
    for _, headers, body, _ in stormed:
        assert json.loads(body) == {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"},
        }
        assert "retry-after" not in headers
        assert not [h for h in headers if "ratelimit" in h]
    assert run.get(f"http://127.0.0.1:{port}/storm?p=0") == b"ok\n"
    assert {call(port)[0] for _ in range(20)} == {200}
    rows = json.loads(run.get(f"http://127.0.0.1:{port}/counts"))["rows"]
    assert sum(r[5] for r in rows) == len(stormed)  # counted as 5xx


def test_the_storm_gives_every_mode_the_same_529s_on_the_same_attempts(start: Start) -> None:
    # The modes of a run are compared on their step success: the storm's
    # 529s fall on each step's n-th attempt whatever order the calls come
    # in, so two upstreams of the same seed, called in opposite orders
    # (and through the SDKs' body for half the steps), answer each
    # (step, attempt) alike, and the difference between modes is policy.
    first = start("-capacity", "1000", "-storm", "0.5", "-seed", "9")
    second = start("-capacity", "1000", "-storm", "0.5", "-seed", "9")
    steps = [f"ex-{i}" for i in range(20)]

    def fates(port: int, order: list[str]) -> dict[tuple[str, int], int]:
        seen: dict[tuple[str, int], int] = {}
        for attempt in range(3):
            for step in order:
                if steps.index(step) % 2:
                    body = json.dumps(
                        {"model": "m", "messages": [{"role": "user", "content": f"step {step}"}]}
                    ).encode()
                    request = urllib.request.Request(
                        f"http://127.0.0.1:{port}/v1/messages",
                        data=body,
                        headers={"X-Executor": "t", "Content-Type": "application/json"},
                    )
                    try:
                        with urllib.request.urlopen(request, timeout=10) as reply:
                            status = reply.status
                    except urllib.error.HTTPError as exc:
                        status = exc.code
                else:
                    status = call(port, f"/call?step={step}")[0]
                seen[step, attempt] = status
        return seen

    one = fates(first, steps)
    assert one == fates(second, steps[::-1])
    # Still half of the attempts, whichever step or attempt: Binomial(60,
    # 0.5) is 30 +- 3.9, and each attempt's 20 draws 10 +- 2.2.
    assert 15 <= sum(s == 529 for s in one.values()) <= 45
    for attempt in range(3):
        assert 3 <= sum(one[step, attempt] == 529 for step in steps) <= 17


def test_the_sdks_parse_the_upstreams_answers(start: Start) -> None:
    port = start("-capacity", "1000", "-dialect", "openai-s")
    base = f"http://127.0.0.1:{port}"
    with openai.OpenAI(api_key=KEY, base_url=f"{base}/v1", max_retries=0) as chat:
        done = chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert done.choices[0].message.content == "ok"
    with anthropic.Anthropic(api_key=KEY, base_url=base, max_retries=0) as messages:
        message = messages.messages.create(
            model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
        assert isinstance(message.content[0], anthropic.types.TextBlock)
        assert message.content[0].text == "ok"
        run.get(f"{base}/storm?p=1")
        with pytest.raises(anthropic.InternalServerError) as caught:
            messages.messages.create(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}]
            )
    assert caught.value.status_code == 529
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
