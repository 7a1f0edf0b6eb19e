"""The daemon's overload level (server/rpc/overload.py): the share of an
interval's calls that reached the daemon behind their deadline sets the
level of the next; a level sheds its classes in order; it falls by one per
quiet interval. Envoy's overload manager is the shape: monitors read per
interval (250 ms, its default refresh), actions at thresholds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from squawk.daemon.server.rpc.overload import (
    HIGH,
    INTERVAL,
    LOW,
    MIN_CALLS,
    Overload,
    Shed,
    arrived,
    shed_class,
    sheds,
)


def _interval(state: Overload, start: float, calls: int, behind: int) -> Overload:
    """`calls` arriving within the interval from `start`, the first `behind` late."""
    for i in range(calls):
        state = arrived(state, start + i * INTERVAL / (calls + 1), i < behind)
    return state


def _level_after(calls: int, behind: int) -> int:
    state = _interval(Overload(), 0.0, calls, behind)
    return arrived(state, INTERVAL, False).level


def test_the_order_of_shedding() -> None:
    assert shed_class("AnalyzeError") is Shed.DIAGNOSIS
    assert shed_class("Classify") is Shed.DIAGNOSIS
    assert shed_class("DecideRetryBatch") is Shed.BATCH
    for rpc in ("Admit", "ReportOutcome", "DecideRetry", "GetUpstreams"):
        assert shed_class(rpc) is Shed.DISPATCH
    one, two = Overload(level=1), Overload(level=2)
    assert sheds(one, Shed.DIAGNOSIS) and not sheds(one, Shed.BATCH)
    assert sheds(two, Shed.DIAGNOSIS) and sheds(two, Shed.BATCH)
    assert not sheds(Overload(level=0), Shed.DIAGNOSIS)


def test_the_share_behind_sets_the_next_level() -> None:
    calls = 100
    assert _level_after(calls, 0) == 0
    assert _level_after(calls, round(LOW * calls) - 1) == 0
    assert _level_after(calls, round(LOW * calls)) == 1
    assert _level_after(calls, round(HIGH * calls) - 1) == 1
    assert _level_after(calls, round(HIGH * calls)) == 2
    # Too few calls to say: a caller's own short deadlines, not a queue.
    assert _level_after(MIN_CALLS - 1, MIN_CALLS - 1) == 0


def test_the_level_falls_by_one_per_quiet_interval() -> None:
    state = _interval(Overload(), 0.0, 100, 100)
    state = arrived(state, INTERVAL, False)
    assert state.level == 2
    state = _interval(state, INTERVAL, 100, 0)
    state = arrived(state, 2 * INTERVAL, False)
    assert state.level == 1
    state = _interval(state, 2 * INTERVAL, 100, 0)
    state = arrived(state, 3 * INTERVAL, False)
    assert state.level == 0


def test_a_gap_without_calls_counts_as_quiet() -> None:
    state = arrived(_interval(Overload(), 0.0, 100, 100), INTERVAL, False)
    assert state.level == 2
    # Nothing for a second: the next call finds the level back at 0.
    assert arrived(state, INTERVAL + 1.0, False).level == 0


@given(st.lists(st.tuples(st.floats(0.0, 0.3), st.booleans()), max_size=400))
def test_dispatch_is_never_shed_by_the_level(steps: list[tuple[float, bool]]) -> None:
    # Any arrivals, any share behind: Admit, ReportOutcome and DecideRetry
    # are shed only by their own deadline, never by what others' did.
    state, now = Overload(), 0.0
    for gap, behind in steps:
        now += gap
        state = arrived(state, now, behind)
        assert 0 <= state.level <= 2
        assert not sheds(state, Shed.DISPATCH)
