"""The Python client and runners under the upstream's pace: what Admit is
sent and what its answer may make the runner do, against a scripted
loopback Admit server (the runner vectors hold the contract's cases), and
against the real daemon pacing a declared rate."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from conftest import Daemon, start_daemon
from scripted_admit import AdmitServer, admit_servers
from squawk.v1 import policy_pb2 as pb
from squawk_client import (
    AsyncSquawkClient,
    Criticality,
    Reason,
    SquawkClient,
    SquawkInputError,
    StepCancelled,
    StepError,
    StepFailed,
    StepOptions,
    criticality,
    run_step,
    run_step_sync,
)

TIMEOUT = timedelta(seconds=10)
ADMITTED = {"allowed": True, "reason": "REASON_ADMITTED", "permits": 1}

Start = Callable[[list[dict[str, Any]]], tuple[str, AdmitServer]]


@pytest.fixture
def admitting() -> Iterator[Start]:
    with admit_servers() as start:
        yield start


@pytest.mark.parametrize("cost", [-1.0, math.nan, math.inf, 1e9 + 1])
def test_a_cost_out_of_bounds_is_refused_naming_the_field(cost: float) -> None:
    with pytest.raises(SquawkInputError) as refused:
        StepOptions(upstream="api.example", cost=cost)
    assert refused.value.field == "cost"


def test_admit_sends_its_fields_within_the_contracts_bounds(admitting: Start) -> None:
    target, server = admitting([ADMITTED] * 3)
    with SquawkClient(target, call_timeout=TIMEOUT) as client:
        client.admit("a", deadline=timedelta(days=3), cost=12.5, permits=1000)
        client.admit("a", deadline=timedelta(seconds=-1), permits=-4)
        client.admit("a")
    # A day at most, never below zero; permits 1 to 100; no deadline stays unset.
    assert [r.get("deadline") for r in server.admit_requests] == ["86400s", "0s", None]
    assert [r.get("permits") for r in server.admit_requests] == [100, 1, 1]
    assert server.admit_requests[0]["cost"] == 12.5


def test_an_answer_out_of_bounds_is_read_safely(admitting: Start) -> None:
    target, _ = admitting(
        [
            {"allowed": True, "wait": "-5s", "permits": 100000},
            {"allowed": True, "permits": 0},
            {"allowed": False, "reason": "REASON_UPSTREAM_SATURATED", "wait": "3s", "permits": 9},
        ]
    )
    with SquawkClient(target, call_timeout=TIMEOUT) as client:
        negative, zero, refused = (client.admit("a") for _ in range(3))
    assert (negative.wait, negative.permits) == (timedelta(0), 100)
    # A grant always starts the call that asked.
    assert zero.permits == 1
    assert (refused.allowed, refused.reason, refused.wait, refused.permits) == (
        False,
        Reason.UPSTREAM_SATURATED,
        timedelta(0),
        0,
    )


def test_cancelling_the_paced_wait_ends_the_step_before_any_dispatch(admitting: Start) -> None:
    target, server = admitting([ADMITTED | {"wait": "30s"}])
    cancel = threading.Event()
    cancel.set()
    calls: list[int] = []
    with SquawkClient(target, call_timeout=TIMEOUT) as client, pytest.raises(StepCancelled):
        # No sleep seam: the runner waits on `cancel`, which is already set.
        run_step_sync(client, calls.append, 1, options=StepOptions(upstream="a"), cancel=cancel)
    assert (calls, len(server.admit_requests)) == ([], 1)


def test_a_wait_past_a_day_without_a_deadline_fails_uncalled_rather_than_sleep(
    admitting: Start,
) -> None:
    # No daemon paces that far (Admit's deadline is at most a day); a
    # hostile answer must not put a step to sleep for years.
    target, _ = admitting([ADMITTED | {"wait": "86401s"}])
    calls: list[int] = []
    slept: list[float] = []
    with SquawkClient(target, call_timeout=TIMEOUT) as client, pytest.raises(StepFailed) as failed:
        run_step_sync(
            client, calls.append, 1, options=StepOptions(upstream="a"), sleep=slept.append
        )
    assert (calls, slept) == ([], [])
    assert failed.value.decision.reason is Reason.UPSTREAM_SATURATED


def test_spare_permits_of_a_lease_start_the_next_dispatches_without_asking(
    admitting: Start,
) -> None:
    # A lease of a second (the longest honoured): the three steps take far less.
    target, server = admitting([ADMITTED | {"permits": 3, "lease": "1s"}, ADMITTED])
    options = StepOptions(upstream="a")
    with SquawkClient(target, call_timeout=TIMEOUT) as client:
        assert [run_step_sync(client, str, n, options=options) for n in range(4)] == list("0123")
    # One Admit for three dispatches; the fourth asks for as many as were made
    # in the lease period (three) and itself.
    assert [r.get("permits") for r in server.admit_requests] == [1, 4]
    assert len(server.reported) == 4


def test_a_failed_dispatch_gives_up_the_spare_permits(admitting: Start) -> None:
    target, server = admitting([ADMITTED | {"permits": 3, "lease": "1s"}, ADMITTED])
    options = StepOptions(upstream="a")

    def refused(n: int) -> int:
        raise StepError("bad request", http_status=400)

    with SquawkClient(target, call_timeout=TIMEOUT) as client:
        run_step_sync(client, str, 0, options=options)
        with pytest.raises(StepFailed):
            run_step_sync(client, refused, 1, options=options)  # on the first spare
        run_step_sync(client, str, 2, options=options)  # the second spare is gone: asks
    assert len(server.admit_requests) == 2


def _raises(result: str) -> float:
    raise KeyError("usage")


@pytest.mark.parametrize(
    ("cost_of", "reported"),
    [
        (None, 40.0),  # the estimate
        (lambda result: 123.0, 123.0),  # the real cost, read from the result
        (lambda result: math.nan, 40.0),  # out of bounds: the estimate
        (lambda result: -2.0, 40.0),
        (lambda result: 2e9, 40.0),
        (_raises, 40.0),  # the success stands; the estimate is reported
    ],
    ids=["unset", "real", "nan", "negative", "huge", "raises"],
)
def test_a_success_reports_its_real_cost_when_the_step_reads_it(
    admitting: Start, cost_of: Callable[[str], float] | None, reported: float
) -> None:
    target, server = admitting([ADMITTED])

    async def step(n: int) -> str:
        return "done"

    async def main() -> str:
        async with AsyncSquawkClient(target, call_timeout=TIMEOUT) as client:
            options = StepOptions(upstream="llm", cost=40.0)
            return await run_step(client, step, 1, options=options, cost_of=cost_of)

    assert asyncio.run(main()) == "done"
    assert server.admit_requests[0]["cost"] == 40.0
    assert [o.get("cost", 0.0) for o in server.reported] == [reported]


# One call every 50 ms, one at a time, for every upstream of profile "paced";
# each test names an upstream of its own, and so gets a pacer of its own.
PACED = """\
profiles:
  paced:
    rate_limit: {rate: 20, burst: 1}
"""


@pytest.fixture(scope="module")
def paced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("paced") / "policy.yaml"
    path.write_text(PACED)
    daemon = start_daemon("--policy", str(path))
    yield daemon.target
    daemon.stop()


def test_the_daemons_pace_makes_the_second_of_two_steps_wait(paced: str) -> None:
    waits: list[float] = []
    calls: list[int] = []
    options = StepOptions(upstream="two-steps", profile="paced")
    with SquawkClient(paced, call_timeout=TIMEOUT) as client:
        for n in range(2):
            run_step_sync(client, calls.append, n, options=options, sleep=waits.append)
    # Burst 1: the first starts at once (no sleep); the second one slot (50 ms)
    # after it, less the time between the two (the daemon's clock is real).
    assert calls == [0, 1]
    assert len(waits) == 1 and 0 < waits[0] <= 0.050


def test_a_step_whose_deadline_the_pace_cannot_meet_is_shed_uncalled(paced: str) -> None:
    upstream = "short-deadline"
    calls: list[int] = []

    async def step(n: int) -> None:
        calls.append(n)

    async def main() -> StepFailed:
        async with AsyncSquawkClient(paced, call_timeout=TIMEOUT) as client:
            # Four calls hold the next start up to four slots (200 ms) away.
            for _ in range(4):
                assert (await client.admit(upstream, profile="paced")).allowed
            options = StepOptions(
                upstream=upstream, profile="paced", deadline=timedelta(milliseconds=10)
            )
            with pytest.raises(StepFailed) as shed:
                await run_step(client, step, 1, options=options)
            return shed.value

    shed = asyncio.run(main())
    assert (shed.decision.reason, shed.attempts, calls) == (Reason.UPSTREAM_SATURATED, 0, [])


# A bucket of 600 with 401 used, refilled in 4 s: (401 - 1) / 4 s = 100/s
# at the least (remaining is rounded down).
ANNOUNCED = {
    "x-ratelimit-limit-requests": "600",
    "x-ratelimit-remaining-requests": "199",
    "x-ratelimit-reset-requests": "4s",
}


def test_the_rate_limit_headers_of_a_success_set_the_daemons_pace(daemon: Daemon) -> None:
    options = StepOptions(upstream="announces")
    with SquawkClient(daemon.target, call_timeout=TIMEOUT) as client:
        run_step_sync(client, str, 1, options=options, headers_of=lambda result: ANNOUNCED)
    # Closed: the batch holding the success has been sent.
    with SquawkClient(daemon.target, call_timeout=TIMEOUT) as reader:
        (row,) = reader.get_upstreams(upstream="announces")
    assert row.pace_source == pb.PACE_SOURCE_HEADERS
    # (600 - 199 - 1) calls refilled by a reset written in whole seconds:
    # by 5 s at the latest, so at least 80/s.
    assert row.rate == pytest.approx(80)


def _flood(result: str) -> dict[str, str]:
    return {f"x-ratelimit-{n}": "1" for n in range(10_000)}


def _hostile(result: str) -> dict[str, str]:
    return {
        "x-ratelimit-remaining-requests": "5",
        "content-type": "application/json",  # not a rate-limit header
        "x-ratelimit-" + "n" * 300: "1",  # a name over 256 characters
        "x-ratelimit-limit-requests": "9" * 9000,  # a value over 8,192
        "RateLimit": "\udcff",  # not UTF-8
    }


def _raising(result: str) -> dict[str, str]:
    raise AttributeError("headers")


@pytest.mark.parametrize(
    ("headers_of", "kept"),
    [
        (_hostile, {"x-ratelimit-remaining-requests": "5"}),
        (_raising, {}),
        (lambda result: {}, {}),
    ],
    ids=["hostile", "raises", "none"],
)
def test_a_successs_headers_are_bounded_before_they_are_reported(
    admitting: Start, headers_of: Callable[[str], dict[str, str]], kept: dict[str, str]
) -> None:
    target, server = admitting([ADMITTED])
    with SquawkClient(target, call_timeout=TIMEOUT) as client:
        assert run_step_sync(
            client, str, 1, options=StepOptions(upstream="a"), headers_of=headers_of
        )
    assert [o.get("headers", {}) for o in server.reported] == [kept]


def test_a_header_flood_reports_at_most_the_daemons_limit(admitting: Start) -> None:
    target, server = admitting([ADMITTED])
    with SquawkClient(target, call_timeout=TIMEOUT) as client:
        run_step_sync(client, str, 1, options=StepOptions(upstream="a"), headers_of=_flood)
    (reported,) = server.reported
    assert len(reported["headers"]) == 64


def test_a_step_s_criticality_goes_with_admit_and_its_own_steps_inherit_it(
    admitting: Start,
) -> None:
    target, server = admitting([ADMITTED] * 6)
    outer = StepOptions(upstream="a", criticality=Criticality.SHEDDABLE)
    with SquawkClient(target, call_timeout=TIMEOUT) as client:

        def inner(n: int) -> Criticality | None:
            # A step run inside another, naming none, inherits its level; one
            # naming its own keeps it.
            run_step_sync(client, str, n, options=StepOptions(upstream="b"))
            run_step_sync(
                client, str, n, options=StepOptions(upstream="c", criticality=Criticality.CRITICAL)
            )
            return criticality()

        assert run_step_sync(client, inner, 1, options=outer) is Criticality.SHEDDABLE
        assert criticality() is None  # outside every step again
        run_step_sync(client, str, 2, options=StepOptions(upstream="d"))

        async def main() -> None:
            async with AsyncSquawkClient(target, call_timeout=TIMEOUT) as aclient:

                async def leaf(n: int) -> int:
                    await asyncio.sleep(0)  # across an await, and in a task of its own
                    return await asyncio.create_task(asyncio.sleep(0, n))

                async def nested(n: int) -> int:
                    return await run_step(aclient, leaf, n, options=StepOptions(upstream="f"))

                await run_step(
                    aclient,
                    nested,
                    0,
                    options=StepOptions(upstream="e", criticality=Criticality.SHEDDABLE_PLUS),
                )

        asyncio.run(main())
    sent = [(r["upstream"], r.get("criticality")) for r in server.admit_requests]
    assert sent == [
        ("a", "CRITICALITY_SHEDDABLE"),
        ("b", "CRITICALITY_SHEDDABLE"),
        ("c", "CRITICALITY_CRITICAL"),
        ("d", None),
        ("e", "CRITICALITY_SHEDDABLE_PLUS"),
        ("f", "CRITICALITY_SHEDDABLE_PLUS"),
    ]
