"""grpc's line per late answer becomes the daemon's throttled one.

tests/daemon/rpc/test_limits.py makes a real daemon's answers late; which
of them grpc logs is a race in grpc, so here its record is logged as grpc
logs it, every time.
"""

from __future__ import annotations

import logging

import pytest

from squawk.daemon.server.telemetry.grpc_log import GRPC_LOGGER, LateAnswers
from squawk.daemon.server.telemetry.observer import Observer

LATE = "ExecuteBatchError raised in core by servicer method [/squawk.v1.PolicyService/%s]"


def test_late_answers_cost_one_line_per_rpc_and_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    grpc_log = logging.getLogger(GRPC_LOGGER)
    late = LateAnswers(Observer())
    grpc_log.addFilter(late)
    try:
        with caplog.at_level(logging.DEBUG):
            for rpc in ["Classify", "DecideRetryBatch"] * 50:
                try:
                    raise RuntimeError("Failed execute_batch")
                except RuntimeError:
                    grpc_log.exception(LATE % rpc)
            grpc_log.error("something else")
    finally:
        grpc_log.removeFilter(late)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [line[0] for line in lines] == ["WARNING", "WARNING", "ERROR"]
    assert lines[0][1].startswith("Classify: an answer was not sent")
    assert lines[1][1].startswith("DecideRetryBatch: an answer was not sent")
    assert lines[2][1] == "something else"
    assert not [r for r in caplog.records if r.exc_info and r.name == GRPC_LOGGER]
