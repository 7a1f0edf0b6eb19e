"""The fleet script's wire, field by field: each request a pod sends
fleet.lua and the reply a sync reads back.

A request is one ARGV string of words (the op, then the request's fields,
then the upstream's settings); the reply is a list of integers in
`Reading`'s order. Both tables reach the script from here: `SCRIPT` is
fleet.lua and fleet_sums.lua behind a header that declares them
(`FIELDS`, `REPLY`), and the script reads every word and writes every
number by name. The words, their
order and the reply are those of the releases before the names were given,
so pods of either side of that change read each other's keys alike.
"""

from __future__ import annotations

import hashlib
import math
from importlib import resources
from typing import NamedTuple

from squawk.policy import BreakerState, UpstreamConfig
from squawk.policy.fleet import Reading
from squawk.policy.timing import seconds

__all__ = [
    "SCRIPT",
    "SHA",
    "KeepRequest",
    "MoveRequest",
    "Request",
    "Settings",
    "SyncRequest",
    "encode",
    "reading",
    "settings_words",
]


class SyncRequest(NamedTuple):
    """What one pod saw of one upstream since its last sync."""

    pod: str
    # The half-open round the `returned` slots were leased in.
    round: int
    # The breaker window's calls and failures, the budget's first calls and
    # retries, a token bucket's tokens taken and refilled (thousandths).
    calls: int
    failures: int
    deposits: int
    retries: int
    taken: int
    refilled: int
    # The cool-down this pod was told, ms from now; -1: none.
    hint: int
    # Probe slots wanted, and slots leased earlier given back unused.
    want: int
    returned: int
    # This pod's demand, calls/s (squawk.policy.fleet.demand).
    demand: float


class MoveRequest(NamedTuple):
    """A transition of the fleet's breaker, made only in `epoch`."""

    pod: str
    epoch: int
    # A BreakerState's number: OPEN or CLOSED.
    to: int


class KeepRequest(NamedTuple):
    """Caution this pod held that the store lost, written back (ms left)."""

    pod: str
    epoch: int
    open_left: int
    cool_left: int


class Settings(NamedTuple):
    """The upstream's settings every request ends with (times in ms), and
    their fingerprint (with the rules' settings the script never reads)."""

    window: int
    buckets: int
    ttl: int
    open_for: int
    probes: int
    max_cool: int
    max_tokens: int
    interval: int
    fingerprint: str


Request = SyncRequest | MoveRequest | KeepRequest

_OPS: dict[type[Request], str] = {SyncRequest: "sync", MoveRequest: "move", KeepRequest: "keep"}
# Fields sent with three decimals; every other is sent as Python writes it.
_DECIMALS = frozenset({"demand"})
_FORMATS = {
    kind: " ".join([op, *("{:.3f}" if f in _DECIMALS else "{}" for f in kind._fields), "{}"])
    for kind, op in _OPS.items()
}


def encode(request: Request, settings: str) -> str:
    """The request's ARGV word string; `settings` from settings_words."""
    return _FORMATS[type(request)].format(*request, settings)


def settings_words(config: UpstreamConfig, interval_s: float, min_pods: int) -> str:
    """The Settings words of an upstream's config, as every request ends."""
    cb, budget = config.circuit_breaker, config.retry_budget
    ttl = getattr(budget, "ttl", cb.window)
    words = " ".join(
        str(w)
        for w in (
            round(seconds(cb.window) * 1000),
            cb.buckets,
            round(seconds(ttl) * 1000),
            round(seconds(cb.open_for) * 1000),
            cb.half_open_probes,
            math.ceil(seconds(config.max_cool_down) * 1000),
            getattr(budget, "_max", 0),
            round(interval_s * 1000),
        )
    )
    # The rules' settings too, which the script never reads: pods that
    # judge the same sums by different thresholds disagree.
    rules = f"{words} {cb.enabled} {cb.failure_ratio!r} {cb.minimum_calls} "
    rules += f"{cb.close_ratio!r} {budget!r} {min_pods}"
    fingerprint = hashlib.blake2b(rules.encode(), digest_size=6).hexdigest()
    return f"{words} {fingerprint}"


_STATES = {1: BreakerState.CLOSED, 2: BreakerState.OPEN, 3: BreakerState.HALF_OPEN}
# Reply fields sent in thousandths (ms, or thousandths of calls/s).
_THOUSANDTHS = [name in {"left", "cooling", "demand", "own"} for name in Reading._fields]
_FAILURES, _CALLS = Reading._fields.index("failures"), Reading._fields.index("calls")
_DIFFER = Reading._fields.index("differ")
# A hostile or broken store's numbers stay within what timedelta holds.
_MAX_REPLY = 10**12


def reading(raw: object) -> Reading | None:
    """A sync reply as a Reading, or None when it is not one: a store's
    answer is input too. Times come in ms and leave as seconds."""
    if not isinstance(raw, list) or len(raw) != len(Reading._fields):
        return None
    if not all(type(v) is int for v in raw) or raw[0] not in _STATES:
        return None
    v = [min(max(x, 0), _MAX_REPLY) for x in raw]
    v[_FAILURES] = min(v[_FAILURES], v[_CALLS])
    values: list[object] = [x / 1000 if t else x for x, t in zip(v, _THOUSANDTHS, strict=True)]
    values[0], values[_DIFFER] = _STATES[v[0]], bool(v[_DIFFER])
    return Reading(*values)  # type: ignore[arg-type]


def _lua_list(names: tuple[str, ...]) -> str:
    return "{" + ", ".join(f"'{name}'" for name in names) + "}"


_HEADER = (
    "-- Generated by fleet_wire.py: each request's words and the reply, by name.\n"
    "local FIELDS = {\n"
    + "".join(
        f"  {op} = {_lua_list(('op', *kind._fields, *Settings._fields))},\n"
        for kind, op in _OPS.items()
    )
    + "}\n"
    + f"local REPLY = {_lua_list(Reading._fields)}\n"
)
_LUA = "".join(
    resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    for name in ("fleet.lua", "fleet_sums.lua")
)
# The script as the store loads it: the names, then fleet.lua and its sums.
SCRIPT = _HEADER + _LUA
SHA = hashlib.sha1(SCRIPT.encode()).hexdigest()
