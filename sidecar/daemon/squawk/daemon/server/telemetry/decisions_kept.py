"""The refusals kept for `squawk explain` (issue 36): each Admit refused and
each DecideRetry that answered FAIL on a named upstream, under an id its
answer carries, with the upstream's state when it was decided and the
number of the latest event then, so ExplainDecision can show what changed
before it.

Bounded: the latest CAPACITY are kept, the oldest forgotten first. An id is
the process's random tag and a number, so one from a restarted daemon is
never taken for another decision. The strings kept have passed the one
redaction gate. No I/O: the clock is the caller's.
"""

from __future__ import annotations

import itertools
import secrets
from collections import OrderedDict
from typing import NamedTuple

__all__ = ["CAPACITY", "MAX_ID_CHARS", "Kept", "KeptDecisions"]

CAPACITY = 4096
MAX_ID_CHARS = 64


class Kept(NamedTuple):
    at: float  # wall seconds
    rpc: str
    profile: str
    upstream: str  # shown
    reason: int  # pb.Reason
    explanation: str
    breaker_state: int  # pb.BreakerState
    pace_source: int  # pb.PaceSource
    rate: float
    # The latest event's number when it was decided.
    last_event: int


class KeptDecisions:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._kept: OrderedDict[str, Kept] = OrderedDict()
        self._tag = secrets.token_hex(3)
        self._numbers = itertools.count(1)

    def keep(self, decision: Kept) -> str:
        """Keep `decision`; its id."""
        key = f"{self._tag}-{next(self._numbers)}"
        if len(self._kept) >= self._capacity:
            self._kept.popitem(last=False)
        self._kept[key] = decision
        return key

    def get(self, decision_id: str) -> Kept | None:
        return self._kept.get(decision_id)

    def __len__(self) -> int:
        return len(self._kept)
