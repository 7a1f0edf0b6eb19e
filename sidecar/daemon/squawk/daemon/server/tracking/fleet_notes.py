"""The fleet store's log lines about what the sync link meets: writes
the fleet never got, caution the store lost, settings that differ.
Throttled (the daemon's one throttle) or said once per upstream.
"""

from __future__ import annotations

import logging

from squawk.policy.fleet import Restore
from squawk.policy.text import shown_text

from ...throttle import Throttle
from .fleet_view import Tracked

__all__ = ["differs", "dropped", "log", "restored"]

# Every line of the fleet store's parts under the one name operators know
# it by (the log's %(name)s), whichever module says it.
log = logging.getLogger(f"{__package__}.fleet_store")


def dropped(throttle: Throttle, where: str, count: int, why: str) -> None:
    held = throttle.ready("dropped")
    if held is not None:
        log.warning(
            "fleet state store %s: %d outcome(s) not sent to the fleet (%s)%s; "
            "this pod's own state counted them",
            where,
            count,
            why,
            f" ({held} more drops since the last report)" if held else "",
        )


def restored(throttle: Throttle, where: str, tracked: Tracked, restore: Restore) -> None:
    held = throttle.ready("restored")
    if held is not None:
        what = " and ".join(
            f"{name} ({left:.1f} s left)"
            for name, left in (
                ("an OPEN fleet breaker", restore.open_left),
                ("a cool-down", restore.cooling),
            )
            if left > 0
        )
        log.warning(
            "fleet state store %s lost the state of upstream %s (profile %s) while this "
            "pod held %s (flushed, or restarted empty?); writing it back%s",
            where,
            shown_text(tracked.upstream, 200),
            shown_text(tracked.profile.name, 200),
            what,
            f" ({held} more write-backs since the last report)" if held else "",
        )


def differs(key: tuple[str, str]) -> None:
    log.warning(
        "upstream %s (profile %s): this pod's breaker or budget settings differ "
        "from those the fleet's state was written with; the pods share their counts "
        "(each within its own window), but each judges them by its own settings, so "
        "they may disagree on the fleet's breaker and budget (run the same policy on "
        "every pod)",
        shown_text(key[1], 200),
        shown_text(key[0], 200),
    )
