"""The circuit breaker: one per (profile, upstream), shared by the whole pod.

The vocabulary is resilience4j's and Polly's. The defaults (policy file
`circuit_breaker:`):

| field | default | bounds | meaning |
| --- | --- | --- | --- |
| enabled | true | | false: always CLOSED, admits everything |
| failure_ratio | 0.5 | (0, 1] | CLOSED opens at failures / calls >= this |
| minimum_calls | 10 | >= 1 | ... once the window holds at least this many calls |
| window | 60s | > 0 | the sliding time window the calls are counted over |
| buckets | 10 | 1..1000 | the window's buckets (it rolls one bucket at a time) |
| open_for | 30s | > 0 | OPEN refuses this long, then HALF_OPEN |
| half_open_probes | 5 | >= 1 | HALF_OPEN admits this many probe calls per round |
| close_ratio | 0.6 | (0, 1] | HALF_OPEN closes at successes / probes >= this |
| count_throttling | false | | true: a throttled failure counts (squawk.policy.outcome) |

The window need not divide evenly into buckets (60s / 7 is fine): bucket
edges are multiples of window / buckets seconds (see squawk.policy.timing).

The transitions, each a pure function of (breaker, config, now[, verdict]):

- CLOSED: every counted outcome (see squawk.policy.outcome: a success or a
  failure the profile retries, less a throttled one unless count_throttling)
  goes into the window. When the window then holds
  >= minimum_calls calls and failures / calls >= failure_ratio, it OPENS.
- OPEN: refuses every call until open_for has passed since it opened, then
  is HALF_OPEN. Outcomes reported while OPEN (calls admitted before it
  opened) are dropped: they describe the upstream before the break. It
  keeps the outcomes that opened it (the window, or the failed round's
  probes) for display: an operator asks why it is open.
- HALF_OPEN: admits up to half_open_probes calls (probes). Every counted
  outcome reported while HALF_OPEN is tallied as a probe's, whichever call
  it came from, as resilience4j does. Once half_open_probes outcomes are in,
  it CLOSES with a fresh window when successes / probes >= close_ratio, else
  OPENS again for open_for. A round that gets no verdict within open_for of
  its start (probes never reported) starts a new round. An outcome that does
  not count (a status the profile does not retry, a cancellation, a
  throttled failure) is not tallied, but gives one probe slot back while more slots are taken than
  outcomes tallied, so the round admits another probe instead of waiting
  for its restart: resilience4j's releasePermission for an ignored
  exception (CircuitBreakerStateMachineTest's
  shouldReleasePermissionWhenExceptionIgnored). The report does not say
  whether it came from a probe, so a slot goes back for whichever uncounted
  report arrives first; to bound what a caller reporting uncounted outcomes
  can let through, a round gives back at most half_open_probes slots (it
  admits at most twice its probes, as resilience4j's
  shouldIgnoreExceptionsAndThenTransitionToClosed does), and no such report
  can close the breaker. (The fleet store's half-open round never hears
  uncounted outcomes: there a probe that ends uncounted keeps its slot
  until the fleet's round restarts.)

  A throttled probe gives its slot back rather than judging the round: a
  full upstream says nothing about whether it is broken, so counting it
  would reopen a breaker on an upstream that merely sheds load, and the
  Retry-After it carries already holds the next probe back (the cool-down
  refuses before the breaker admits). resilience4j's ignoreExceptions is
  the peer: an ignored call releases its permission.

Time moves a breaker only when it is next read (admit, record, snapshot):
OPEN becomes HALF_OPEN at the first read at or after its end, and the
half-open round's open_for is counted from that read.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta

from .limits import MAX_BUCKETS, check_count, check_positive, check_ratio
from .outcome import Verdict
from .timing import EMPTY, Window, added, rolled, seconds
from .types import BreakerState

__all__ = ["Breaker", "BreakerConfig", "admit", "advance", "judged", "record", "trips"]


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    enabled: bool = True
    failure_ratio: float = 0.5
    minimum_calls: int = 10
    window: timedelta = timedelta(seconds=60)
    buckets: int = 10
    open_for: timedelta = timedelta(seconds=30)
    half_open_probes: int = 5
    close_ratio: float = 0.6
    # False: a throttled failure (squawk.policy.outcome.is_throttled) is not
    # counted; true: it counts as a failure, as before throttling was told apart.
    count_throttling: bool = False
    # Derived once: the transitions run on every call and read seconds.
    _window_s: float = field(init=False, repr=False, compare=False)
    _open_for_s: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Refuse a value out of its bounds (PolicyInputError names the field)."""
        check_ratio("failure_ratio", self.failure_ratio)
        check_count("minimum_calls", self.minimum_calls)
        check_positive("window", self.window)
        check_count("buckets", self.buckets, high=MAX_BUCKETS)
        check_positive("open_for", self.open_for)
        check_count("half_open_probes", self.half_open_probes)
        check_ratio("close_ratio", self.close_ratio)
        object.__setattr__(self, "_window_s", seconds(self.window))
        object.__setattr__(self, "_open_for_s", seconds(self.open_for))


@dataclass(frozen=True, slots=True)
class Breaker:
    state: BreakerState = BreakerState.CLOSED
    # CLOSED: (calls, failures) per bucket. Empty in the other states.
    window: Window = EMPTY
    # OPEN: when it half-opens. HALF_OPEN: when the round restarts unjudged.
    until: float = 0.0
    # HALF_OPEN: probe slots taken this round, and the outcomes tallied.
    # OPEN: the outcomes that opened it, kept for display (an OPEN breaker
    # records nothing): its window when it tripped, or the failed round's.
    probes: int = 0
    successes: int = 0
    failures: int = 0
    # HALF_OPEN: the slots uncounted outcomes gave back this round (at most
    # half_open_probes, so a round admits at most twice its probes).
    released: int = 0


CLOSED = Breaker()


def _open(config: BreakerConfig, now: float, calls: int, failures: int) -> Breaker:
    """OPEN for open_for, keeping the `calls` and `failures` that opened it."""
    until = now + config._open_for_s
    return Breaker(BreakerState.OPEN, until=until, successes=calls - failures, failures=failures)


def _round(config: BreakerConfig, now: float) -> Breaker:
    return Breaker(BreakerState.HALF_OPEN, until=now + config._open_for_s)


def _with_window(breaker: Breaker, window: Window) -> Breaker:
    # What dataclasses.replace(breaker, window=window) builds, at half its
    # cost: the CLOSED transitions run on every call.
    return Breaker(
        breaker.state,
        window,
        breaker.until,
        breaker.probes,
        breaker.successes,
        breaker.failures,
        breaker.released,
    )


def advance(breaker: Breaker, config: BreakerConfig, now: float) -> Breaker:
    """The breaker as time alone leaves it at `now`: an OPEN whose time is up
    is HALF_OPEN; a half-open round past its time starts over; the CLOSED
    window drops its old buckets. A disabled breaker is always CLOSED."""
    if not config.enabled:
        return CLOSED
    if breaker.state is BreakerState.CLOSED:
        window = rolled(breaker.window, now, config._window_s, config.buckets)
        return breaker if window is breaker.window else _with_window(breaker, window)
    if now >= breaker.until:
        return _round(config, now)
    return breaker


def admit(breaker: Breaker, config: BreakerConfig, now: float) -> tuple[Breaker, bool, bool]:
    """(breaker, allowed, probe): whether one call may go to the upstream now."""
    breaker = advance(breaker, config, now)
    if breaker.state is BreakerState.CLOSED:
        return breaker, True, False
    if breaker.state is BreakerState.HALF_OPEN and breaker.probes < config.half_open_probes:
        return replace(breaker, probes=breaker.probes + 1), True, True
    return breaker, False, False


def record(breaker: Breaker, config: BreakerConfig, now: float, verdict: Verdict) -> Breaker:
    """The breaker after one call's outcome (see the module docstring)."""
    breaker = advance(breaker, config, now)
    if breaker.state is BreakerState.OPEN or not config.enabled:
        return breaker
    if verdict is Verdict.IGNORED:
        outstanding = breaker.probes > breaker.successes + breaker.failures
        if outstanding and breaker.released < config.half_open_probes:
            return replace(breaker, probes=breaker.probes - 1, released=breaker.released + 1)
        return breaker
    failed = verdict is Verdict.FAILURE
    if breaker.state is BreakerState.CLOSED:
        window = added(breaker.window, now, config._window_s, config.buckets, 1, int(failed))
        if trips(window.first, window.second, config):
            return _open(config, now, window.first, window.second)
        return _with_window(breaker, window)
    successes = breaker.successes + (not failed)
    failures = breaker.failures + failed
    verdict_ = judged(successes, failures, config)
    if verdict_ is None:
        tallied = successes + failures
        return replace(
            breaker, probes=max(breaker.probes, tallied), successes=successes, failures=failures
        )
    if verdict_ is BreakerState.CLOSED:
        return CLOSED
    return _open(config, now, successes + failures, failures)


def trips(calls: int, failures: int, config: BreakerConfig) -> bool:
    """Whether a CLOSED window of `calls` with `failures` among them opens
    the breaker: the one rule, for a pod's window and the fleet's."""
    return calls >= config.minimum_calls and failures / calls >= config.failure_ratio


def judged(successes: int, failures: int, config: BreakerConfig) -> BreakerState | None:
    """A half-open round's verdict on its probe outcomes: CLOSED or OPEN
    once half_open_probes are in, else None (the round goes on). The one
    rule, for a pod's round and the fleet's."""
    tallied = successes + failures
    if tallied < config.half_open_probes:
        return None
    return BreakerState.CLOSED if successes / tallied >= config.close_ratio else BreakerState.OPEN
