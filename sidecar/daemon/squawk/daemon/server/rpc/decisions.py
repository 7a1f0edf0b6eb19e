"""Stateless decisions already made, answered again for an equal request.

A DecideRetry that names no upstream is a pure function of its request and
the policy, unless it reads the clock (a Retry-After given as an HTTP date)
or a random source (a profile with random jitter; the default jitter is
deterministic). Executors failing the same way ask the same question, and
a batch of them asks it many times over, so the answer and its message are
kept by the request's bytes and reused: a lookup instead of the conversion,
the core and the message (DecideRetryBatch: 17 us per decision before).

Bounded twice, because the keys are caller data: at most MAX_ENTRIES
answers, the least recently used dropped first (so a stream of distinct
requests cannot push out the few that recur), and no request over
MAX_KEY_BYTES is kept at all (a large body is rare, and would make the
bound a memory one). A request not seen before costs the key and the
bookkeeping on top of the decision: bench/core.py measures both.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable

from squawk.policy import Decision, Profile, decide
from squawk.v1 import policy_pb2 as pb
from squawk.wire import attempt_state, decision_message

__all__ = ["MAX_ENTRIES", "MAX_KEY_BYTES", "StatelessDecisions"]

MAX_ENTRIES = 4_096
MAX_KEY_BYTES = 1_024


class _WatchedClock:
    """The clock, noting whether the decision read it."""

    __slots__ = ("_clock", "read")

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.read = False

    def __call__(self) -> float:
        self.read = True
        return self._clock()


class StatelessDecisions:
    """Decides a request that names no upstream, reusing an equal request's answer."""

    def __init__(self, clock: Callable[[], float], rng: random.Random, max_body_bytes: int) -> None:
        self._clock = clock
        self._rng = rng
        self._max_body_bytes = max_body_bytes
        self._answers: OrderedDict[bytes, tuple[Decision, pb.DecideRetryResponse]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._answers)

    def decide(
        self, request: pb.DecideRetryRequest, profile: Profile
    ) -> tuple[Decision, pb.DecideRetryResponse]:
        """The decision and its message (shared: callers must not change it)."""
        if not profile.backoff.deterministic:
            decision = self._decide(request, profile, self._clock)
            return decision, decision_message(decision)
        # Map fields (headers) serialize in a fixed order only when asked to.
        key = request.SerializeToString(deterministic=True)
        answers = self._answers
        found = answers.get(key)
        if found is not None:
            answers.move_to_end(key)
            return found
        clock = _WatchedClock(self._clock)
        decision = self._decide(request, profile, clock)
        answer = (decision, decision_message(decision))
        if not clock.read and len(key) <= MAX_KEY_BYTES:
            if len(answers) >= MAX_ENTRIES:
                answers.popitem(last=False)
            answers[key] = answer
        return answer

    def _decide(
        self, request: pb.DecideRetryRequest, profile: Profile, clock: Callable[[], float]
    ) -> Decision:
        return decide(attempt_state(request), profile, clock, self._rng, self._max_body_bytes)
