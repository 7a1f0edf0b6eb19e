"""What a lease of spare permits may still start once the pod's answer has
changed, over the wire against the real daemon: a breaker another executor
opens stops the lease's holder at the lease's end at the latest (the bound
docs/upstreams.md states: one lease), and a daemon that goes away leaves
the holder the rest of its lease, then admission fails open (counted).
Nothing here is timed against a threshold: each dispatch's time is compared
with the lease's own end, on the client's clock."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from conftest import Daemon, start_daemon
from squawk.v1 import policy_pb2 as pb
from squawk_client import SquawkClient, StepFailed, StepOptions, run_step_sync

TIMEOUT = timedelta(seconds=10)


def _leased(client: SquawkClient, options: StepOptions) -> tuple[int, float]:
    """Run steps until the client holds spare permits of a lease: (how many,
    when the lease ends on the monotonic clock)."""
    key = (options.profile, options.upstream, options.capability)
    for n in range(200):
        run_step_sync(client, str, n, options=options)
        slot = client._policy.leases._slots.get(key)
        if slot is not None and slot.spare >= 3 and time.monotonic() < slot.until:
            return slot.spare, slot.until
    pytest.fail("no lease with spare permits after 200 steps")


def _dispatches(client: SquawkClient, options: StepOptions, count: int) -> list[float | str]:
    """Run `count` steps, each as soon as the last ended: when each one's
    dispatch started, or the reason of the decision that refused it."""
    out: list[float | str] = []
    for n in range(count):
        try:
            out.append(run_step_sync(client, lambda _: time.monotonic(), n, options=options))
        except StepFailed as failed:
            out.append(failed.decision.reason.name)
    return out


def test_a_breaker_another_executor_opens_stops_a_lease_at_its_end(daemon: Daemon) -> None:
    # A deadline: a step the open breaker refuses fails at once instead of
    # waiting the 30 s until it half-opens.
    options = StepOptions(upstream="lease-revoked", deadline=timedelta(seconds=5))
    with (
        SquawkClient(daemon.target, call_timeout=TIMEOUT) as holder,
        SquawkClient(daemon.target, call_timeout=TIMEOUT) as other,
    ):
        spare, until = _leased(holder, options)
        # The default breaker opens at >= 10 calls in its window with >= 50 %
        # failed: another executor's 30 failures of the upstream.
        failures = [pb.Outcome(upstream="lease-revoked", http_status=503)] * 30
        assert other.report_outcome(failures) == 30
        (state,) = other.get_upstreams(upstream="lease-revoked")
        assert state.breaker_state == pb.BREAKER_STATE_OPEN
        seen = _dispatches(holder, options, spare + 3)
    started = [t for t in seen if isinstance(t, float)]
    # What the lease still held started, and only before its end; every
    # step after that was refused by the open breaker.
    assert len(started) <= spare
    assert all(t < until for t in started)
    refused = seen[len(started) :]
    assert refused and set(refused) == {"CIRCUIT_OPEN"}, seen


def test_a_lost_daemon_leaves_the_rest_of_the_lease_then_fails_open() -> None:
    options = StepOptions(upstream="lease-lost")
    daemon = start_daemon()
    try:
        with SquawkClient(daemon.target, call_timeout=timedelta(milliseconds=200)) as client:
            spare, until = _leased(client, options)
            daemon.stop(9)  # gone at once, as a crashed daemon
            before = client.fallback_count
            seen = _dispatches(client, options, spare + 3)
            # Every step ran (admission fails open) ...
            assert all(isinstance(t, float) for t in seen), seen
            # ... the first on the lease's spare permits, without asking, and
            # only then did the client fall back, counting it.
            fell_back = client.fallback_count - before
            before_end = sum(1 for t in seen if isinstance(t, float) and t < until)
            assert fell_back >= 3
            assert len(seen) - fell_back == min(spare, before_end)
    finally:
        daemon.stop()
