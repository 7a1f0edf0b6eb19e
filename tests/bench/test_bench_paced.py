"""The paced dispatch row (`make bench-paced`) runs, and measures what it
says: a tiny run of four real executor processes through the Python runner
against a real daemon whose policy declares the pace. No timing is asserted
(a CI machine is too noisy): only that the policy declares the pace the row
names, that every dispatch was paced by the daemon (no fallback, no errors
at this low rate) and that the figures add up."""

from __future__ import annotations

import json
import sys
from pathlib import Path

# bench/ is a folder at the repository's root, not an installed package,
# and pytest puts only tests/ on the import path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import paced
from squawk.daemon.config import parse_config


def test_the_row_declares_its_pace_on_its_upstream() -> None:
    config = parse_config(paced._policy(123.0), "<paced>")
    upstream = config.policy.profile("default").for_upstream(paced.UPSTREAM)
    assert upstream.rate_limit.rate == 123.0
    assert config.policy.profile("default").for_upstream("other").rate_limit.rate is None


def test_a_tiny_paced_run(tmp_path: Path) -> None:
    out = tmp_path / "paced.json"
    args = ["--rate", "40", "--pace", "50", "--seconds", "1", "--warmup", "0.5"]
    assert paced.main([*args, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [r["run"] for r in report["rows"]] == [name for name, _ in paced.RUNS]
    for row in report["rows"]:
        assert row["dispatches"] > 0 and row["step_errors"] == 0
        assert set(row["rpcs"]) <= {"Admit", "ReportOutcome"}
        assert row["rpcs_per_dispatch"] == round(sum(row["rpcs"].values()) / row["dispatches"], 4)
        assert abs(row["of_pace"] - row["dispatches_per_s"] / 50) < 0.002
    # The baseline asks one permit per dispatch: an Admit each.
    # (an edge of the window may hold an Admit whose dispatch ends after it).
    baseline = report["rows"][0]
    assert baseline["rpcs"]["Admit"] >= 0.9 * baseline["dispatches"]
