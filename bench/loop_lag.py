"""The daemon's event-loop lag over one row's window, from its Prometheus text.

The daemon observes `squawk_event_loop_lag_seconds` 40 times a second (how
late its loop woke). Scraped at the window's two edges, the difference of
the cumulative bucket counts is the histogram of the window alone. A
histogram keeps no single observation, so a quantile is known only to the
bucket holding it: each figure here is that bucket's upper bound, an upper
limit on the true value, never an interpolation between bounds.
"""

from __future__ import annotations

import math
import re
import urllib.request

__all__ = [
    "LAG",
    "Buckets",
    "lag_fields",
    "max_bound",
    "parse_buckets",
    "quantile_bound",
    "scrape",
    "window",
]

LAG = "squawk_event_loop_lag_seconds"
# Upper bound (seconds, +Inf last) -> observations at or below it.
Buckets = dict[float, float]

_LE = re.compile(r'le="([^"]*)"')


def scrape(url: str, timeout_s: float = 2.0) -> str | None:
    """The metrics text at `url`, or None when it cannot be read."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            text: str = reply.read().decode()
            return text
    except (OSError, UnicodeDecodeError):
        return None


def parse_buckets(text: str, name: str = LAG) -> Buckets | None:
    """The cumulative buckets of histogram `name`; None when the text has none.

    Label sets other than `le` are summed, so a labelled histogram reads as
    one over all its series.
    """
    prefix = name + "_bucket{"
    found: Buckets = {}
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        labels, _, rest = line[len(prefix) :].rpartition("}")
        le = _LE.search(labels)
        if le is None or not rest.split():
            continue
        bound = float(le.group(1))  # float() reads "+Inf"
        found[bound] = found.get(bound, 0.0) + float(rest.split()[0])
    return found or None


def window(start: Buckets, end: Buckets) -> Buckets:
    """The observations made between two scrapes of the same histogram."""
    return {bound: count - start.get(bound, 0.0) for bound, count in end.items()}


def quantile_bound(buckets: Buckets, q: float) -> float | None:
    """The upper bound of the bucket holding quantile `q`; None without observations.

    The quantile is the ceil(q * n)-th smallest of n observations.
    """
    total = buckets.get(math.inf, 0.0)
    if total <= 0:
        return None
    rank = max(1, math.ceil(q * total))
    for bound in sorted(buckets):
        if buckets[bound] >= rank:
            return bound
    return math.inf


def max_bound(buckets: Buckets) -> float | None:
    """The upper bound of the highest bucket with an observation; None without any."""
    highest, below = None, 0.0
    for bound in sorted(buckets):
        if buckets[bound] > below:
            highest = bound
        below = buckets[bound]
    return highest


def _ms(bound: float | None, finite: list[float]) -> float | str | None:
    if bound is None:
        return None
    if math.isinf(bound):
        # Past the last bucket, all that is known is "more than" its bound.
        return f">{max(finite, default=0.0) * 1000:g}"
    return round(bound * 1000, 3)


def lag_fields(start: str | None, end: str | None) -> dict[str, float | str | None]:
    """`lag_p99_ms` and `lag_max_ms` for a window; None where the text lacks the metric."""
    before = parse_buckets(start) if start is not None else None
    after = parse_buckets(end) if end is not None else None
    if before is None or after is None:
        return {"lag_p99_ms": None, "lag_max_ms": None}
    seen = window(before, after)
    finite = [b for b in seen if not math.isinf(b)]
    return {
        "lag_p99_ms": _ms(quantile_bound(seen, 0.99), finite),
        "lag_max_ms": _ms(max_bound(seen), finite),
    }
