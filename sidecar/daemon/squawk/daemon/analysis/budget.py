"""The CPU one analysis may spend on searches whose cost is not linear in the request.

`wire` bounds what a caller may send, and most of the analysis is linear in
that. Some searches multiply one part of a request by another: a schema
pattern costs up to (text bytes x compiled program size) on RE2's slow
path, a near-spelling test (length x allowance) per enum member, a
proposed value's check (its items x its schema's branches and required
keys), a suggestion in the error one try per parameter it may fit, a
failing parameter one look at every dependency value. Each such step asks
the current budget first; when the budget cannot pay, the step is not
made and its caller answers conservatively (a pattern that cannot be
checked accepts no value; a member not compared is not "close"; a value
not read is no candidate). A hostile request ends up with fewer
corrections, never a slower daemon.

Units are counted steps, not time, so one request always gets the same
answer on any machine. One unit is about 10 ns of the slowest step of each
kind on the machine this was measured on, so DEFAULT_UNITS is about 20 ms.

The budget of the running analysis travels in a context variable (per-call
data, like a trace context): `Analyzer.analyze` opens a fresh one per call,
and the worker thread runs each step in a copy of the caller's context.
Outside an analysis (CheckDispatch, a direct call), each public entry
point (`check_dispatch`, `schema.problems`) opens a budget of its own.

The budget also memoizes what one analysis would otherwise rebuild for
every value it checks (an enum's membership index), keyed by the object it
was built from and holding that object, so the key cannot be reused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar, cast

__all__ = ["DEFAULT_UNITS", "Budget", "afford", "memo", "scope", "within_one"]

T = TypeVar("T")

DEFAULT_UNITS = 2_000_000


class Budget:
    """Units left for one analysis; a charge it cannot pay is refused, not taken."""

    __slots__ = ("_memo", "left", "seen")

    def __init__(self, units: int = DEFAULT_UNITS) -> None:
        self.left = units
        # One-off costs already paid in this analysis (a pattern's compilation).
        self.seen: set[str] = set()
        self._memo: dict[tuple[int, str], tuple[object, Any]] = {}

    def afford(self, units: int) -> bool:
        if units > self.left:
            return False
        self.left -= units
        return True

    def memo(self, key: object, what: str, build: Callable[[], T]) -> T:
        slot = (id(key), what)
        found = self._memo.get(slot)
        if found is not None and found[0] is key:
            return cast(T, found[1])
        value = build()
        self._memo[slot] = (key, value)
        return value


_CURRENT: ContextVar[Budget | None] = ContextVar("squawk_analysis_budget", default=None)


def current() -> Budget | None:
    return _CURRENT.get()


def afford(units: int) -> bool:
    """Charge `units` to the running analysis; False (nothing charged) when it cannot pay."""
    budget = _CURRENT.get()
    if budget is None:
        return units <= DEFAULT_UNITS
    return budget.afford(units)


def memo(key: object, what: str, build: Callable[[], T]) -> T:
    """`build()`, once per analysis for the same `key` object and the same `what`."""
    budget = _CURRENT.get()
    return build() if budget is None else budget.memo(key, what, build)


@contextlib.contextmanager
def scope(budget: Budget) -> Iterator[Budget]:
    """Make `budget` the one every search in this context charges."""
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


def within_one() -> contextlib.AbstractContextManager[Budget]:
    """The running analysis's budget, or a fresh one for a call made outside any."""
    budget = _CURRENT.get()
    return contextlib.nullcontext(budget) if budget is not None else scope(Budget())
