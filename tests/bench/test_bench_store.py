"""The Redis store rows' arithmetic: the answers that read Redis, from the
daemon's Prometheus text; when a row measured no Redis; and what the Redis
store adds to the memory store's figures, per round."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

# bench/ is a folder at the repository's root, not an installed package,
# and pytest puts only tests/ on the import path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.store import state_counts, state_fields, status
from bench.store_cost import StoreCost, render_store_costs, store_costs

Row = dict[str, Any]


def _metrics(decide: tuple[int, int], admit: tuple[int, int]) -> str:
    """The daemon's exposition with these (fleet, local) counts per RPC."""
    name = "squawk_state_answers"
    lines = [f"# HELP {name}_total Admit and DecideRetry answers that read upstream state."]
    lines.append(f"# TYPE {name}_total counter")
    for rpc, counts in (("DecideRetry", decide), ("Admit", admit)):
        for state, count in zip(("fleet", "local"), counts, strict=True):
            lines.append(f'{name}_total{{rpc="{rpc}",state="{state}"}} {count}.0')
            lines.append(f'{name}_created{{rpc="{rpc}",state="{state}"}} 1.7e+09')
    lines.append("squawk_state_store_up 1.0")
    return "\n".join(lines) + "\n"


def test_state_counts_sum_every_rpc_by_state() -> None:
    assert state_counts(_metrics((100, 3), (50, 2))) == {"fleet": 150.0, "local": 5.0}


def test_state_fields_are_the_windows_difference() -> None:
    # 1,000 answers in the window: 990 from Redis, 10 local (1 %).
    before, after = _metrics((100, 3), (50, 2)), _metrics((1090, 13), (50, 2))
    assert state_fields(before, after) == {
        "fleet_answers": 990.0,
        "local_answers": 10.0,
        "local_share": 0.01,
    }


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # The memory store counts no such answer: the family has no samples.
        ("# TYPE squawk_state_answers_total counter\n",) * 2,
        (None, _metrics((1, 0), (0, 0))),  # a scrape failed
        (_metrics((1, 0), (0, 0)), None),
    ],
)
def test_state_fields_are_empty_without_both_scrapes_or_any_answer(
    before: str | None, after: str | None
) -> None:
    assert state_fields(before, after) == dict.fromkeys(
        ("fleet_answers", "local_answers", "local_share")
    )


def test_no_answer_in_the_window_has_no_share() -> None:
    same = _metrics((5, 1), (0, 0))
    assert state_fields(same, same)["local_share"] is None


@pytest.mark.parametrize(
    ("measured", "calls", "fleet", "local", "expected"),
    [
        ("ok", 1000, 1000.0, 0.0, "ok"),
        ("ok", 1000, 600.0, 400.0, "ok"),  # 40 % local: flagged in the figures, still a row
        ("ok", 1000, 400.0, 600.0, "ok, but 60% of answers local: Redis was late or away"),
        ("ok", 1000, 900.0, 0.0, "ok"),  # scrapes a little inside the window
        ("ok", 1000, 899.0, 0.0, "failed: 899 answers of 1000 calls read the state store"),
        ("ok", 1000, None, None, "failed: the daemon's metrics have no squawk_state_answers_total"),
        # A status that already says what is wrong stays.
        ("failed: probe answered FAIL/CIRCUIT_OPEN", 1000, 0.0, 0.0, "failed: probe answered"),
        ("overloaded: answered 80% of offered", 800, 10.0, 790.0, "overloaded: answered 80%"),
    ],
)
def test_a_redis_row_must_have_read_redis(
    measured: str, calls: int, fleet: float | None, local: float | None, expected: str
) -> None:
    assert status(measured, calls, fleet, local).startswith(expected)


DECIDE, ADMIT = "DecideRetry +store", "Admit +store"


def _row(
    target: str,
    rpc: str,
    n: int,
    figures: tuple[float, float, float],
    status: str = "ok",
    local_share: float | None = None,
) -> Row:
    """A row of round `n` at 200/s, with its p50, p99 and CPU per call."""
    p50, p99, cpu = figures
    return {
        "target": target,
        "rpc": rpc,
        "sampling": None,
        "mode": "200/s",
        "round": n,
        "status": status,
        "p50_ms": p50,
        "p99_ms": p99,
        "cpu_s_per_1k": cpu,
        "local_share": local_share,
    }


ROWS = [
    # Round 1: Redis adds 0.3 ms at p50 (0.8 / 0.5 = 1.6), 1 ms at p99
    # (3 / 2 = 1.5) and 0.15 ms of CPU (0.75 / 0.6 = 1.25); no answer local.
    _row("squawk", DECIDE, 1, (0.5, 2.0, 0.6)),
    _row("squawk-redis", DECIDE, 1, (0.8, 3.0, 0.75), "ok", 0.0),
    # Round 2: 0.4 ms (1.0 / 0.6 = 1.667), 1.5 ms (4 / 2.5 = 1.6), 0.18 ms
    # (0.8 / 0.62 = 1.290); 1 % local. The Redis row could not keep up.
    _row("squawk", DECIDE, 2, (0.6, 2.5, 0.62)),
    _row("squawk-redis", DECIDE, 2, (1.0, 4.0, 0.8), "overloaded: answered 94% of offered", 0.01),
    # Round 3: most answers were local, so the round gives no figure.
    _row("squawk", DECIDE, 3, (0.4, 4.0, 0.6)),
    _row("squawk-redis", DECIDE, 3, (5.0, 5.1, 0.5), "ok, but 80% of answers local: ...", 0.8),
    # Admit ran on the memory store only.
    _row("squawk", ADMIT, 1, (0.5, 2.0, 0.5)),
    # Neither a traced row, a saturation row nor a row measured once is read.
    {**_row("squawk", DECIDE, 1, (9, 9, 9)), "sampling": 1.0},
    {**_row("squawk-redis", DECIDE, 1, (9, 9, 9)), "mode": "saturation"},
    {**_row("squawk-redis", DECIDE, 0, (9, 9, 9)), "round": None},
]


def _cost(found: list[StoreCost], name: str) -> StoreCost:
    return next(c for c in found if c.name == name)


def test_the_redis_store_adds_the_difference_of_each_rounds_rows() -> None:
    found = store_costs(ROWS, "200/s")
    assert [c.name for c in found] == [
        f"{rpc} {figure} at 200/s"
        for rpc in (DECIDE, ADMIT)
        for figure in ("p50", "p99", "CPU per call")
    ]
    p50 = _cost(found, "DecideRetry +store p50 at 200/s")
    assert p50.added_ms == pytest.approx((0.3, 0.4))
    assert p50.ratio == pytest.approx((1.6, 1 / 0.6))
    assert p50.local_share == (0.0, 0.01)
    p99 = _cost(found, "DecideRetry +store p99 at 200/s")
    assert p99.added_ms == pytest.approx((1.0, 1.5))
    assert p99.ratio == pytest.approx((1.5, 1.6))
    cpu = _cost(found, "DecideRetry +store CPU per call at 200/s")
    assert cpu.added_ms == pytest.approx((0.15, 0.18))
    assert cpu.ratio == pytest.approx((1.25, 0.8 / 0.62))


def test_the_summary_holds_each_figures_median_and_range() -> None:
    found = store_costs(ROWS, "200/s")
    doc = _cost(found, "DecideRetry +store p50 at 200/s").as_json()
    assert doc["memory_ms"]["value"] == pytest.approx(0.55)
    assert doc["redis_ms"]["value"] == pytest.approx(0.9)
    assert doc["added_ms"] == {
        "value": 0.35,
        "rounds": [0.3, 0.4],
        "min": 0.3,
        "max": 0.4,
        "spread": pytest.approx(0.2857, abs=1e-4),  # 0.1 / 0.35
    }
    # (1.6667 - 1.6) / 1.6333: the rounds agree on the ratio.
    assert doc["ratio"]["value"] == pytest.approx(1.6333, abs=1e-4)
    assert doc["ratio"]["spread"] == pytest.approx(0.0408, abs=1e-4)
    assert doc["spread_too_wide"] is False
    assert doc["local_share"]["max"] == 0.01
    assert doc["overloaded"] == ["round 2 squawk-redis tracing off DecideRetry +store 200/s"]
    assert doc["missing"] == [
        "round 3: squawk-redis tracing off DecideRetry +store 200/s: "
        "ok, but 80% of answers local: ..."
    ]


def test_a_store_row_without_its_pair_gives_no_figure() -> None:
    admit = _cost(store_costs(ROWS, "200/s"), "Admit +store p50 at 200/s")
    assert admit.added_ms == ()
    assert admit.missing == ("round 1: a row did not run",)
    assert admit.as_json()["added_ms"] is None


def test_the_printout_says_what_redis_adds_and_how_many_answers_were_local() -> None:
    text = render_store_costs(store_costs(ROWS, "200/s"))
    assert (
        "  DecideRetry +store p50 at 200/s (2 rounds): memory 0.550 ms, Redis 0.900 ms; "
        "Redis adds +0.350 ms (+0.300 to +0.400), x1.63 (1.60 to 1.67); "
        "local answers 0.5% (0.0% to 1.0%); overloaded: round 2 squawk-redis" in text
    )
    assert "  Admit +store p50 at 200/s: -\n      round 1: a row did not run" in text


def test_no_store_rows_no_figures() -> None:
    assert store_costs(ROWS[-3:], "200/s") == []
    assert store_costs(ROWS, "1000/s") == []
