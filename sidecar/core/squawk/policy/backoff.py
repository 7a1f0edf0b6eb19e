"""Backoff: how long to wait before resending the same payload.

The default jitter is the executor guide's deterministic sine jitter: the same
attempt always waits the same time, so a decision can be replayed exactly in
any language. Random jitter modes take a caller-supplied `random.Random`, which
keeps the core free of hidden randomness (tests pass a seeded one).
"""

from __future__ import annotations

import enum
import math
import random
import re
from dataclasses import dataclass, field
from datetime import timedelta

from .text import quoted

__all__ = ["BackoffConfig", "Jitter", "delay", "format_duration", "parse_duration"]


class Jitter(enum.Enum):
    NONE = "none"
    # delay = min(base * (1 + 0.1 * sin(attempt)), max): deterministic ±10 %.
    SINE = "sine"
    # delay = uniform(0, base): AWS "full jitter".
    FULL = "full"
    # delay = uniform(initial, min(max, 3 * previous base)): AWS "decorrelated
    # jitter", made stateless by taking the previous attempt's base delay.
    DECORRELATED = "decorrelated"


_ONE_MS = timedelta(milliseconds=1)
# How many attempts' deterministic delays each config computes up front.
_PRECOMPUTED = 32


@dataclass(frozen=True, slots=True)
class BackoffConfig:
    initial: timedelta = timedelta(milliseconds=500)
    max: timedelta = timedelta(seconds=10)
    factor: float = 2.0
    jitter: Jitter = Jitter.SINE
    # Derived once per config, because delay() runs on every resend and
    # timedelta arithmetic costs more than the formula: the bounds in ms, and
    # for the deterministic jitters the answers for attempts 1.._PRECOMPUTED.
    _initial_ms: float = field(init=False, repr=False, compare=False)
    _max_ms: float = field(init=False, repr=False, compare=False)
    _precomputed: tuple[timedelta, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_initial_ms", self.initial / _ONE_MS)
        object.__setattr__(self, "_max_ms", self.max / _ONE_MS)
        table = (
            [_delay(n, self, None) for n in range(1, _PRECOMPUTED + 1)]
            if self.deterministic
            else []
        )
        object.__setattr__(self, "_precomputed", tuple(table))

    @property
    def deterministic(self) -> bool:
        """Whether equal attempts always wait the same (no random source is read)."""
        return self.jitter in (Jitter.SINE, Jitter.NONE)


def _base_ms(attempt: int, cfg: BackoffConfig) -> float:
    # Cap the exponent so a huge attempt number cannot overflow a float.
    exponent = min(attempt - 1, 1024)
    try:
        base = cfg._initial_ms * cfg.factor**exponent
    except OverflowError:
        base = cfg._max_ms
    return min(base, cfg._max_ms)


def delay(attempt: int, cfg: BackoffConfig, rng: random.Random | None = None) -> timedelta:
    """The wait after failed attempt `attempt` (1-based), in whole milliseconds.

    Whole milliseconds make the result identical across languages, whose
    float formatting and libm differ in the last bits.
    """
    if 0 < attempt <= len(cfg._precomputed):
        return cfg._precomputed[attempt - 1]
    return _delay(attempt, cfg, rng)


def _delay(attempt: int, cfg: BackoffConfig, rng: random.Random | None) -> timedelta:
    max_ms = cfg._max_ms
    base = _base_ms(attempt, cfg)
    if cfg.jitter is Jitter.SINE:
        ms = min(base * (1 + 0.1 * math.sin(attempt)), max_ms)
    elif cfg.jitter is Jitter.NONE:
        ms = base
    else:
        if rng is None:
            raise ValueError(f"jitter {cfg.jitter.value!r} needs a random source")
        if cfg.jitter is Jitter.FULL:
            ms = rng.uniform(0, base)
        else:
            initial_ms = cfg._initial_ms
            previous = _base_ms(attempt - 1, cfg) if attempt > 1 else initial_ms
            ms = rng.uniform(initial_ms, max(initial_ms, min(max_ms, 3 * previous)))
    return timedelta(milliseconds=round(ms))


_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_DURATION_FULL = re.compile(r"(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+")


def parse_duration(text: str) -> timedelta:
    """Parse a Go-style duration ("500ms", "1s", "1m30s"); raise ValueError."""
    text = text.strip()
    # The value is echoed as errors quote a caller's: redacted and bounded
    # (a secret pasted into the wrong field is not repeated in full).
    if not _DURATION_FULL.fullmatch(text):
        raise ValueError(f"{quoted(text)} is not a duration such as 500ms, 1s or 1m30s")
    ms = sum(float(n) * _UNIT_MS[unit] for n, unit in _DURATION.findall(text))
    try:
        return timedelta(milliseconds=ms)
    except OverflowError:  # past timedelta's range (about 2.7 million years)
        raise ValueError(f"{quoted(text)} is longer than any duration can be") from None


def format_duration(value: timedelta) -> str:
    """`value` as parse_duration reads it back ("500ms", "10s", "1m30s"), for
    messages: the docs teach this form, not timedelta's "0:00:10"."""
    rest = round(value / timedelta(microseconds=1))
    if rest <= 0:
        return "0s"
    parts = []
    for unit, size in (("h", 3_600_000_000), ("m", 60_000_000), ("s", 1_000_000), ("ms", 1000)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    if rest:
        parts.append(f"{rest}us")
    return "".join(parts)
