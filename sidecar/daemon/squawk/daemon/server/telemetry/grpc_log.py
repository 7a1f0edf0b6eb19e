"""grpc's own log line about one call, kept to the daemon's rule for them:
at most one line per RPC every interval, never a traceback.

grpc.aio logs an ERROR and a traceback for an answer it could not send
because the call had ended first: its caller's deadline passed or the
caller cancelled while the answer was made, or the caller refused it as
over its receive limit. Under overload, when many callers' deadlines pass,
that is a traceback per call. The filter drops those records and hands
each to `Observer.answered_late`, which counts it and logs one throttled
line per RPC.
"""

from __future__ import annotations

import logging
import re

from .observer import Observer

__all__ = ["GRPC_LOGGER", "LateAnswers"]

# The logger grpc.aio's server writes to.
GRPC_LOGGER = "grpc._cython.cygrpc"
# Its line for an answer whose send failed because the call had ended.
# The method is one the server serves (grpc calls no servicer for another).
_LATE = re.compile(r"ExecuteBatchError raised in core by servicer method \[/[\w.]+/(\w{1,64})\]")


class LateAnswers(logging.Filter):
    """Install on GRPC_LOGGER for as long as the daemon serves."""

    def __init__(self, observer: Observer) -> None:
        super().__init__()
        self._observer = observer

    def filter(self, record: logging.LogRecord) -> bool:
        found = _LATE.match(record.getMessage())
        if found is None:
            return True
        self._observer.answered_late(found[1])
        return False
