"""The distinct rows' corpus: distinct requests, more than the daemon keeps,
varied as executors' requests are, and the same bytes for Squawk and its
floors."""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

# bench/ is a folder at the repository's root, not an installed package,
# and pytest puts only tests/ on the import path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.corpus import batches, corpus
from bench.drive import write_payloads
from bench.targets import SQUAWK, servers
from bench.workloads import POLICY, Workload, squawk_workloads
from squawk.daemon.config import load_policy
from squawk.daemon.server.rpc.decisions import MAX_ENTRIES, MAX_KEY_BYTES, StatelessDecisions
from squawk.policy import Decision, Profile
from squawk.v1 import policy_pb2 as pb

TARGETS = servers(SQUAWK, Path("echo-go"), squawk_workloads(100), 4317)


def _workload(target: str, rpc: str) -> Workload:
    (found,) = {w for s in TARGETS if s.target == target for w in s.workloads if w.rpc == rpc}
    return found


def test_the_corpus_holds_more_distinct_requests_than_the_daemon_keeps() -> None:
    requests = corpus()
    assert len(set(requests)) == len(requests) > 2 * MAX_ENTRIES
    assert max(len(r) for r in requests) <= MAX_KEY_BYTES  # each would be kept: a real miss


def test_the_corpus_varies_what_executors_vary() -> None:
    requests = [pb.DecideRetryRequest.FromString(r) for r in corpus()]
    assert not any(r.upstream for r in requests)  # the stateless path
    assert len(Counter(r.attempt for r in requests)) >= 3
    assert {503, 502, 504, 500, 429, 408, 400} <= {r.http_status for r in requests}
    assert len({r.deadline.ToMilliseconds() for r in requests if r.HasField("deadline")}) > 1000
    assert len({r.response_body for r in requests}) > 0.8 * len(requests)
    assert len({r.headers["x-request-id"] for r in requests}) == len(requests)
    with_retry_after = [r.headers["Retry-After"] for r in requests if "Retry-After" in r.headers]
    assert len(with_retry_after) > 1000 and all(v.isdigit() for v in with_retry_after)


def test_the_corpus_is_the_same_on_every_run() -> None:
    assert corpus(100, seed=7) == corpus(100, seed=7) != corpus(100, seed=8)


def test_the_distinct_rows_send_the_corpus_and_the_floors_echo_it() -> None:
    decide = _workload("squawk", "DecideRetry distinct")
    assert decide.payloads == corpus()
    for floor in ("echo-py", "echo-go"):
        assert _workload(floor, "Echo distinct").payloads == corpus()
    batch = _workload("squawk", "DecideRetryBatch distinct x100")
    items = [
        item.SerializeToString(deterministic=True)
        for b in batch.payloads
        for item in pb.DecideRetryBatchRequest.FromString(b).requests
    ]
    assert all(
        len(pb.DecideRetryBatchRequest.FromString(b).requests) == 100 for b in batch.payloads
    )
    assert len(set(items)) == len(items) > 2 * MAX_ENTRIES
    assert batches(100) == batch.payloads


class _Counted(StatelessDecisions):
    """The daemon's kept decisions, counting the requests decided afresh."""

    def __init__(self) -> None:
        super().__init__(lambda: 1_700_000_000.0, random.Random(1), 1 << 20)
        self.decided = 0

    def _decide(self, request: pb.DecideRetryRequest, profile: Profile, clock: object) -> Decision:
        self.decided += 1
        return super()._decide(request, profile, clock)  # type: ignore[arg-type]


def _decided_afresh(workload: Workload, calls: int) -> int:
    """Send `calls` requests in the load generator's order (call n sends
    payload n mod their number) through the daemon's own cache."""
    profile = load_policy(str(POLICY), environ={}).profile("")
    kept = _Counted()
    for n in range(calls):
        request = pb.DecideRetryRequest.FromString(workload.payloads[n % len(workload.payloads)])
        kept.decide(request, profile)
    return kept.decided


def test_every_distinct_call_is_decided_afresh_and_the_same_bytes_only_once() -> None:
    """What the two rows measure: the distinct row the decision, on every call
    and through more than one pass over the corpus; the same-bytes row the
    lookup of its one kept answer (the best case)."""
    calls = len(corpus()) + 2 * MAX_ENTRIES
    assert _decided_afresh(_workload("squawk", "DecideRetry distinct"), calls) == calls
    assert _decided_afresh(_workload("squawk", "DecideRetry transient"), calls) == 1


def test_the_load_generator_file_holds_every_request_in_order(tmp_path: Path) -> None:
    decide = _workload("squawk", "DecideRetry distinct")
    data = write_payloads(decide, tmp_path, "corpus").read_bytes()
    found, at = [], 0
    while at < len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        found.append(data[at + 4 : at + 4 + size])
        at += 4 + size
    assert tuple(found) == decide.payloads


def test_a_corpus_row_probes_a_sample_spread_over_it() -> None:
    decide = _workload("squawk", "DecideRetry distinct")
    assert 32 <= len(decide.probed) <= 128
    assert decide.probed[0] == corpus()[0] and decide.probed[-1] in corpus()[-400:]
    same = _workload("squawk", "DecideRetry transient")
    assert same.probed == same.payloads
