"""Nothing a caller sends fails a call or stalls the daemon: the wire fuzz.

Each RPC gets its own daemon (decision log on) and a seeded stream of
random bytes, damaged valid requests and hostile well-formed ones
(tests/fuzz_cases.py). The answers must be OK, INVALID_ARGUMENT naming
its field, or RESOURCE_EXHAUSTED past gRPC's size limit: never INTERNAL,
UNKNOWN or a missed deadline, and bytes protobuf cannot parse answer
INVALID_ARGUMENT. Afterwards the daemon must be alive and SERVING, with a
bounded log and bounded decision-log lines (tests/fuzz_wire.py says
exactly what is judged). `make fuzz` runs the same generator longer.

A failure names each case as `seed=S index=I`; `fuzz_cases.case(S, rpc, I)`
rebuilds it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzz_cases import RPCS
from fuzz_wire import fuzz_rpc

SEED = 20261130
CASES_PER_RPC = 2000


@pytest.mark.parametrize("rpc", RPCS)
def test_no_request_fails_a_call_or_stalls_the_daemon(rpc: str, tmp_path: Path) -> None:
    report = fuzz_rpc(rpc, SEED, CASES_PER_RPC, tmp_path, timeout_s=10.0, budget_s=30.0)
    assert report.sent + report.not_sent == CASES_PER_RPC
    if report.failed:
        pytest.fail(report.summary(), pytrace=False)
