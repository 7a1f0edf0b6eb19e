"""A declared cap on calls in flight, end to end: two executors' runners
(threads of two clients, as two processes would be) against the real daemon
whose policy caps an upstream at 2 calls out. No more than 2 steps are ever
inside the upstream at once, every step still runs (the runners wait out a
full cap instead of failing), and the listing shows the cap."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import Daemon, start_daemon
from squawk_client import SquawkClient, StepOptions, run_step_sync

TIMEOUT = timedelta(seconds=10)
CAP = 2
POLICY = f"""\
profiles:
  default:
    upstreams:
      capped:
        rate_limit: {{max_in_flight: {CAP}}}
"""


@pytest.fixture(scope="module")
def capped_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    path: Path = tmp_path_factory.mktemp("cap") / "policy.yaml"
    path.write_text(POLICY)
    daemon = start_daemon("--policy", str(path))
    yield daemon
    daemon.stop()


class Upstream:
    """Counts the calls inside it at once, as a provider's key would."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.inside = 0
        self.most = 0
        self.calls = 0

    def call(self, n: int) -> int:
        with self._lock:
            self.inside += 1
            self.calls += 1
            self.most = max(self.most, self.inside)
        time.sleep(0.1)
        with self._lock:
            self.inside -= 1
        return n


def test_two_executors_never_pass_the_cap_and_every_step_runs(capped_daemon: Daemon) -> None:
    upstream = Upstream()
    options = StepOptions(upstream="capped", deadline=timedelta(seconds=30))
    steps = 12
    with (
        SquawkClient(capped_daemon.target, call_timeout=TIMEOUT) as a,
        SquawkClient(capped_daemon.target, call_timeout=TIMEOUT) as b,
        ThreadPoolExecutor(max_workers=8) as pool,
    ):
        runs = [
            pool.submit(run_step_sync, (a, b)[n % 2], upstream.call, n, options=options)
            for n in range(steps)
        ]
        assert sorted(r.result(timeout=60) for r in runs) == list(range(steps))
        assert a.fallback_count == b.fallback_count == 0
        (state,) = a.get_upstreams(upstream="capped")
    assert upstream.calls == steps
    assert upstream.most == CAP
    assert state.concurrency_limit == CAP
