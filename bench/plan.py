"""Which rows run, and in what order: interleaved rounds first, then the rest.

The rows whose ratios are the goals (each server's `rounds`) are measured
round-robin: round 1 is every such row of the echo floor, then of each
Squawk server, round 2 the same, and so on, with every server kept running
in between. A floor row and the daemon row it is divided by are then
seconds apart, not minutes, and share the machine's background load. The
other rows run once, after the rounds, server by server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .drive import Mode
from .targets import Server
from .workloads import Workload

__all__ = ["Step", "modes", "plan", "selected"]


@dataclass(frozen=True)
class Step:
    server: Server
    workload: Workload
    mode: Mode
    # 1, 2, ... for a round's row; None for a row measured once.
    round: int | None
    # The row's place in the table, where one row's rounds sit together.
    rank: int


def modes(workload: Workload, rates: Sequence[float]) -> list[Mode]:
    if workload.rate is not None:
        return [Mode(workload.rate)]
    return [Mode(), *(Mode(rate) for rate in rates if workload.open_loop)]


def selected(only: str, name: str) -> bool:
    """Whether --only (comma-separated parts, any of them) selects `name`."""
    return not only or any(part.strip() in name for part in only.split(",") if part.strip())


def _in_rounds(server: Server, workload: Workload, mode: Mode, rates: Sequence[float]) -> bool:
    # The goals read saturation and the first rate only; a row at its own
    # rate has that one mode.
    first = (
        workload.rate is not None or mode.rate is None or (bool(rates) and mode.rate == rates[0])
    )
    return first and workload.rpc.startswith(server.rounds)


def plan(servers: Sequence[Server], rates: Sequence[float], rounds: int, only: str) -> list[Step]:
    """Every row in the order it runs."""
    rows = [
        (server, workload, mode)
        for server in servers
        for workload in server.workloads
        if selected(only, f"{server.name} {workload.rpc}")
        for mode in modes(workload, rates)
    ]
    rounded = [i for i, row in enumerate(rows) if _in_rounds(*row, rates)]
    steps = [Step(*rows[i], n, i) for n in range(1, rounds + 1) for i in rounded]
    steps += [
        Step(*row, None, i)
        for i, row in enumerate(rows)
        if i not in rounded and not row[0].rounds_only
    ]
    return steps
