"""A test driver for one upstream's shared state: the server's part, by hand.

`Pod` holds the one UpstreamState the server would hold for a key and a
fake monotonic clock (`at(t)` sets it), and feeds both to the pure
functions, so a test reads as a timeline of calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from squawk.policy import (
    Action,
    Admission,
    AttemptState,
    Decision,
    Outcome,
    UpstreamConfig,
    UpstreamSnapshot,
    UpstreamState,
    admit,
    builtin_policy,
    decide,
    guard_retry,
    record_outcome,
    upstream_snapshot,
)

__all__ = [
    "BAD_INPUT",
    "CORRECT",
    "FAIL",
    "OUTAGE",
    "RETRY",
    "SUCCESS",
    "Pod",
    "failure",
    "retry_decision",
]

DEFAULT = builtin_policy().profile("default")
SUCCESS = Outcome(success=True)
OUTAGE = Outcome(success=False, http_status=503)
BAD_INPUT = Outcome(success=False, http_status=404)


def failure(status: int = 503, retry_after: float | None = None) -> Outcome:
    wait = None if retry_after is None else timedelta(seconds=retry_after)
    return Outcome(success=False, http_status=status, retry_after=wait)


def _decide(state: AttemptState) -> Decision:
    return decide(state, DEFAULT, lambda: 1_700_000_000.0)


def retry_decision(retry_after_s: int | None = None, transport: bool = False) -> Decision:
    """A RETRY as decide() answers a 503 (or a transport failure) on attempt 1."""
    headers = {} if retry_after_s is None else {"Retry-After": str(retry_after_s)}
    state = AttemptState(
        attempt=1, http_status=0 if transport else 503, transport_failure=transport, headers=headers
    )
    decision = _decide(state)
    assert decision.action is Action.RETRY
    return decision


RETRY = retry_decision()
CORRECT = _decide(AttemptState(attempt=1, http_status=400, correction_available=True))
FAIL = _decide(AttemptState(attempt=1, http_status=401))
assert CORRECT.action is Action.CORRECT and FAIL.action is Action.FAIL


@dataclass
class Pod:
    config: UpstreamConfig = field(default_factory=UpstreamConfig)
    now: float = 0.0
    state: UpstreamState = field(default_factory=UpstreamState)

    def at(self, now: float) -> Pod:
        self.now = now
        return self

    def admit(self, retry: bool = False) -> Admission:
        self.state, admission = admit(self.state, self.config, self.now, retry=retry)
        return admission

    def report(self, outcome: Outcome) -> None:
        self.state = record_outcome(self.state, self.config, self.now, outcome)

    def call(self, outcome: Outcome, times: int = 1) -> None:
        """`times` admitted calls at `now`, each reporting `outcome`."""
        for _ in range(times):
            admission = self.admit()
            assert admission.allowed, admission
            self.report(outcome)

    def guard(self, decision: Decision, deadline: timedelta | None = None) -> Decision:
        self.state, guarded = guard_retry(self.state, self.config, self.now, decision, deadline)
        return guarded

    def view(self) -> UpstreamSnapshot:
        return upstream_snapshot(self.state, self.config, self.now)
