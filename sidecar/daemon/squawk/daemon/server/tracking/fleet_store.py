"""The Redis store: every pod's breakers, budgets and cool-downs, shared.

Each (profile, upstream) has two keys on Redis, updated only by fleet.lua,
one atomic script call at a time: its state and the pods that failed. The
pod's own state (PodStore) always decides first; the fleet's can then only
make the answer more cautious, so a pod whose Redis is gone is exactly a
memory-store pod.

Waiting is bounded three ways:

- Admit and a DecideRetry that would RETRY wait for the fleet's answer, at
  most `state.deadline` (5 ms by default; a batch shares one deadline). A
  late or failed answer leaves the pod's own answer, marked LOCAL.
- Writes whose answer changes nothing the caller sees (ReportOutcome, a
  DecideRetry that does not RETRY) go to Redis in the background, pipelined,
  summed per upstream while they wait: a burst for one upstream is one
  write, so only more than _MAX_QUEUED distinct upstreams waiting at once
  drop a write, and every one dropped is counted (on_dropped, the metric
  squawk_state_writes_dropped_total) and logged, throttled.
- An outage (a connection error, or three late answers in a row) stops all
  calls to Redis: decisions are local at once instead of after a deadline
  each. It is logged once; a background task pings Redis with backoff and,
  when it answers, replays what this pod saw meanwhile (the outcomes still
  in their breaker window and its cool-downs), then turns the fleet back on.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import math
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from squawk.policy import (
    Action,
    Admission,
    BreakerState,
    Decision,
    FleetAnswer,
    Outcome,
    Profile,
    Reason,
    TokenBucketConfig,
    UpstreamConfig,
    guard_fleet,
)
from squawk.policy.cooldown import (
    COOL_DOWN_SPREAD_FRACTION,
    SPREAD_FRACTION,
    shared_wait,
    spread,
    within,
)
from squawk.policy.outcome import Verdict
from squawk.policy.text import shown_text
from squawk.policy.timing import EMPTY, Window, added, rolled, seconds
from squawk.wire import NO_ADMIT_ARGS, AdmitArgs

from ...config import ConfigError
from ...config.state import StateSettings
from ...settings import STATE_TLS_CA, STATE_TLS_CERT, STATE_TLS_KEY
from ..lifecycle.tls import read_pem
from ..telemetry.throttle import LOG_EVERY_S, Throttle
from .pod_store import PodStore, Source
from .registry import Transition, Upstreams

__all__ = ["FleetStore"]

log = logging.getLogger(__name__)

_SCRIPT = resources.files(__package__).joinpath("fleet.lua").read_text(encoding="utf-8")
_VERDICT = {Verdict.IGNORED: 0, Verdict.SUCCESS: 1, Verdict.FAILURE: 2}
# The script's verdict for a throttled failure: the token bucket and the
# cool-down count it, the breaker window does not (squawk.policy.outcome).
_THROTTLED = 3
_ONE_MS = timedelta(milliseconds=1)
# Late answers in a row that count as an outage.
_LATE_IN_A_ROW = 3
# The background writer: at most this many upstreams wait to be written
# (each one's outcomes summed), as many as the registry tracks; one pipeline
# carries at most _WRITE_BATCH of them.
_MAX_QUEUED = 10_000
_WRITE_BATCH = 512
# The resync after an outage: upstreams per round trip, the event loop given
# back between rounds. 512 a round held the loop 40-90 ms at a time (and
# health checks past half a second on a busy machine).
_REPLAY_BATCH = 64
# A background write or a ping waits this long (nobody waits on it).
_BACKGROUND_TIMEOUT_S = 1.0
# The reconnect pings' backoff.
_PING_FIRST_S, _PING_MAX_S = 0.1, 2.0
# Outcomes replayed per upstream after an outage (the latest ones).
_REPLAY_MAX = 100
_MAX_CONNECTIONS = 32
_KEY_CACHE = 4096

Key = tuple[str, str]


@dataclass(slots=True)
class _Missed:
    """What this pod saw of one upstream while the fleet was unreachable."""

    config: UpstreamConfig
    # (successes + failures, failures) per breaker-window bucket, monotonic time.
    window: Window = EMPTY
    cool_until: float = -math.inf


@dataclass(slots=True)
class _Pending:
    """One upstream's outcomes waiting for the background writer, summed."""

    profile: Profile
    successes: int = 0
    failures: int = 0
    # Throttled failures: for the token bucket and the cool-down only.
    throttled: int = 0
    # The longest Retry-After among the failures, to share, ms; -1 none.
    hint: int = -1


class FleetStore(PodStore):
    def __init__(
        self,
        upstreams: Upstreams,
        settings: StateSettings,
        on_transition: Callable[[Transition], None] | None = None,
        on_up: Callable[[bool], None] | None = None,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(upstreams)
        try:
            from redis.exceptions import ResponseError
        except ImportError:  # pragma: no cover - tested in a subprocess (test_start_errors.py)
            # A configuration error (exit code 2), not a crash: the policy or
            # SQUAWK_STATE_URL asked for a store this installation cannot run.
            raise ConfigError(
                "state.store redis needs the redis client: pip install 'squawk-daemon[redis]'"
            ) from None
        self.settings = settings
        self.deadline_s = seconds(settings.deadline)
        self._pod = settings.pod_name()
        self._on_transition = on_transition
        self._on_up = on_up
        self._on_dropped = on_dropped
        self._redis, self._sentinels = _connect(settings)
        self._script = self._redis.register_script(_SCRIPT)
        self._up = True
        self._late = 0
        self._down_since = 0.0
        self._local_answers = 0
        self._missed: dict[Key, _Missed] = {}
        self._queue: dict[Key, _Pending] = {}
        # Writes the fleet never got, since start (the metric's value).
        self.dropped = 0
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._keys: dict[Key, list[str]] = {}
        self._args: dict[UpstreamConfig, str] = {}
        # Upstreams whose settings differ from the fleet's, already logged.
        self._differ: set[Key] = set()
        self._closing = False
        self._outage_logged = False
        self._throttle = Throttle(LOG_EVERY_S)
        self._refusal = ResponseError

    def describe(self) -> str:
        return f"redis at {self.settings.where} as pod {self._pod!r}"

    async def start(self) -> None:
        self._spawn(self._writer())
        try:
            async with asyncio.timeout(_BACKGROUND_TIMEOUT_S):
                await self._redis.ping()
        except Exception as exc:
            self._lost(exc)

    async def aclose(self) -> None:
        self._closing = True
        self._wake.set()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._redis.aclose()
        for sentinel in self._sentinels:
            await sentinel.aclose()

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the calls ----------------------------------------------------------

    async def admit(
        self,
        profile: Profile,
        upstream: str,
        until: float | None = None,
        args: AdmitArgs = NO_ADMIT_ARGS,
    ) -> tuple[Admission, Source | None]:
        # The pod's own admission is taken only once the fleet has allowed
        # the call: a half-open pod's probe slot taken for a call the fleet
        # then refused would never see an outcome, and would hold the pod's
        # round shut until it restarts. The pace is the pod's own (a
        # fleet-wide pace is not built yet), taken with the pod's
        # admission; a lease of several permits is not granted here, as the
        # fleet counts each call it admits.
        deadline, cost = args.deadline, args.cost
        if not self.upstreams.would_admit(profile, upstream, deadline, cost):
            return self.upstreams.admit(profile, upstream, deadline, cost), self._source()
        config = profile.for_upstream(upstream)
        reply = await self._call(profile, upstream, config, ("admit", 0, -1, 0, -1), until)
        if reply is None:
            return self.upstreams.admit(profile, upstream, deadline, cost), self._local()
        self._moved(profile.name, upstream, reply)
        _, after, allowed, reason, wait_ms, probe, _ = reply
        state = BreakerState(after)
        if not allowed:
            if reason == 1:
                why, wait = Reason.UPSTREAM_COOLING_DOWN, _cool_left(wait_ms, config)
                fraction = COOL_DOWN_SPREAD_FRACTION
            else:
                why, wait = Reason.CIRCUIT_OPEN, _open_left(wait_ms, config)
                fraction = SPREAD_FRACTION
            jittered = within(spread(wait, self.upstreams.rng, fraction), wait, deadline)
            return Admission(False, why, jittered, state, False, permits=0), Source.FLEET
        local = self.upstreams.admit(profile, upstream, deadline, cost)
        if not local.allowed:
            # Another call took the pod's last slot while Redis answered
            # (rare: a half-open pod); the fleet's slot, if it was one, stays
            # taken until the fleet's round restarts.
            return local, Source.FLEET
        worst = max(local.breaker_state, state, key=_SEVERITY.__getitem__)
        return local._replace(breaker_state=worst, probe=local.probe or bool(probe)), Source.FLEET

    async def after_failure(
        self,
        profile: Profile,
        upstream: str,
        outcome: Outcome,
        decision: Decision,
        deadline: timedelta | None,
        until: float | None = None,
    ) -> tuple[Decision, Source | None]:
        local = self.upstreams.after_failure(profile, upstream, outcome, decision, deadline)
        if local.action is not Action.RETRY:
            # The fleet cannot change this answer: its write need not hold the call.
            self._enqueue(profile, upstream, outcome)
            return local, self._source()
        config = profile.for_upstream(upstream)
        op = (
            "retry",
            _fleet_verdict(config, outcome),
            self._hint(config, outcome),
            local.delay // _ONE_MS,
            -1 if deadline is None else deadline // _ONE_MS,
        )
        reply = await self._call(profile, upstream, config, op, until, outcome)
        if reply is None:
            return local, self._local()
        self._moved(profile.name, upstream, reply)
        verdict, a, b = reply[2], reply[3], reply[4]
        if verdict == 1:
            answer = FleetAnswer(open_left=_open_left(a, config))
        elif verdict == 2:
            answer = FleetAnswer(budget_spent=_budget_clause(config, a, b))
        else:
            answer = FleetAnswer(cooling=_cool_left(a, config))
        return guard_fleet(local, answer, deadline, self.upstreams.rng), Source.FLEET

    def record(self, outcomes: Sequence[tuple[Profile, str, Outcome]]) -> None:
        super().record(outcomes)
        for profile, upstream, outcome in outcomes:
            self._enqueue(profile, upstream, outcome)

    # -- talking to Redis ---------------------------------------------------

    def _source(self) -> Source:
        return Source.FLEET if self._up else self._local()

    def _local(self) -> Source:
        """Every answer marked LOCAL goes through here, as it goes into the
        metric (squawk_state_answers_total{state="local"}): one taken while
        the store is away -- the call that found it away included -- is
        counted for the line that says the outage ended, so the line and
        the metric agree. (Late answers while the store is up are local
        too, but belong to no outage.)"""
        if not self._up:
            self._local_answers += 1
        return Source.LOCAL

    def _call_args(
        self, profile: str, upstream: str, config: UpstreamConfig, op: tuple[Any, ...]
    ) -> tuple[list[str], list[Any]]:
        keys = self._keys.get((profile, upstream))
        if keys is None:
            if len(self._keys) >= _KEY_CACHE:
                self._keys.clear()
            name = f"{profile}\0{upstream}".encode("utf-8", "surrogatepass")
            # A digest, not the name: bounded keys, and one hash slot per
            # upstream for Redis Cluster (the braces are its hash tag).
            base = (
                f"{self.settings.key_prefix}{{{hashlib.blake2b(name, digest_size=12).hexdigest()}}}"
            )
            keys = self._keys[(profile, upstream)] = [base, base + ":pods"]
        tail = self._args.get(config)
        if tail is None:
            words = " ".join(map(str, _config_args(config, self.settings.min_pods)))
            fingerprint = hashlib.blake2b(words.encode(), digest_size=6).hexdigest()
            tail = self._args[config] = f"{words} {fingerprint}"
        name, a, b, c, d = op
        return keys, [f"{name} {self._pod} {a} {b} {c} {d} {tail}"]

    async def _call(
        self,
        profile: Profile,
        upstream: str,
        config: UpstreamConfig,
        op: tuple[Any, ...],
        until: float | None,
        outcome: Outcome | None = None,
    ) -> list[int] | None:
        """The script's reply, or None when the fleet cannot answer in time.

        `outcome`, the one the call reports: when the call was never sent it
        still reaches the fleet, by the background writer or the resync. A
        call sent but answered late has most likely landed: it is not sent
        again, so an outcome is never counted twice."""
        if not self._up:
            if outcome is not None:
                self._miss_outcome(profile, upstream, outcome)
            return None
        loop = asyncio.get_running_loop()
        left = (loop.time() + self.deadline_s if until is None else until) - loop.time()
        if left <= 0:
            # A batch past its deadline: the rest of its items are written behind.
            if outcome is not None:
                self._enqueue(profile, upstream, outcome)
            return None
        keys, args = self._call_args(profile.name, upstream, config, op)
        try:
            async with asyncio.timeout(left):
                raw = await self._script(keys=keys, args=args)
        except TimeoutError:
            self._late += 1
            if self._late >= _LATE_IN_A_ROW:
                self._lost(TimeoutError(f"{_LATE_IN_A_ROW} answers in a row came late"))
            if outcome is not None:
                # Sent or not (the time may have gone on the connection), the
                # outcome is written again behind: counted twice at worst,
                # never lost; the cautious error for a breaker.
                self._enqueue(profile, upstream, outcome)
            return None
        except self._refusal as exc:
            # Redis answered, with an error about this call (a key of another
            # type, a script refused): this call is local, the store is up.
            self._odd(exc)
            return None
        except Exception as exc:
            self._lost(exc)
            if outcome is not None:
                self._miss_outcome(profile, upstream, outcome)
            return None
        self._late = 0
        return self._usable(raw, op[0])

    def _usable(self, raw: object, op: str) -> list[int] | None:
        if isinstance(raw, Exception):
            self._odd(raw)
            return None
        reply = _reply(raw, _REPLY_LENGTH[op])
        if reply is None:
            self._odd(ValueError("a script reply of the wrong shape"))
        return reply

    def _moved(self, profile: str, upstream: str, reply: Sequence[int]) -> None:
        """What a reply tells: a fleet breaker's transition, and (its last
        field) settings that differ from those the fleet's key was first
        written with, logged once per upstream."""
        if reply[-1] and (profile, upstream) not in self._differ and len(self._differ) < _KEY_CACHE:
            self._differ.add((profile, upstream))
            log.warning(
                "upstream %s (profile %s): this pod's breaker or budget settings differ "
                "from those the fleet's state was written with; the fleet reads its state "
                "with each caller's own, so pods may disagree (run the same policy on every pod)",
                shown_text(upstream, 200),
                shown_text(profile, 200),
            )
        before, after = reply[0], reply[1]
        if before != after and self._on_transition is not None:
            tracked = self.upstreams.tracks(profile, upstream)
            moved = BreakerState(before), BreakerState(after)
            self._on_transition(Transition(profile, upstream, *moved, True, tracked))

    def _hint(self, config: UpstreamConfig, outcome: Outcome) -> int:
        shared = shared_wait(outcome.retry_after, config.share_retry_after, config.max_cool_down)
        return -1 if shared is None else math.ceil(shared / _ONE_MS)

    def _enqueue(self, profile: Profile, upstream: str, outcome: Outcome) -> None:
        verdict = _fleet_verdict(profile.for_upstream(upstream), outcome)
        if verdict == _VERDICT[Verdict.IGNORED]:
            return
        if not self._up:
            self._miss_outcome(profile, upstream, outcome)
            return
        key = (profile.name, upstream)
        pending = self._queue.get(key)
        if pending is None:
            if len(self._queue) >= _MAX_QUEUED:
                self._drop(1, f"more than {_MAX_QUEUED} upstreams wait to be written")
                return
            pending = self._queue[key] = _Pending(profile)
        pending.profile = profile  # a reload's, if one came meanwhile
        if verdict != _VERDICT[Verdict.SUCCESS]:
            if verdict == _THROTTLED:
                pending.throttled += 1
            else:
                pending.failures += 1
            pending.hint = max(pending.hint, self._hint(profile.for_upstream(upstream), outcome))
        else:
            pending.successes += 1
        self._wake.set()

    def _drop(self, count: int, why: str) -> None:
        """Writes the fleet will never get: counted, and logged throttled."""
        self.dropped += count
        if self._on_dropped is not None:
            self._on_dropped(count)
        held = self._throttle.ready("dropped")
        if held is not None:
            log.warning(
                "fleet state store %s: %d outcome(s) not written to the fleet (%s)%s; "
                "this pod's own state counted them",
                self.settings.where,
                count,
                why,
                f" ({held} more drops since the last report)" if held else "",
            )

    async def _writer(self) -> None:
        """Writes the queued outcomes, pipelined, until the store closes."""
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()
            while self._queue and self._up:
                # Taken out before the wait: outcomes that come meanwhile
                # start new sums, written in the next round.
                batch = list(itertools.islice(self._queue.items(), _WRITE_BATCH))
                for key, _ in batch:
                    del self._queue[key]
                await self._write(batch)

    async def _write(self, batch: Sequence[tuple[Key, _Pending]]) -> bool:
        # The context closes the pipeline on every path: one left holding a
        # connection is an asyncio "Unclosed Pipeline client" at each outage.
        async with self._redis.pipeline(transaction=False) as pipe:
            for (_, upstream), sums in batch:
                config = sums.profile.for_upstream(upstream)
                op = ("record", sums.successes, sums.hint, sums.failures, sums.throttled)
                keys, args = self._call_args(sums.profile.name, upstream, config, op)
                await self._script(keys=keys, args=args, client=pipe)  # queued
            try:
                async with asyncio.timeout(_BACKGROUND_TIMEOUT_S):
                    # An error about one item (a script refused) is that
                    # item's answer, not the pipeline's.
                    replies = await pipe.execute(raise_on_error=False)
            except Exception as exc:
                self._lost(exc)
                # Whether they landed is unknown; counting them again is the safer error.
                for (_, upstream), sums in batch:
                    self._miss(sums.profile, upstream, sums.successes, sums.failures, sums.hint)
                return False
        for ((_, upstream), sums), raw in zip(batch, replies, strict=True):
            reply = self._usable(raw, "record")
            if reply is not None:
                self._moved(sums.profile.name, upstream, reply)
        return True

    # -- outages ------------------------------------------------------------

    def _lost(self, exc: BaseException) -> None:
        if not self._up or self._closing:
            return
        self._up = False
        self._late = 0
        self._down_since = time.monotonic()
        self._local_answers = 0
        # One line when an outage begins and one when it ends; a store that
        # keeps coming and going says so at most once per LOG_EVERY_S.
        held = self._throttle.ready("outage")
        self._outage_logged = held is not None
        if held is not None:
            # The error's text names an address at most; it passes redaction anyway.
            log.warning(
                "fleet state store %s unreachable (%s: %s)%s; deciding from this pod's own "
                "state until it answers",
                self.settings.where,
                type(exc).__name__,
                shown_text(str(exc), 200),
                f" ({held} more outages since the last report)" if held else "",
            )
        if self._on_up is not None:
            self._on_up(False)
        self._spawn(self._reconnect())

    def _log_long_outage(self) -> None:
        """An outage whose first line the throttle held back, still going
        after the throttle's interval, is logged after all: an outage that
        never ends must not go unsaid."""
        if self._outage_logged or time.monotonic() - self._down_since < LOG_EVERY_S:
            return
        self._outage_logged = True
        log.warning(
            "fleet state store %s unreachable for %.0f s; deciding from this pod's own "
            "state until it answers",
            self.settings.where,
            time.monotonic() - self._down_since,
        )

    def _odd(self, exc: BaseException) -> None:
        held = self._throttle.ready("odd")
        if held is not None:
            log.warning(
                "fleet state store %s: an answer this daemon cannot use (%s: %s)%s; "
                "that call decided from this pod's own state",
                self.settings.where,
                type(exc).__name__,
                shown_text(str(exc), 200),
                f" ({held} more since the last report)" if held else "",
            )

    def _miss_outcome(self, profile: Profile, upstream: str, outcome: Outcome) -> None:
        config = profile.for_upstream(upstream)
        verdict = _fleet_verdict(config, outcome)
        if verdict == _VERDICT[Verdict.IGNORED]:
            return
        failed = verdict != _VERDICT[Verdict.SUCCESS]
        hint = self._hint(config, outcome) if failed else -1
        if verdict == _THROTTLED:
            # Its cool-down is kept; the breaker window never counts it.
            self._miss(profile, upstream, 0, 0, hint)
            return
        self._miss(profile, upstream, int(not failed), int(failed), hint)

    def _miss(
        self, profile: Profile, upstream: str, successes: int, failures: int, hint: int
    ) -> None:
        """Keep outcomes the fleet did not get, for the resync; `hint` as _Pending's."""
        key = (profile.name, upstream)
        missed = self._missed.get(key)
        if missed is None:
            if len(self._missed) >= self.upstreams.max_upstreams:
                self._drop(
                    successes + failures or 1,  # a throttled failure has neither
                    f"more than {self.upstreams.max_upstreams} upstreams seen "
                    "while the store was away",
                )
                return
            missed = self._missed[key] = _Missed(profile.for_upstream(upstream))
        cb = missed.config.circuit_breaker
        now = time.monotonic()
        if successes + failures:
            missed.window = added(
                missed.window, now, seconds(cb.window), cb.buckets, successes + failures, failures
            )
        if hint >= 0:
            missed.cool_until = max(missed.cool_until, now + hint / 1000)

    async def _reconnect(self) -> None:
        # Connections from before the outage may be dead or half-read: drop
        # them once (the script is loaded again below: a restarted server
        # has none). A dead connection's close may fail: nothing to do then.
        with contextlib.suppress(Exception):
            await self._redis.connection_pool.disconnect()
        wait = _PING_FIRST_S
        while not self._closing:
            await asyncio.sleep(wait)
            wait = min(2 * wait, _PING_MAX_S)
            self._log_long_outage()
            try:
                if not await self._answers_in_time():
                    continue
                async with asyncio.timeout(_BACKGROUND_TIMEOUT_S):
                    await self._redis.script_load(_SCRIPT)
                await self._resync()
            except Exception:
                continue
            self._up = True
            if self._outage_logged:
                log.warning(
                    "fleet state store %s answers again after %.1f s; %d decisions meanwhile "
                    "came from this pod's own state",
                    self.settings.where,
                    time.monotonic() - self._down_since,
                    self._local_answers,
                )
            if self._on_up is not None:
                self._on_up(True)
            self._wake.set()
            return

    async def _answers_in_time(self) -> bool:
        """Whether Redis answers pings within the deadline, as many in a row
        as late answers make an outage: a Redis that is up but slow stays
        out, instead of the fleet flapping on and off with a log line each."""
        loop = asyncio.get_running_loop()
        # Untimed: it may open the connection (and TLS, AUTH, SELECT), which
        # the calls that follow do not pay.
        async with asyncio.timeout(_BACKGROUND_TIMEOUT_S):
            await self._redis.ping()
        for _ in range(_LATE_IN_A_ROW):
            started = loop.time()
            async with asyncio.timeout(_BACKGROUND_TIMEOUT_S):
                await self._redis.ping()
            if loop.time() - started > self.deadline_s:
                return False
        return True

    async def _resync(self) -> None:
        """Replay what this pod saw while the fleet was away: each upstream's
        outcomes still inside its breaker window (successes first, at most
        _REPLAY_MAX of each) and its cool-down left, one script call per
        upstream, _REPLAY_BATCH upstreams per round trip, giving the event
        loop back between them. An upstream leaves the list once its replay
        is answered, so an interrupted resync never replays one twice."""
        while self._missed and not self._closing:
            chunk = list(itertools.islice(self._missed.items(), _REPLAY_BATCH))
            now = time.monotonic()
            async with self._redis.pipeline(transaction=False) as pipe:
                replies = await self._replay(pipe, chunk, now)
            for raw in replies:
                # An item Redis refused would be refused again.
                self._usable(raw, "replay")
            await asyncio.sleep(0)

    async def _replay(
        self, pipe: Any, chunk: Sequence[tuple[Key, _Missed]], now: float
    ) -> list[object]:
        """One round of the resync: its replies, or raises with the chunk kept."""
        for (profile, upstream), seen in chunk:
            cb = seen.config.circuit_breaker
            window = rolled(seen.window, now, seconds(cb.window), cb.buckets)
            failures = min(window.second, _REPLAY_MAX)
            successes = min(window.first - window.second, _REPLAY_MAX)
            cooling = math.ceil((seen.cool_until - now) * 1000) if seen.cool_until > now else -1
            # A cool-down comes with a failure: a throttled one, which
            # cools the fleet without a failure in its breaker window.
            throttled = 1 if cooling > 0 and not failures else 0
            op = ("replay", successes, cooling, failures, throttled)
            keys, args = self._call_args(profile, upstream, seen.config, op)
            await self._script(keys=keys, args=args, client=pipe)  # queued
        # Taken out before the wait: outcomes seen meanwhile start new
        # entries, replayed in a later round, not dropped with these.
        for key, _ in chunk:
            del self._missed[key]
        try:
            async with asyncio.timeout(_BACKGROUND_TIMEOUT_S):
                replies: list[object] = await pipe.execute(raise_on_error=False)
        except BaseException:
            for key, seen in chunk:
                self._missed.setdefault(key, seen)
            raise
        return replies


# Each with the "settings differ" flag last.
_REPLY_LENGTH = {"admit": 7, "record": 3, "retry": 6, "replay": 3}
# A hostile or broken store's numbers stay within what timedelta holds.
_MAX_REPLY_MS = 10**12


def _reply(raw: object, length: int) -> list[int] | None:
    """The script's reply as its fields, or None when it is not one: a
    store's answer is input too."""
    if not isinstance(raw, list) or len(raw) != length:
        return None
    if not all(type(v) is int for v in raw) or raw[0] not in _STATES or raw[1] not in _STATES:
        return None
    return [min(max(v, -1), _MAX_REPLY_MS) for v in raw]


_STATES = {int(s) for s in BreakerState}


def _open_left(ms: int, config: UpstreamConfig) -> timedelta:
    # What the store says, held to what the rules allow: never past open_for.
    return min(max(ms, 0) * _ONE_MS, config.circuit_breaker.open_for)


def _cool_left(ms: int, config: UpstreamConfig) -> timedelta:
    # Never past the profile's max_cool_down, whatever the store says.
    return min(max(ms, 0) * _ONE_MS, config.max_cool_down)


_SEVERITY = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}


def _budget_clause(config: UpstreamConfig, a: int, b: int) -> str:
    budget = config.retry_budget
    if isinstance(budget, TokenBucketConfig):
        return (
            f"retry tokens are at {a / 1000:g} of {budget.max_tokens:g}, at or below "
            f"the {budget.max_tokens / 2:g} that stops retries"
        )
    return f"{a} retries across the pods against {b} calls in the last {seconds(budget.ttl):g} s"


def _config_args(config: UpstreamConfig, min_pods: int) -> list[Any]:
    cb, budget = config.circuit_breaker, config.retry_budget
    head: list[Any] = [
        int(cb.enabled),
        repr(cb.failure_ratio),
        cb.minimum_calls,
        round(seconds(cb.window) * 1000),
        cb.buckets,
        round(seconds(cb.open_for) * 1000),
        cb.half_open_probes,
        repr(cb.close_ratio),
        min_pods,
    ]
    cool = math.ceil(config.max_cool_down / _ONE_MS)
    if isinstance(budget, TokenBucketConfig):
        return [*head, "token_bucket", 0, 0, 1, budget._max, budget._refill, cool]
    floor = budget.min_per_second * seconds(budget.ttl)
    return [
        *head,
        "ratio",
        repr(budget.ratio),
        repr(floor),
        round(seconds(budget.ttl) * 1000),
        0,
        0,
        cool,
    ]


def _fleet_verdict(config: UpstreamConfig, outcome: Outcome) -> int:
    """The script's verdict for `outcome`: _VERDICT's, or _THROTTLED for a
    failure the breaker does not count (UpstreamConfig.breaker_verdict)."""
    counted = config.verdict(outcome)
    if counted is Verdict.FAILURE and config.breaker_verdict(outcome) is Verdict.IGNORED:
        return _THROTTLED
    return _VERDICT[counted]


# -- the connection -----------------------------------------------------------


def _connect(settings: StateSettings) -> tuple[Any, list[Any]]:
    """The Redis client, by URL or through Redis Sentinel, and the sentinels'
    own clients (closed with it). Settings that cannot work stop the start
    (ConfigError, exit code 2), naming the setting and the file."""
    from redis.asyncio import BlockingConnectionPool, Redis
    from redis.asyncio.retry import Retry
    from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
    from redis.backoff import NoBackoff

    options: dict[str, Any] = {
        "max_connections": _MAX_CONNECTIONS,
        # Our own deadlines bound every wait; these only end a hung socket.
        "socket_connect_timeout": _BACKGROUND_TIMEOUT_S,
        "socket_timeout": _BACKGROUND_TIMEOUT_S,
        "retry": Retry(NoBackoff(), 0),
    }
    tls = _tls_options(settings)
    if not settings.sentinels:
        pool = BlockingConnectionPool.from_url(settings.url, **options, **tls)
        return Redis.from_pool(pool), []  # owns the pool: aclose() closes its connections
    if settings.url:
        raise ConfigError("state.sentinels and state.url are both set: give one of them")

    class BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
        """The master's connections, found through the sentinels, at most
        max_connections of them (a caller waits for one, as with a URL)."""

    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        list(settings.sentinels),
        sentinel_kwargs={
            "socket_connect_timeout": _BACKGROUND_TIMEOUT_S,
            "socket_timeout": _BACKGROUND_TIMEOUT_S,
        },
    )
    client = sentinel.master_for(
        settings.service_name, connection_pool_class=BlockingSentinelPool, **options
    )
    return client, list(sentinel.sentinels)


def _tls_options(settings: StateSettings) -> dict[str, str]:
    """redis-py's own TLS keywords for a rediss:// URL: the CA to trust
    (unset: the system's), and the client's certificate and key. Each file
    is checked as Python's ssl loads it, so a bad one is named at start
    rather than found at the first handshake as an outage."""
    given = [
        (f"{setting.file_key} ({setting.env})", keyword, path)
        for setting, keyword, path in (
            (STATE_TLS_CA, "ssl_ca_certs", settings.tls_ca),
            (STATE_TLS_CERT, "ssl_certfile", settings.tls_cert),
            (STATE_TLS_KEY, "ssl_keyfile", settings.tls_key),
        )
        if path
    ]
    if not given:
        return {}
    if settings.sentinels or urlsplit(settings.url).scheme != "rediss":
        raise ConfigError(f"{given[0][0]}: needs a rediss:// state.url")
    if bool(settings.tls_cert) != bool(settings.tls_key):
        raise ConfigError(
            f"{STATE_TLS_CERT.file_key} and {STATE_TLS_KEY.file_key} go together: "
            "a client certificate needs its key"
        )
    for name, _, path in given:
        try:
            read_pem(name, path)
        except OSError as exc:
            raise ConfigError(f"{name} {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    context = ssl.create_default_context()
    for name, keyword, path in given:
        try:
            if keyword == "ssl_ca_certs":
                context.load_verify_locations(cafile=path)
            elif keyword == "ssl_certfile":
                context.load_cert_chain(path, settings.tls_key)
        except ssl.SSLError:
            what = (
                "holds no CA certificate"
                if keyword == "ssl_ca_certs"
                else (f"not a certificate, or not the one whose key is {settings.tls_key}")
            )
            raise ConfigError(f"{name} {path}: {what}") from None
    return {keyword: path for _, keyword, path in given}
