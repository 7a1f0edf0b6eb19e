"""One number from several rounds: the median, and how far the rounds spread.

A ratio measured once on a shared machine says as much about the
background load as about the code: the floor and the daemon ran at
different moments. Measured in each of several interleaved rounds, each
round's ratio compares rows taken seconds apart, and the spread of those
ratios says whether the machine was quiet enough to read them at all.
The median, not the mean, so one disturbed round cannot move the answer.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MAX_SPREAD", "Spread", "spread"]

# Wider than this ((max - min) / median), the rounds disagree too much for
# their median to be read as a property of the code.
MAX_SPREAD = 0.25


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float
    rounds: int

    @property
    def width(self) -> float:
        """(max - min) / median: 0 when every round agrees."""
        if self.high == self.low:
            return 0.0
        return (self.high - self.low) / abs(self.median) if self.median else float("inf")

    @property
    def too_wide(self) -> bool:
        return self.width > MAX_SPREAD


def spread(values: Sequence[float]) -> Spread | None:
    """The median and range of one value per round; None without any round."""
    if not values:
        return None
    return Spread(statistics.median(values), min(values), max(values), len(values))
