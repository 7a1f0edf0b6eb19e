"""The benchmark's order: the goals' rows round-robin, the rest once after."""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ is a folder at the repository's root, not an installed package,
# and pytest puts only tests/ on the import path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.plan import Step, plan
from bench.targets import REDIS_TARGET, SQUAWK, servers
from bench.workloads import squawk_workloads

REDIS_URL = "redis://127.0.0.1:6379/0"
TARGETS = servers(SQUAWK, Path("echo-go"), squawk_workloads(100), 4317, REDIS_URL)


def _names(steps: list[Step]) -> list[str]:
    return [f"{s.server.name} {s.workload.rpc} {s.mode.name}" for s in steps]


ROUND = [
    "echo-py-tracing-off Echo saturation",
    "echo-py-tracing-off Echo 1000/s",
    "echo-py-tracing-off Echo distinct saturation",
    "echo-py-tracing-off Echo distinct 1000/s",
    "squawk-tracing-off DecideRetry transient saturation",
    "squawk-tracing-off DecideRetry transient 1000/s",
    "squawk-tracing-off DecideRetry distinct saturation",
    "squawk-tracing-off DecideRetry distinct 1000/s",
    "squawk-tracing-off DecideRetryBatch distinct x100 saturation",
    "squawk-tracing-off AnalyzeError offline saturation",
    "squawk-tracing-off AnalyzeError offline 1000/s",
    "squawk-tracing-off DecideRetry +store 200/s",
    "squawk-tracing-off Admit +store 200/s",
    "squawk-tracing-off Dispatch run_step +upstream 1000/s",
    "squawk-redis-tracing-off DecideRetry +store 200/s",
    "squawk-redis-tracing-off Admit +store 200/s",
    "squawk-tracing-100% DecideRetry transient saturation",
    "squawk-tracing-100% DecideRetry transient 1000/s",
    "squawk-tracing-100% DecideRetry distinct saturation",
    "squawk-tracing-100% DecideRetry distinct 1000/s",
    "squawk-tracing-100% DecideRetryBatch distinct x100 saturation",
    "squawk-tracing-100% AnalyzeError offline saturation",
    "squawk-tracing-100% AnalyzeError offline 1000/s",
    "squawk-tracing-10% DecideRetry distinct saturation",
    "squawk-tracing-10% DecideRetry distinct 1000/s",
    "squawk-tracing-10% AnalyzeError offline saturation",
    "squawk-tracing-10% AnalyzeError offline 1000/s",
]


def _once(label: str) -> list[str]:
    server = f"squawk-tracing-{label}"
    return [
        f"{server} Classify saturation",
        f"{server} Classify 1000/s",
        f"{server} Classify 5000/s",
        f"{server} DecideRetry transient 5000/s",
        f"{server} DecideRetry distinct 5000/s",
        f"{server} DecideRetry envelope saturation",
        f"{server} DecideRetry envelope 1000/s",
        f"{server} DecideRetry envelope 5000/s",
        f"{server} DecideRetryBatch x100 saturation",
        f"{server} AnalyzeError offline 5000/s",
        f"{server} DecideRetry +upstream saturation",
        f"{server} Admit +upstream saturation",
        f"{server} ReportOutcome x10 saturation",
    ]


def test_rounds_interleave_the_floor_and_every_squawk_then_the_rest_run_once() -> None:
    steps = plan(TARGETS, [1000, 5000], rounds=3, only="")
    assert _names(steps) == [
        *ROUND,
        *ROUND,
        *ROUND,
        "echo-go-tracing-off Echo saturation",
        "echo-go-tracing-off Echo 1000/s",
        "echo-go-tracing-off Echo 5000/s",
        "echo-go-tracing-off Echo distinct saturation",
        "echo-go-tracing-off Echo distinct 1000/s",
        "echo-go-tracing-off Echo distinct 5000/s",
        "echo-py-tracing-off Echo 5000/s",
        "echo-py-tracing-off Echo distinct 5000/s",
        *_once("off"),
        *_once("100%"),
    ]
    n = len(ROUND)
    assert [s.round for s in steps[: 3 * n]] == [1] * n + [2] * n + [3] * n
    assert all(s.round is None for s in steps[3 * len(ROUND) :])


def test_one_rows_rounds_share_its_place_in_the_table() -> None:
    steps = plan(TARGETS, [1000, 5000], rounds=2, only="")
    by_rank: dict[int, set[str]] = {}
    for name, step in zip(_names(steps), steps, strict=True):
        by_rank.setdefault(step.rank, set()).add(name)
    assert all(len(names) == 1 for names in by_rank.values())
    assert len(by_rank) == len(ROUND) + 8 + 2 * 13


def test_only_narrows_the_rounds_too() -> None:
    steps = plan(TARGETS, [1000], rounds=2, only="tracing-10% DecideRetry distinct")
    one_round = [
        "squawk-tracing-10% DecideRetry distinct saturation",
        "squawk-tracing-10% DecideRetry distinct 1000/s",
    ]
    assert _names(steps) == one_round + one_round


def test_the_store_rows_run_at_their_own_rate_on_both_stores_and_nowhere_else() -> None:
    targets = servers(SQUAWK, Path("echo-go"), squawk_workloads(100), 4317, REDIS_URL, 300)
    for rates in ([1000, 5000], []):
        steps = plan(targets, rates, rounds=2, only="+store")
        one_round = [
            "squawk-tracing-off DecideRetry +store 300/s",
            "squawk-tracing-off Admit +store 300/s",
            "squawk-redis-tracing-off DecideRetry +store 300/s",
            "squawk-redis-tracing-off Admit +store 300/s",
        ]
        assert _names(steps) == one_round + one_round
    redis = [s.server for s in steps if s.server.target == REDIS_TARGET]
    assert all(s.fleet and s.env["SQUAWK_STATE_URL"] == REDIS_URL for s in redis)
    assert not any(s.server.fleet for s in steps if s.server.target != REDIS_TARGET)


def test_without_a_redis_server_there_are_no_store_rows() -> None:
    no_redis = servers(SQUAWK, Path("echo-go"), squawk_workloads(100), 4317)
    assert not [s for s in plan(no_redis, [1000], rounds=1, only="") if "+store" in s.workload.rpc]


def test_the_dispatch_row_runs_at_its_own_rate_in_every_round_on_the_untraced_daemon_only() -> None:
    for rates in ([1000, 5000], [200], []):
        steps = plan(TARGETS, rates, rounds=2, only="Dispatch")
        assert _names(steps) == ["squawk-tracing-off Dispatch run_step +upstream 1000/s"] * 2
        assert [s.round for s in steps] == [1, 2]
    assert all(s.workload.executors > 1 for s in steps)
