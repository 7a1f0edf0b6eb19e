"""The overload row (`make bench-overload`) runs, and measures what it says:
a tiny run against a real daemon (and the echo floor beside it) over a
real socket, with the real load generator. No timing is asserted (a CI
machine is too noisy): only that every RPC's payloads are decided by the
daemon (a row of errors would measure the error path) and that the
figures add up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import overload
from conftest import ROOT
from go_build import go_build


@pytest.fixture(scope="module")
def loadgen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return (
        go_build(ROOT / "bench", "./loadgen", tmp_path_factory.mktemp("overload-bin")) / "loadgen"
    )


def test_a_tiny_overload_run(loadgen: Path, tmp_path: Path) -> None:
    out = tmp_path / "overload.json"
    args = ["--loadgen", str(loadgen), "--callers", "1,2", "--seconds", "0.5"]
    assert overload.main([*args, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["deadline_ms"] == 50
    assert [r["callers"] for r in report["rows"]] == [1, 2]
    for row in report["rows"]:
        assert set(row["rpcs"]) == set(overload.RPCS)
        for rpc, figures in row["rpcs"].items():
            # Decided by the daemon, not refused: the payloads are valid.
            assert figures["decided_per_s"] > 0, rpc
            assert "INVALID_ARGUMENT" not in figures["codes"], rpc
            assert "INTERNAL" not in figures["codes"], rpc
        assert row["decided_per_s"] == pytest.approx(
            sum(f["decided_per_s"] for f in row["rpcs"].values())
        )
        assert 0.0 <= row["answered_share"] <= 1.0
        assert row["health_p99_ms"] is not None
        # The same callers without the throttle: decided too, and never
        # refused by a throttle they do not have.
        bare = row["unthrottled"]
        for rpc, figures in bare["rpcs"].items():
            assert figures["decided_per_s"] > 0, rpc
            assert figures["not_sent_per_s"] == 0, rpc
        # The echo floor beside it, on the same payloads: answered by the
        # bare server (its Echo method), every loop.
        floor = row["floor"]
        assert set(floor["rpcs"]) == set(overload.RPCS)
        for rpc, figures in floor["rpcs"].items():
            assert figures["decided_per_s"] > 0, rpc
            assert set(figures["codes"]) <= {"DeadlineExceeded", "Canceled"}, rpc
    text = overload.render(report["rows"])
    assert len(text.splitlines()) == 3
