"""The outcome benchmark's arithmetic (phase accounting, Jain's index,
recovery detection, the goals and the table) from hand-worked numbers, its
upstream's bucket and headers, and one tiny end-to-end run of every mode."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

# bench/ is a folder at the repository's root, not an installed package,
# and pytest puts only tests/ on the import path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.outcome import run
from bench.outcome.stats import (
    Count,
    Phase,
    Step,
    jain,
    percentile,
    phase_figures,
    recovery_s,
    sustained_rate,
)
from bench.procs import Processes, free_port
from conftest import ROOT
from go_build import go_build


@pytest.mark.parametrize(
    ("xs", "index"),
    [([1.0, 1.0, 1.0, 1.0], 1.0),  # equal shares
     ([1.0, 0.0, 0.0, 0.0], 0.25),  # one executor gets everything: 1/n
     ([1.0, 2.0], 0.9),  # 3^2 / (2 x (1 + 4))
     ([0.5, 0.5, 0.0], 2 / 3)],  # 1^2 / (3 x 0.5)
)  # fmt: skip
def test_jain_index(xs: list[float], index: float) -> None:
    assert jain(xs) == pytest.approx(index)


def test_jain_index_of_nothing_is_none() -> None:
    assert jain([]) is None
    assert jain([0.0, 0.0]) is None


def test_percentile_is_nearest_rank() -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(values, 50) == 3.0  # rank ceil(2.5) = 3
    assert percentile(values, 99) == 5.0  # rank ceil(4.95) = 5
    assert percentile(values, 20) == 1.0  # rank 1
    assert percentile([], 50) is None


def ones_from(first: int, last: int, executor: str = "a") -> list[Count]:
    """One success in each 100 ms bucket first..last-1."""
    return [Count(b, executor, 1, 1, 0, 0) for b in range(first, last)]


def test_recovery_is_the_first_window_serving_nine_tenths_of_the_demand() -> None:
    # From 100.0 s (bucket 1000) nothing for 0.5 s, then 10 successes/s.
    # Demand 10/s: a 1 s window needs 9. The window from bucket b holds
    # 1005..b+9, that is b + 10 - 1005 successes: 9 first at b = 1004.
    counts = ones_from(1005, 1100)
    assert recovery_s(counts, 100.0, 110.0, demand=10) == pytest.approx(0.4)


def test_recovery_counts_every_executor() -> None:
    # Two executors at 5/s each from the start: 10/s together, so the
    # first window already holds 10 >= 9.
    counts = [Count(b, e, 1, 1, 0, 0) for b in range(1000, 1050, 2) for e in ("a", "b")]
    assert recovery_s(counts, 100.0, 105.0, demand=10) == 0.0


def test_recovery_that_never_comes_is_none() -> None:
    # The only full windows inside [100.0, 101.2) start at 1000..1002, and
    # each holds at most 1002 + 9 - 1005 + 1 = 7 < 9.
    assert recovery_s(ones_from(1005, 1100), 100.0, 101.2, demand=10) is None


def test_sustained_rate() -> None:
    # 1 success per bucket = 10/s; over [100.5, 101.5): 10 buckets, 10 successes.
    assert sustained_rate(ones_from(1000, 1100), 100.5, 101.5) == pytest.approx(10.0)
    assert sustained_rate(ones_from(1000, 1100), 101.0, 101.0) == 0.0


PHASE = Phase("hot", 100.0, 102.0, demand=4.0, capacity=2.0)
COUNTS = [
    Count(1000, "a", 3, 1, 2, 0),
    Count(1019, "b", 2, 2, 0, 0),
    Count(1020, "a", 5, 0, 5, 0),  # 102.0 s: after the phase
    Count(999, "b", 7, 0, 6, 1),  # 99.9 s: before it
]
STEPS = [
    Step("a", 100.5, 101.0, True, "", 2),
    Step("a", 101.0, 103.0, False, "ATTEMPTS_EXHAUSTED", 3, undecided=True),
    Step("b", 101.5, 101.6, True, "", 1),
    Step("b", 102.0, 102.1, True, "", 1),  # started after the phase
]
CALLS = {"a": {100: [4, 1], 101: [6, 0], 102: [10, 10]}, "b": {99: [3, 3]}}


def test_phase_figures_count_what_is_inside_the_phase() -> None:
    f = phase_figures(PHASE, 2.0, COUNTS, STEPS, CALLS, cpu_s=0.02)
    assert (f["attempts"], f["successes"], f["throttled"], f["errors"]) == (5, 3, 2, 0)
    assert f["seconds"] == pytest.approx(2.0)
    assert f["attempts_per_c"] == pytest.approx(1.25)  # 5 / (2 s x 2/s)
    assert f["successes_per_c"] == pytest.approx(0.75)  # 3 / 4
    assert f["share_429"] == pytest.approx(0.4)  # 2 / 5
    assert f["demand_per_c"] == 2.0
    assert (f["steps"], f["step_attempts"]) == (3, 6)
    assert f["step_success"] == pytest.approx(2 / 3)
    # Latencies 500, 2000 and 100 ms: p50 is rank 2 (500), p99 rank 3.
    assert (f["p50_ms"], f["p99_ms"]) == (pytest.approx(500), pytest.approx(2000))
    assert f["p99_ms_by_executor"] == {"a": pytest.approx(2000), "b": pytest.approx(100)}
    # a: 1 success for 2 steps (0.5); b: 2 for 1 (2.0): 2.5^2 / (2 x 4.25).
    assert f["jain"] == pytest.approx(6.25 / 8.5)
    # Seconds 100 and 101 of a; 102 is after, b's 99 before.
    assert (f["squawk_calls"], f["undecided"]) == (10, 1)
    assert f["undecided_share"] == pytest.approx(0.1)
    assert f["cpu_ms_per_dispatch"] == pytest.approx(4.0)  # 20 ms / 5 attempts


def test_phase_figures_without_a_daemon_or_traffic() -> None:
    f = phase_figures(PHASE, 2.0, [], [], {}, cpu_s=None)
    assert f["attempts_per_c"] == 0.0
    for key in ("share_429", "step_success", "p50_ms", "jain", "undecided_share"):
        assert f[key] is None, key
    assert f["cpu_ms_per_dispatch"] is None


def figures(**over: Any) -> dict[str, Any]:
    base = phase_figures(PHASE, 2.0, [], [], {}, cpu_s=None)
    return base | over


def result(mid: dict[str, Any], last: dict[str, Any], whole: dict[str, Any]) -> dict[str, Any]:
    return {"phases": [figures(), figures(**mid), figures(**last)], "run": figures(**whole)}


TEN = next(v for v in run.variants(1, 2, 1) if v.name == "10x")


def test_the_10x_goals_hold_on_their_bounds() -> None:
    at_bounds = result(
        {"attempts_per_c": 1.2, "successes_per_c": 0.9, "jain": 0.95},
        {"recovery_s": 5.0},
        {"undecided_share": 0.001},
    )
    lines = run.checks(TEN, at_bounds, 20)
    assert [holds for _, holds in lines[:5]] == [True] * 5
    past = result(
        {"attempts_per_c": 1.21, "successes_per_c": 0.89, "jain": 0.94},
        {"recovery_s": None},
        {"undecided_share": 0.0011},
    )
    assert [holds for _, holds in run.checks(TEN, past, 20)[:5]] == [False] * 5


def test_the_dialects_attempts_bound_counts_what_the_bucket_held() -> None:
    # A minute's bucket held 0.15 x C's worth of the phase as the overload
    # began: a pace that sends C and that is served, not over-sending.
    # Attempts at 1.25 x C are within 1.1 x C + 0.15; at 1.26, past it.
    openai_m = next(v for v in run.variants(1, 2, 1) if v.name == "openai-m")
    fine = {"attempts_per_c": 1.25, "successes_per_c": 1.25, "bank_per_c": 0.15}
    whole = {"attempts": 100, "throttled": 0}
    lines = run.checks(openai_m, result(fine, {}, whole), 20)
    assert [holds for _, holds in lines] == [True, True, True]
    over = result(fine | {"attempts_per_c": 1.26}, {}, whole)
    assert [holds for _, holds in run.checks(openai_m, over, 20)] == [False, True, True]
    # Without a bucket's store (a run recorded before it was read), 1.1 x C.
    assert not run.checks(openai_m, result(fine | {"bank_per_c": 0.0}, {}, whole), 20)[0][1]


def test_the_other_variants_goals() -> None:
    by_name = {v.name: v for v in run.variants(1, 2, 1)}
    two = result({"successes_per_c": 0.95, "attempts_per_c": 1.11}, {}, {})
    assert [h for _, h in run.checks(by_name["2x"], two, 20)] == [True, False]
    headers = result({}, {}, {"throttled": 1, "attempts": 100})
    assert [h for _, h in run.checks(by_name["headers"], headers, 20)] == [True]
    headers = result({}, {}, {"throttled": 2, "attempts": 100})
    assert [h for _, h in run.checks(by_name["headers"], headers, 20)] == [False]
    # C = 20 halved is 10/s: 9/s is 0.9 of it.
    halving = result({"settled_successes_per_s": 9.0}, {}, {})
    assert [h for _, h in run.checks(by_name["halving"], halving, 20)] == [True]
    halving = result({"settled_successes_per_s": 8.9}, {}, {})
    assert [h for _, h in run.checks(by_name["halving"], halving, 20)] == [False]
    # 1000 steps, 999 of them ok, in 1020 attempts: both hold; 1021 does not.
    errors = result({}, {}, {"steps": 1000, "step_success": 0.999, "step_attempts": 1020})
    assert [h for _, h in run.checks(by_name["5xx"], errors, 20)] == [True, True]
    errors = result({}, {}, {"steps": 1000, "step_success": 0.998, "step_attempts": 1021})
    assert [h for _, h in run.checks(by_name["5xx"], errors, 20)] == [False, False]


def test_the_tenant_goals() -> None:
    by_name = {v.name: v for v in run.variants(1, 2, 1)}
    tenants, weights = by_name["tenants"], by_name["weights"]
    ids = [ident for ident, _ in tenants.executors]
    # Steps offered in the overload: 20 per light tenant, 200 by the flood;
    # 60 successes in all. Max-min: an equal part is 60 / 4 = 15, under
    # every tenant's demand, so each of the four has a share of 15.
    even = result(
        {
            "steps_by_executor": dict(zip(ids, [20, 20, 20, 200], strict=True)),
            "successes_by_executor": dict(zip(ids, [15, 15, 15, 15], strict=True)),
        },
        {},
        {},
    )
    lines = run.checks(tenants, even, 20)
    # 15 of 20 is 75 %: the light tenants miss 0.95; the shares are fair.
    assert [h for _, h in lines] == [False, False, False, True]
    # 100 successes: an equal part is 25, over each light tenant's 20, so
    # they keep 20 each and the flood gets 40. Served so, all four hold.
    fair = result(
        {
            "steps_by_executor": dict(zip(ids, [20, 20, 20, 200], strict=True)),
            "successes_by_executor": dict(zip(ids, [20, 20, 19, 41], strict=True)),
        },
        {},
        {},
    )
    lines = run.checks(tenants, fair, 20)
    assert [h for _, h in lines] == [True, True, True, True]
    # First come, first served: the flood took 70 of 100.
    unfair = result(
        {
            "steps_by_executor": dict(zip(ids, [20, 20, 20, 200], strict=True)),
            "successes_by_executor": dict(zip(ids, [10, 10, 10, 70], strict=True)),
        },
        {},
        {},
    )
    # Served 10 of 20 each; the shares are 20, 20, 20, 40, so Jain's index
    # is over 0.5, 0.5, 0.5, 1.75: 3.25^2 / (4 x (3 x 0.25 + 3.0625)).
    lines = run.checks(tenants, unfair, 20)
    assert [h for _, h in lines] == [False, False, False, False]
    assert run.tenant_fairness(tenants, unfair["phases"][1]) == pytest.approx(
        3.25**2 / (4 * 3.8125)
    )
    wids = [ident for ident, _ in weights.executors]
    three = result(
        {"successes_by_executor": dict(zip(wids, [45, 45, 15, 15], strict=True))}, {}, {}
    )
    assert [h for _, h in run.checks(weights, three, 20)] == [True]  # 90 : 30
    off = result({"successes_by_executor": dict(zip(wids, [50, 50, 15, 15], strict=True))}, {}, {})
    assert [h for _, h in run.checks(weights, off, 20)] == [False]  # 100 : 30 = 3.33


def test_the_critical_stream_goals() -> None:
    critical = next(v for v in run.variants(1, 2, 1) if v.name == "critical")
    ident = critical.executors[0][0]  # the first executor sends CRITICAL
    assert critical.levels[0] == "CRITICAL"

    def stream(served: int, p99: float, unloaded: float) -> dict[str, Any]:
        r = result(
            {
                "steps_by_executor": {ident: 100},
                "successes_by_executor": {ident: served},
                "p99_ms_by_executor": {ident: p99},
            },
            {},
            {},
        )
        r["phases"][0] = figures(p99_ms_by_executor={ident: unloaded})
        return r

    # 99 of 100 served, p99 120 ms against 100 unloaded: both on the bound.
    assert [h for _, h in run.checks(critical, stream(99, 120.0, 100.0), 20)] == [True, True]
    assert [h for _, h in run.checks(critical, stream(98, 121.0, 100.0), 20)] == [False, False]


def test_max_min_fills_the_smallest_demands_first() -> None:
    # 10 between demands 1, 2, 20 at equal weights: 1 and 2 are kept, 7 left.
    assert run.max_min({"a": 1, "b": 2, "c": 20}, dict.fromkeys("abc", 1.0), 10) == {
        "a": 1,
        "b": 2,
        "c": pytest.approx(7),
    }
    # Weights 3 : 1, both asking more: 3 and 1 of 4.
    assert run.max_min({"h": 10, "l": 10}, {"h": 3.0, "l": 1.0}, 4) == {
        "h": pytest.approx(3),
        "l": pytest.approx(1),
    }


def test_the_storm_goals_compare_with_the_no_squawk_run() -> None:
    storms = [v for v in run.variants(1, 2, 1) if v.storm]
    assert [v.name for v in storms] == ["storm", "sdk-anthropic"]
    none = result({"step_success": 0.80, "attempts": 300}, {}, {})
    # 0.99 x 80 % is 79.2 %: a step success on it holds, one below misses;
    # as many attempts as without Squawk hold, one more misses.
    on_bounds = result({"step_success": 0.792, "attempts": 300}, {}, {})
    past = result({"step_success": 0.7919, "attempts": 301}, {}, {})
    for storm in storms:
        assert [h for _, h in run.checks(storm, on_bounds, 20, none)] == [True, True]
        assert [h for _, h in run.checks(storm, past, 20, none)] == [False, False]
        # The baseline is not compared with itself; without one, it is a miss.
        assert run.checks(storm, none, 20, none) == []
        assert [h for _, h in run.checks(storm, on_bounds, 20)] == [False]


def test_every_header_dialect_and_10x_without_headers_have_the_dialect_goals() -> None:
    dialects = [v for v in run.variants(1, 2, 1) if v.goal == "dialect"]
    assert {v.dialect for v in dialects} == {*run.DIALECTS}  # sdk-openai repeats openai-s
    # attempts <= 1.1 x C, successes >= 0.95 x C, <= 2 % of attempts 429.
    on_bounds = result(
        {"attempts_per_c": 1.1, "successes_per_c": 0.95}, {}, {"throttled": 2, "attempts": 100}
    )
    past = result(
        {"attempts_per_c": 1.11, "successes_per_c": 0.94}, {}, {"throttled": 3, "attempts": 100}
    )
    for variant in dialects:
        assert [h for _, h in run.checks(variant, on_bounds, 20)] == [True] * 3, variant.name
        assert [h for _, h in run.checks(variant, past, 20)] == [False] * 3, variant.name
    # 10x without headers: the same three after the pacer issue's five.
    assert [h for _, h in run.checks(TEN, on_bounds, 20)[5:]] == [True] * 3
    assert [h for _, h in run.checks(TEN, past, 20)[5:]] == [False] * 3


def test_the_table_has_a_row_per_mode_and_phase_and_the_goals() -> None:
    r = result(
        {"attempts_per_c": 1.0, "successes_per_c": 1.0, "jain": 1.0},
        {"recovery_s": None},
        {"undecided_share": 0.0},
    )
    text = run.render(TEN, {"none": r, "pod": r}, 20)
    lines = text.splitlines()
    assert lines[0] == "10x overload: C = 20/s, phases 1 s + 2 s + 1 s"
    rows = [line for line in lines if line.startswith(("no Squawk ", "Squawk, pod state "))]
    assert len(rows) == 6
    assert "never" in rows[2]  # the last phase of "none": no recovery
    assert sum("miss  recovery <= 5 s" in line for line in lines) == 2
    assert sum("PASS  attempts <= 1.2 x C: 1.00" in line for line in lines) == 2


def build_go(tmp: Path) -> Path:
    go_build(ROOT / "bench", "./upstream-go", tmp)
    return go_build(ROOT / "bench" / "executor-go", ".", tmp)


def call(port: int, executor: str = "t") -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/call?step=1", headers={"X-Executor": executor}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, {k.lower(): v for k, v in reply.headers.items()}
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_go(tmp_path_factory.mktemp("outcome-bin"))


def test_the_upstream_answers_429_over_its_bucket_and_counts(bin_dir: Path, tmp_path: Path) -> None:
    # 0.01 calls/s: the bucket holds one call and refills in 100 s, so only
    # the first of three calls gets through, whatever the machine's speed.
    port = free_port()
    argv = [str(bin_dir / "upstream-go"), "-listen", f"127.0.0.1:{port}", "-capacity", "0.01"]
    with Processes(tmp_path) as procs:
        proc = procs.start("upstream", [*argv, "-headers"], os.environ)
        run.wait_port(proc, port)
        first, headers = call(port, "a")
        assert first == 200
        assert headers["x-ratelimit-limit-requests"] == "1"
        assert headers["x-ratelimit-remaining-requests"] == "0"
        # Empty, the bucket is full again in 1 / 0.01 = 100 s, as a Go duration.
        assert headers["x-ratelimit-reset-requests"] == "1m40s"
        second, headers = call(port, "b")
        assert second == 429
        assert headers["retry-after"] == "1"
        assert call(port, "b")[0] == 429
        rows = json.loads(run.get(f"http://127.0.0.1:{port}/counts"))["rows"]
        totals: dict[str, list[int]] = {}
        for _, executor, *n in rows:
            totals[executor] = [
                a + b for a, b in zip(totals.get(executor, [0] * 4), n, strict=True)
            ]
        assert totals == {"a": [1, 1, 0, 0], "b": [2, 0, 2, 0]}


def test_the_upstream_sends_its_errors_and_no_headers_unless_asked(
    bin_dir: Path, tmp_path: Path
) -> None:
    port = free_port()
    argv = [str(bin_dir / "upstream-go"), "-listen", f"127.0.0.1:{port}", "-error-rate", "1"]
    with Processes(tmp_path) as procs:
        run.wait_port(procs.start("upstream", argv, os.environ), port)
        status, headers = call(port)
        assert status == 500
        assert "x-ratelimit-limit-requests" not in headers


def test_a_tiny_run_of_every_mode(bin_dir: Path, tmp_path: Path) -> None:
    built = ROOT / "clients" / "typescript" / "dist" / "src" / "index.js"
    if not built.exists():
        pytest.fail(f"{built.relative_to(ROOT)} is missing: run `make ts-build` first")
    out = tmp_path / "outcome.json"
    args = ["--bin", str(bin_dir), "--capacity", "10", "--warm", "0.5", "--hot", "1"]
    code = run.main([*args, "--after", "0.5", "--only", "10x", "--out", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    modes = report["variants"]["10x"]["modes"]
    assert list(modes) == ["none", "stateless", "pod"]
    for mode, r in modes.items():
        assert r["failed"] == [], mode
        assert [p["phase"] for p in r["phases"]] == ["before", "10x", "after"]
        assert r["run"]["steps"] > 0, mode
        assert r["run"]["attempts"] >= r["run"]["successes"], mode
        assert len(r["checks"]) == 8, mode  # the pacer issue's five, issue 33's three
    assert modes["none"]["run"]["squawk_calls"] == 0
    assert modes["pod"]["run"]["squawk_calls"] > 0


def test_the_readme_table_has_a_row_per_variant_and_mode() -> None:
    r = result(
        {"attempts_per_c": 1.1, "successes_per_c": 0.95, "jain": 1.0},
        {"recovery_s": 0.5},
        {"undecided_share": 0.0},
    )
    report = {
        "variants": {
            "10x": {"title": "10x overload", "modes": {"none": r | {"failed": []}}},
            "2x": {"title": "2x overload", "modes": {"pod": {"failed": ["it crashed"]}}},
        }
    }
    lines = run.markdown(report).splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("| 10x overload | no Squawk | 1.10 | 0.95 |")
    assert "| 0.5 s |" in lines[2]
    assert lines[3].startswith("| 2x overload | Squawk, pod state | failed to run |")
    assert all(line.count("|") == 12 for line in lines)
