"""Calls in flight, counted in two epochs so that a lost outcome is forgotten.

A call the pod admits is counted until its outcome comes; one whose outcome
never comes (the executor died, the report was lost) must not hold its
place for ever. So the count is kept in two epochs of FLIGHT_EPOCH: a call
counts in the epoch it was admitted in, an outcome takes one off the older
epoch first, and the older epoch is dropped when a new one starts, so a
call that never reports leaves the count after one to two epochs. The
learned concurrency limit (aimd.py) and the declared cap (capped.py) count
this way.
"""

from __future__ import annotations

__all__ = ["FLIGHT_EPOCH", "one_fewer", "roll"]

# Calls admitted and never reported leave the count after one to two epochs
# (seconds); also how long the daemon keeps an admission for its outcome.
FLIGHT_EPOCH = 120.0


def roll(current: int, old: int, epoch_at: float, now: float) -> tuple[int, int, float]:
    """(old, current, epoch start) at `now`, for the counts `current` and
    `old` of the epoch that started at `epoch_at` and the one before."""
    if now - epoch_at < FLIGHT_EPOCH:
        return old, current, epoch_at
    if now - epoch_at < 2 * FLIGHT_EPOCH:
        return current, 0, epoch_at + FLIGHT_EPOCH
    return 0, 0, now


def one_fewer(old: int, current: int) -> tuple[int, int]:
    """(old, current) after an outcome: one call fewer, the older epoch's first."""
    if old:
        return old - 1, current
    return old, max(current - 1, 0)
