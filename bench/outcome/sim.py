"""The outcome benchmark's overloads as an event simulation of the pod's
own state machines, on a simulated clock: `python -m bench.outcome.sim`.

`make bench-outcome` measures the real thing (processes, sockets, four
executors in three languages) once per variant, and one run of the learned
pace is one draw of a noisy process: whether the first throttle falls early
or late in a measurement bucket moves a 2x run's goodput by 10 %. This runs
the same shapes through the pure core (squawk.policy.upstream's admit and
record_outcome, the same functions the daemon calls) many times over, each
with its own seed, in well under a second a run, so a change to the pacer
is judged by the spread of its outcomes rather than by one draw.

The model, kept to what the pacer sees: Poisson arrivals of steps (0.5 x C,
then the overload, then 0.5 x C; or 0.8 x C with the capacity halved), each
with a 10 s deadline and 3 attempts; Admit with the deadline left (a refusal
waits its retry_after and asks again, if that fits, but a step the pace
sheds, UPSTREAM_SATURATED, ends as the runners end it); a paced wait is slept;
the upstream is a token bucket of C calls/s holding BURST_S x C (the
benchmark's upstream) answering 429 with Retry-After: 1 when empty; a
success reaches the daemon within `report_delay` (the runners batch them
for up to 50 ms), a failure at once (the runner's DecideRetry carries
it); a throttled attempt is retried after its Retry-After plus up to 20 %
(the jitter every Squawk refusal gets), a storm's after the default
backoff. What it leaves out: the retry budget (so it retries more than
the runners do), the executors' own scheduling, the daemon's latency and
CPU.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from squawk.policy.fair import Fairness
from squawk.policy.outcome import Outcome
from squawk.policy.ratelimit import rate_limit_hint
from squawk.policy.types import Reason
from squawk.policy.upstream import UpstreamConfig, UpstreamState, admit, record_outcome

__all__ = ["Result", "main", "simulate"]

BURST_S = 0.5  # as bench.outcome.run
DEADLINE_S = 10.0
MAX_ATTEMPTS = 3
RETRY_AFTER = timedelta(seconds=1)
BACKOFF_S = 0.5  # the default profile's first backoff
LATENCY_S = 0.002
EPOCH = 1_714_564_800.0  # the simulated clock's zero, as a wall time
# Header dialects at 10x overload: (bucket seconds, dialect). The bucket
# holds that many seconds of C and refills continuously (OpenAI, Anthropic)
# or is a window that starts over (ietf, coarse).
DIALECTS = {
    "openai-h": (BURST_S, "openai"),
    "openai-s": (1.0, "openai"),
    "openai-m": (60.0, "openai"),
    "anthropic-s": (1.0, "anthropic"),
    "anthropic-m": (60.0, "anthropic"),
    "ietf": (1.0, "ietf"),
    "coarse": (1.0, "coarse"),
    "lying": (1.0, "lying"),
}


# The keyed variants (issue 35's): each key and its part of the demand.
# weights: 3 : 1, each asking 2 x C; tenants: three light keys at 0.2 x C
# and one flooding at 2 x C, at equal weights.
HEAVY, LIGHT = Fairness("heavy", 3.0), Fairness("light", 1.0)
FLOOD = Fairness("tenant-flood")
KEYED: dict[str, tuple[tuple[Fairness, float], ...]] = {
    "weights": ((HEAVY, 2.0), (LIGHT, 2.0)),
    "tenants": (
        (Fairness("tenant-a"), 0.2),
        (Fairness("tenant-b"), 0.2),
        (Fairness("tenant-c"), 0.2),
        (FLOOD, 2.0),
    ),
}


def _retry_in(outcome: Outcome, attempts: int, squawk: bool, rng: random.Random) -> float:
    """Seconds until a failed attempt is sent again: its Retry-After plus
    up to 20 %; without one (a storm's status), the default profile's
    backoff, 0.5 s doubling, with DecideRetry's sine jitter of +-10 %, or
    the full jitter of the loop without Squawk (bench.outcome.executor)."""
    if outcome.retry_after is not None:
        return outcome.retry_after.total_seconds() * rng.uniform(1.0, 1.2)
    base = BACKOFF_S * 2 ** (attempts - 1)
    return base * (1 + 0.1 * math.sin(attempts)) if squawk else rng.uniform(0.0, base)


def _go_duration(seconds: float) -> str:
    ms = round(seconds * 1000)
    if ms < 1000:
        return f"{ms}ms"
    minutes, rest = divmod(ms / 1000, 60)
    return f"{int(minutes)}m{rest:g}s" if minutes else f"{rest:g}s"


def _headers(
    dialect: str, now: float, tokens: float, cap: float, rate: float, draw: float
) -> dict[str, str]:
    """The headers an upstream of `dialect` sends with `tokens` of `cap`
    left at `now`, refilling at `rate`; `draw` in [0, 1) picks a lie."""
    left = max(0, int(tokens))
    full_in = (cap - tokens) / rate
    if dialect == "openai":
        return {
            "x-ratelimit-limit-requests": str(int(cap)),
            "x-ratelimit-remaining-requests": str(left),
            "x-ratelimit-reset-requests": _go_duration(full_in),
        }
    if dialect == "anthropic":
        # RFC 3339 in whole seconds, as Anthropic sends it.
        at = datetime.fromtimestamp(int(EPOCH + now + full_in), UTC)
        return {
            "anthropic-ratelimit-requests-limit": str(int(cap)),
            "anthropic-ratelimit-requests-remaining": str(left),
            "anthropic-ratelimit-requests-reset": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    if dialect == "ietf":
        # A fixed window of one second: t is the whole seconds to its end,
        # rounded up (bench/upstream-go's).
        return {
            "ratelimit": f'"default";r={left};t={math.ceil(math.floor(now) + 1 - now)}',
            "ratelimit-policy": f'"default";q={int(cap)};w=1',
        }
    if dialect == "lying":
        # A huge quota on most answers, one call left for a day on one in ten.
        lie = draw < 0.1
        return {
            "x-ratelimit-limit": "1000000",
            "x-ratelimit-remaining": "1" if lie else "999999",
            "x-ratelimit-reset": "86400" if lie else "1",
        }
    # coarse: whole seconds until the next token, rounded up (0 when full).
    next_token = math.ceil((math.floor(tokens) + 1 - tokens) / rate) if tokens < cap else 0
    return {
        "x-ratelimit-limit": str(int(cap)),
        "x-ratelimit-remaining": str(left),
        "x-ratelimit-reset": str(next_token),
    }


@dataclass(frozen=True, slots=True)
class Result:
    """The middle phase: successes and attempts per second over C; for the
    halving, successes from 5 s in over the halved capacity."""

    successes_per_c: float
    attempts_per_c: float
    # The share of the steps started in the middle phase that succeeded.
    step_success: float = 0.0
    # The share of the middle phase's attempts the upstream rejected.
    rejected: float = 0.0
    # weights: the heavy key's successes over the light one's; tenants:
    # the least share of its steps a light key got done (0: no keys).
    ratio: float = 0.0
    # What the upstream held as the middle phase began, over C x its
    # seconds: served on top of C by a pace that spends it (as
    # bench.outcome.run's bank_per_c).
    bank_per_c: float = 0.0


@dataclass(slots=True)
class _Step:
    deadline: float
    attempts: int = 0
    ok: bool = False
    fairness: Fairness | None = None


@dataclass(slots=True)
class _World:
    capacity: Callable[[float], float]
    cap: float
    tokens: float
    last: float = 0.0
    # A fixed window of one second that starts over, not a bucket (ietf).
    fixed: bool = False
    state: UpstreamState = field(default_factory=UpstreamState)
    served: list[float] = field(default_factory=list)
    sent: list[float] = field(default_factory=list)

    def level(self, now: float) -> float:
        """What the upstream holds at `now`."""
        if self.fixed:
            return self.capacity(now) if math.floor(now) > math.floor(self.last) else self.tokens
        return min(self.cap, self.tokens + (now - self.last) * self.capacity(now))

    def call(self, now: float) -> bool:
        self.tokens = self.level(now)
        self.last = now
        self.sent.append(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            self.served.append(now)
            return True
        self.tokens = max(0.0, self.tokens - 0.05)  # a rejection costs, as the benchmark's
        return False


def simulate(
    variant: str = "2x",
    seed: int = 0,
    *,
    capacity: float = 20.0,
    warm: float = 3.0,
    hot: float = 20.0,
    after: float = 7.0,
    report_delay: float = 0.05,
    config: UpstreamConfig | None = None,
    squawk: bool = True,
    burst_s: float = BURST_S,
) -> Result:
    """One run of `variant` ("2x", "10x", "halving", a keyed one (KEYED),
    or "storm-S": half
    the calls of the middle phase answered status S at random, at 0.5 x C).
    `squawk`: admit every attempt (else send at once, a plain retry loop).
    `burst_s`: the seconds of C a header-less upstream's bucket holds (a
    dialect's has its own): the learned pace must hold for any."""
    halving = variant == "halving"
    storm = int(variant[6:]) if variant.startswith("storm-") else 0
    bucket_s, dialect = DIALECTS.get(variant, (burst_s, ""))
    keyed = KEYED.get(variant, ())
    overload = (
        0.8
        if halving
        else 0.5
        if storm
        else 10.0
        if dialect
        else sum(part for _, part in keyed)
        if keyed
        else float(variant.rstrip("x"))
    )
    low = 0.8 if halving else 0.5
    cfg = config or UpstreamConfig()
    rng = random.Random(seed)
    jitter = random.Random(seed + 1)  # the daemon's own randomness

    def cap_at(now: float) -> float:
        return capacity / 2 if halving and warm <= now < warm + hot else capacity

    world = _World(cap_at, capacity * bucket_s, capacity * bucket_s, fixed=dialect == "ietf")
    if dialect:
        world.tokens = capacity  # a second's worth: the quota is in use
    events: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
    order = itertools.count()

    def at(when: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(events, (when, next(order), fn, args))

    def ask(now: float, step: _Step) -> None:
        left = step.deadline - now
        if left <= 0:
            return
        if not squawk:
            send(now, step)
            return
        world.state, answer = admit(
            world.state,
            cfg,
            now,
            retry=step.attempts > 0,
            rng=jitter,
            deadline=timedelta(seconds=left),
            fairness=step.fairness,
        )
        if not answer.allowed:
            if answer.reason is Reason.UPSTREAM_SATURATED:
                return  # shed: the runners end the step at once
            wait = answer.retry_after.total_seconds() if answer.retry_after else 0.05
            if wait < left:
                at(now + wait, ask, step)
            return
        wait = answer.wait.total_seconds()
        if wait <= left:
            at(now + wait, send, step)

    def send(now: float, step: _Step) -> None:
        step.attempts += 1
        # A storm answers before the bucket, as the benchmark's upstream
        # does: its overload errors take no call from the capacity.
        stormed = bool(storm) and warm <= now < warm + hot and rng.random() < 0.5
        if stormed:
            world.sent.append(now)
        ok = not stormed and world.call(now)
        hint = None
        if dialect:
            headers = _headers(dialect, now, world.tokens, world.cap, cap_at(now), rng.random())
            hint = rate_limit_hint(headers, EPOCH + now)
        if stormed:
            outcome = Outcome(False, storm)
        elif ok:
            outcome = Outcome(True, hint=hint)
        else:
            outcome = Outcome(False, 429, retry_after=RETRY_AFTER, hint=hint)
        step.ok = ok
        # A success waits for its batch; a failure goes with the runner's
        # DecideRetry, at once.
        delay = rng.uniform(0, report_delay) if ok else 0.0
        at(now + LATENCY_S + delay, report, outcome, now)
        if not ok and step.attempts < MAX_ATTEMPTS:
            at(now + _retry_in(outcome, step.attempts, squawk, rng), ask, step)

    def report(now: float, outcome: Outcome, sent: float) -> None:
        # The runners name the call's admission (its start stands in).
        world.state = record_outcome(world.state, cfg, now, outcome, admitted_at=sent)

    bank: list[float] = []
    at(warm, lambda now: bank.append(world.level(now)))
    steps: list[_Step] = []
    start = 0.0
    for seconds, demand in ((warm, low), (hot, overload), (after, low)):
        t = start
        while (t := t + rng.expovariate(demand * capacity)) < start + seconds:
            key = rng.choices([k for k, _ in keyed], [p for _, p in keyed])[0] if keyed else None
            steps.append(_Step(t + DEADLINE_S, fairness=key))
            at(t, ask, steps[-1])
        start += seconds
    while events:
        now, _, fn, args = heapq.heappop(events)
        fn(now, *args)

    def inside(times: list[float], since: float) -> int:
        return sum(1 for x in times if since <= x < warm + hot)

    attempts = inside(world.sent, warm) / (hot * capacity)
    rejected = inside(world.sent, warm) - inside(world.served, warm)
    middle = [s for s in steps if warm <= s.deadline - DEADLINE_S < warm + hot]
    done = sum(s.ok for s in middle) / len(middle) if middle else 0.0
    if halving:
        served = inside(world.served, warm + 5.0) / ((hot - 5.0) * capacity / 2)
        return Result(served, attempts, done)
    sent = max(1, inside(world.sent, warm))
    ratio = 0.0
    ok = {k: sum(s.ok for s in middle if s.fairness == k) for k, _ in keyed}
    if variant == "weights":
        ratio = ok[HEAVY] / max(1, ok[LIGHT])
    elif keyed:
        asked = {k: sum(1 for s in middle if s.fairness == k) for k, _ in keyed}
        ratio = min(ok[k] / max(1, asked[k]) for k, _ in keyed if k != FLOOD)
    served = inside(world.served, warm) / (hot * capacity)
    return Result(served, attempts, done, rejected / sent, ratio, bank[0] / (hot * capacity))


def _keyed_cell(variant: str, runs: Sequence[Result]) -> str:
    ratios = sorted(r.ratio for r in runs)
    if variant == "weights":
        return f"   heavy : light mean {statistics.fmean(ratios):.2f} min {ratios[0]:.2f}"
    if variant in KEYED:
        least = statistics.fmean(ratios)
        return f"   light keys' steps done: mean of least {least:.3f} min {ratios[0]:.3f}"
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.outcome.sim", description=__doc__)
    ap.add_argument("--seeds", type=int, default=100, help="runs per variant (default 100)")
    ap.add_argument(
        "--variants",
        default="2x,10x,halving,storm-529,storm-429," + ",".join([*DIALECTS, *KEYED]),
    )
    ap.add_argument("--report-delay", type=float, default=0.05, help="seconds (default 0.05)")
    ap.add_argument(
        "--burst",
        type=float,
        default=BURST_S,
        help=f"seconds of C a header-less upstream stores (default {BURST_S})",
    )
    args = ap.parse_args(argv)
    print(
        "variant    successes / C: mean  p10   min   attempts / C: mean  max"
        "   steps ok: mean  min   without Squawk   rejected: mean max"
    )
    for variant in args.variants.split(","):
        runs = [
            simulate(variant, seed, report_delay=args.report_delay, burst_s=args.burst)
            for seed in range(args.seeds)
        ]
        plain = [
            simulate(variant, seed, squawk=False, burst_s=args.burst) for seed in range(args.seeds)
        ]
        ok = sorted(r.successes_per_c for r in runs)
        sent = [r.attempts_per_c for r in runs]
        steps = [r.step_success for r in runs]
        print(
            f"{variant:10} {statistics.fmean(ok):19.3f} {ok[len(ok) // 10]:5.3f} {ok[0]:5.3f}"
            f" {statistics.fmean(sent):18.3f} {max(sent):5.3f}"
            f" {statistics.fmean(steps):15.3f} {min(steps):5.3f}"
            f" {statistics.fmean(r.step_success for r in plain):16.3f}"
            f" {statistics.fmean(r.rejected for r in runs):16.3f}"
            f" {max(r.rejected for r in runs):5.3f}" + _keyed_cell(variant, runs)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
