"""The Python client's outcome queue and permit leases, as tables on a fake
clock: the numbers come from the rules in _outbox and _leases (a batch is
due 50 ms after its oldest outcome or at 100; a spare permit lives until
its lease ends; a request asks for the dispatches of the last lease period).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from squawk.v1 import policy_pb2 as pb
from squawk_client._admission import admission
from squawk_client._leases import Leases
from squawk_client._outbox import MAX_QUEUED, Outbox

KEY = ("default", "api.example", "")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _outcome(n: int) -> pb.Outcome:
    return pb.Outcome(upstream=f"u{n}", success=True)


def test_a_batch_is_due_fifty_ms_after_its_oldest_outcome() -> None:
    clock = Clock()
    box = Outbox(clock)
    assert box.due_in() is None
    assert box.put(_outcome(1)) is False
    clock.now += 0.020
    box.put(_outcome(2))
    assert box.due_in() == pytest.approx(0.030)  # the oldest's 50 ms, not the newest's
    clock.now += 0.030
    assert box.due_in() == 0.0
    assert [o.upstream for o in box.take()] == ["u1", "u2"]
    assert box.due_in() is None


def test_a_patient_outcome_waits_a_lease_unless_another_is_behind_it() -> None:
    # A success of a paced lease may wait 200 ms (one lease); an impatient
    # outcome queued behind it is due 50 ms after itself, and takes it along.
    clock = Clock()
    box = Outbox(clock)
    box.put(_outcome(1), patient=True)
    assert box.due_in() == pytest.approx(0.200)
    clock.now += 0.100
    box.put(_outcome(2), patient=True)
    assert box.due_in() == pytest.approx(0.100)  # the oldest's 200 ms
    box.put(_outcome(3))
    assert box.due_in() == pytest.approx(0.050)
    clock.now += 0.050
    assert [o.upstream for o in box.take()] == ["u1", "u2", "u3"]
    assert box.due_in() is None


def test_an_urgent_outcome_sends_the_batch_at_once() -> None:
    # A call that held a slot of a declared cap: another caller waits for
    # it, so its batch (and whatever waits in it) goes now.
    clock = Clock()
    box = Outbox(clock)
    assert box.put(_outcome(1)) is False
    clock.now += 0.010
    assert box.put(_outcome(2), urgent=True) is True
    assert box.due_in() == 0.0
    assert [o.upstream for o in box.take()] == ["u1", "u2"]


def test_a_full_batch_is_due_at_once_and_holds_one_hundred() -> None:
    box = Outbox(Clock())
    full = [box.put(_outcome(n)) for n in range(250)]
    assert full.index(True) == 99  # the 100th fills the first batch
    assert box.due_in() == 0.0
    assert [len(box.take()) for _ in range(3)] == [100, 100, 50]


def test_a_full_queue_drops_the_oldest_and_counts_it() -> None:
    box = Outbox(Clock())
    for n in range(MAX_QUEUED + 3):
        box.put(_outcome(n))
    assert box.dropped == 3
    assert box.take()[0].upstream == "u3"


def test_each_outcome_goes_with_its_age_and_one_past_a_minute_is_dropped() -> None:
    """Outcome.age: the time since the outcome was queued, after its
    response; the daemon refuses one over 60 s, so it is counted instead."""
    clock = Clock()
    box = Outbox(clock)
    box.put(_outcome(1))
    clock.now += 0.030
    box.put(_outcome(2))
    clock.now += 0.020
    assert [o.age.ToTimedelta() for o in box.take()] == [
        timedelta(milliseconds=50),
        timedelta(milliseconds=20),
    ]
    box.put(_outcome(3))
    clock.now += 60.0
    box.put(_outcome(4))
    clock.now += 0.001
    assert [o.upstream for o in box.take()] == ["u4"]
    assert box.dropped == 1


def test_after_close_the_rest_is_due_at_once_and_new_outcomes_are_counted() -> None:
    box = Outbox(Clock())
    box.put(_outcome(1))
    box.close()
    assert box.due_in() == 0.0
    assert [o.upstream for o in box.next_batch() or []] == ["u1"]
    assert box.next_batch() is None  # closed and empty: the sender ends
    box.put(_outcome(2))
    box.lost(4)  # a batch the daemon did not take
    assert box.dropped == 5


def test_spare_permits_start_dispatches_until_the_lease_ends() -> None:
    clock = Clock()
    leases = Leases(clock)
    assert leases.take(KEY) is None  # nothing granted yet
    leases.granted(KEY, 3, timedelta(milliseconds=200), "00000000000000aa")
    clock.now += 0.100
    # Each spare permit names the grant's admission, as its outcome must.
    assert leases.take(KEY) == ("00000000000000aa", 0.0, 0.0)
    clock.now += 0.099
    assert leases.take(KEY) == ("00000000000000aa", 0.0, 0.0)
    assert leases.take(KEY) is None  # two spares, both used
    leases.granted(KEY, 3, timedelta(milliseconds=200), "00000000000000bb")
    clock.now += 0.200
    assert leases.take(KEY) is None  # lapsed at 200 ms, unused


@pytest.mark.parametrize(
    ("permits", "lease", "spares"),
    [
        (1, None, 0),
        (5, None, 0),  # no lease: nothing spare
        (5, timedelta(0), 0),
        (5, timedelta(milliseconds=-5), 0),
        (1000, timedelta(milliseconds=100), 99),  # 100 permits at most
    ],
)
def test_only_a_lease_makes_permits_spare(
    permits: int, lease: timedelta | None, spares: int
) -> None:
    leases = Leases(Clock())
    leases.granted(KEY, permits, lease)
    assert sum(leases.take(KEY) is not None for _ in range(120)) == spares


def test_a_lease_longer_than_a_second_ends_after_one() -> None:
    clock = Clock()
    leases = Leases(clock)
    leases.granted(KEY, 10, timedelta(hours=5))
    clock.now += 0.999
    assert leases.take(KEY) is not None
    clock.now += 0.001
    assert leases.take(KEY) is None


def test_a_request_asks_for_the_dispatches_of_the_last_lease_period() -> None:
    clock = Clock()
    leases = Leases(clock)
    assert leases.wanted(KEY) == 1
    # Single grants, 50 ms apart: the default period (200 ms) holds four.
    for _ in range(6):
        leases.granted(KEY, 1, None)
        clock.now += 0.050
    # Granted at 100.00 .. 100.25; at 100.31 those after 100.11 count, plus this one.
    clock.now += 0.010
    assert leases.wanted(KEY) == 3 + 1
    # A lease names the period: 100 ms; at 100.37 only the grant at 100.31 counts.
    leases.granted(KEY, 2, timedelta(milliseconds=100))
    clock.now += 0.060
    assert leases.wanted(KEY) == 1 + 1
    for _ in range(300):
        leases.granted(KEY, 1, None)
    assert leases.wanted(KEY) == 100


def test_a_failure_gives_up_the_spare_permits_and_a_single_grant_too() -> None:
    leases = Leases(Clock())
    leases.granted(KEY, 5, timedelta(milliseconds=200))
    leases.revoke(KEY)
    assert leases.take(KEY) is None
    leases.granted(KEY, 5, timedelta(milliseconds=200))
    leases.granted(KEY, 1, None)  # the daemon limits the key now
    assert leases.take(KEY) is None
    assert leases.take(("default", "other", "")) is None


def test_concurrent_steps_ask_for_one_lease_at_a_time() -> None:
    # While an Admit asking several permits is out for a key, the steps
    # arriving meanwhile ask one each: each asking a whole lease would
    # reserve the key's demand many times over. The answer (or a lease's
    # time, when none comes) frees the key to ask several again.
    clock = Clock()
    leases = Leases(clock)
    for _ in range(5):
        leases.granted(KEY, 1, None)
    assert leases.ask(KEY) == 6
    assert leases.ask(KEY) == 1
    leases.answered(KEY)
    assert leases.ask(KEY) == 6
    clock.now += 1.0  # no answer came: a second later the starts are old too
    assert leases.ask(KEY) == 1
    for _ in range(3):
        leases.granted(KEY, 1, None)
    assert leases.ask(KEY) == 4


def test_only_an_allowed_answer_holds_a_slot() -> None:
    assert admission(pb.AdmitResponse(allowed=True, holds_slot=True)).holds_slot
    # A refusal holds nothing, whatever a confused server says.
    assert not admission(pb.AdmitResponse(allowed=False, holds_slot=True)).holds_slot
