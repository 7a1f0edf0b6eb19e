"""The event ring (squawk.daemon.server.telemetry.events): bounded, paged by
number, filtered by upstream, and honest about what a slow reader lost."""

from __future__ import annotations

import time

from hypothesis import given
from hypothesis import strategies as st

from squawk.daemon.server.telemetry.events import MAX_PAGE, EventRing
from squawk.daemon.server.telemetry.observer import Observer
from squawk.daemon.server.tracking.registry import CoolDown, PaceChange, Transition
from squawk.policy import BreakerState, PaceSource


def _fill(ring: EventRing, upstreams: list[str]) -> None:
    for i, name in enumerate(upstreams):
        ring.add(float(i), "breaker", "default", name, "CLOSED", "OPEN")


def test_pages_come_in_order_and_resume_where_they_stopped() -> None:
    ring = EventRing(10)
    _fill(ring, ["a", "b", "c", "d", "e"])
    first = ring.page(0, limit=2)
    assert [e.seq for e in first.events] == [1, 2]
    assert (first.next_after, first.lost) == (2, 0)
    rest = ring.page(first.next_after)
    assert [e.upstream for e in rest.events] == ["c", "d", "e"]
    assert ring.page(rest.next_after).events == ()
    assert ring.page(rest.next_after).next_after == 5


def test_a_filter_by_upstream_skips_the_others_but_moves_on() -> None:
    ring = EventRing(10)
    _fill(ring, ["a", "b", "a", "b", "b"])
    page = ring.page(0, upstream="a")
    assert [e.seq for e in page.events] == [1, 3]
    # The reader's place is past everything it was shown or skipped.
    assert page.next_after == 5


def test_a_reader_that_falls_behind_is_told_how_much_it_lost() -> None:
    ring = EventRing(3)
    _fill(ring, ["a", "b", "c", "d", "e"])  # 1 and 2 are gone
    page = ring.page(0)
    assert [e.seq for e in page.events] == [3, 4, 5]
    assert page.lost == 2
    assert ring.page(3).lost == 0


def test_a_page_is_bounded() -> None:
    ring = EventRing(2 * MAX_PAGE)
    _fill(ring, ["x"] * (2 * MAX_PAGE))
    assert len(ring.page(0, limit=10**9).events) == MAX_PAGE
    assert len(ring.page(0, limit=0).events) == 1


@given(st.lists(st.sampled_from("abc"), max_size=200), st.integers(1, 50))
def test_the_ring_never_grows_past_its_capacity(names: list[str], capacity: int) -> None:
    ring = EventRing(capacity)
    _fill(ring, names)
    assert len(ring) == min(len(names), capacity)
    # Paging from 0 shows every held event once, whatever the page size.
    seen, after = [], 0
    while True:
        page = ring.page(after, limit=7)
        if not page.events:
            break
        seen += [e.seq for e in page.events]
        after = page.next_after
    assert seen == list(range(len(names) - len(ring) + 1, len(names) + 1))


def test_a_filter_by_profile_keeps_that_profiles_events_alone() -> None:
    ring = EventRing(10)
    ring.add(0.0, "pace", "default", "a", "none 0/s", "learned 4/s")
    ring.add(1.0, "pace", "llm", "a", "none 0/s", "learned 9/s")
    page = ring.page(0, profile="llm")
    assert [(e.seq, e.profile) for e in page.events] == [(2, "llm")]
    assert ring.last == 2


def test_the_observer_keeps_each_change_with_its_cause_redacted() -> None:
    observer = Observer()
    secret = "api.example/sk-" + "a" * 40
    observer.transition(
        Transition(
            "default",
            secret,
            BreakerState.CLOSED,
            BreakerState.OPEN,
            cause="4 of 4 calls in the window failed",
            left=30.0,
        )
    )
    observer.pace_changed(
        PaceChange("default", "api.example", PaceSource.NONE, PaceSource.LEARNED, 0.0, 14.2)
    )
    observer.cooled(CoolDown("default", secret, 12.0, "HTTP 429 (throttled), Retry-After 12 s"))
    before = time.time()
    first, second, third = observer.events.page().events
    assert (first.kind, first.before, first.after) == ("breaker", "CLOSED", "OPEN")
    assert first.cause == "4 of 4 calls in the window failed"
    assert first.until is not None and 25 < first.until - before <= 30
    assert "sk-" + "a" * 40 not in first.upstream
    assert (second.kind, second.upstream) == ("pace", "api.example")
    assert (second.before, second.after) == ("none 0/s", "learned 14.2/s")
    assert "throttling" in second.cause and second.until is None
    assert (third.kind, third.after) == ("cool_down", "cooling for 12 s")
    assert third.cause == "HTTP 429 (throttled), Retry-After 12 s"
    assert "sk-" + "a" * 40 not in third.upstream
    assert third.until is not None and 7 < third.until - before <= 12
