"""The fleet store's outage machine (fleet_outage.py) as a table: three late
syncs in a row, or a connection error, begin an outage; an on-time sync
resets the count; the reconnect's pings end it; answers given meanwhile
are counted. Pure: no Redis, a clock the table sets."""

from __future__ import annotations

import pytest

from squawk.daemon.server.tracking.fleet_outage import (
    LATE_IN_A_ROW,
    UP,
    Event,
    Outage,
    step,
    timed,
)

LATE, ON_TIME, FAILED = Event.LATE, Event.ON_TIME, Event.FAILED
ANSWERED, LOCAL = Event.ANSWERED, Event.LOCAL_ANSWER
DOWN_AT_5 = Outage(up=False, late=0, since=5.0, local=0)


@pytest.mark.parametrize(
    ("name", "state", "event", "now", "after"),
    [
        ("one late sync", UP, LATE, 1.0, Outage(late=1)),
        ("two late syncs", Outage(late=1), LATE, 2.0, Outage(late=2)),
        ("the third late sync in a row", Outage(late=2), LATE, 5.0, DOWN_AT_5),
        ("an on-time sync resets the count", Outage(late=2), ON_TIME, 3.0, UP),
        ("a connection error", Outage(late=1), FAILED, 5.0, DOWN_AT_5),
        ("an error while away changes nothing", DOWN_AT_5, FAILED, 9.0, DOWN_AT_5),
        ("a late sync while away only counts", DOWN_AT_5, LATE, 9.0, DOWN_AT_5._replace(late=1)),
        ("an answer while up is not counted", UP, LOCAL, 9.0, UP),
        ("an answer while away is", DOWN_AT_5, LOCAL, 9.0, DOWN_AT_5._replace(local=1)),
        (
            "the pings answer: up, the outage's start and count kept for its last line",
            DOWN_AT_5._replace(local=7),
            ANSWERED,
            12.0,
            Outage(up=True, late=0, since=5.0, local=7),
        ),
        (
            "a new outage starts its count over",
            Outage(up=True, since=5.0, local=7),
            FAILED,
            20.0,
            Outage(up=False, since=20.0, local=0),
        ),
    ],
)
def test_the_outage_machine(
    name: str, state: Outage, event: Event, now: float, after: Outage
) -> None:
    assert step(state, event, now) == after


def test_three_late_syncs_in_a_row_are_an_outage() -> None:
    assert LATE_IN_A_ROW == 3


@pytest.mark.parametrize(
    ("took", "late_s", "event"),
    [(0.05, 0.1, ON_TIME), (0.1, 0.1, ON_TIME), (0.1001, 0.1, LATE), (2.0, 0.1, LATE)],
)
def test_a_round_trip_is_late_only_past_the_deadline(
    took: float, late_s: float, event: Event
) -> None:
    assert timed(took, late_s) is event
