"""The views' row (`make bench-views`) runs and measures what it says: a
tiny run against a real daemon over a real socket with the real load
generator, the viewers reading as squawk top, a browser and a scraper do.
No timing is asserted (a CI machine is too noisy): only that the load was
served without errors (the run stops on any), that the viewers read, and
that the figures add up."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from go_build import go_build

sys.path.insert(0, str(ROOT))

from bench import views


@pytest.fixture(scope="module")
def loadgen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return go_build(ROOT / "bench", "./loadgen", tmp_path_factory.mktemp("views-bin")) / "loadgen"


def test_a_tiny_views_run(loadgen: Path, tmp_path: Path) -> None:
    out = tmp_path / "views.json"
    args = ["--loadgen", str(loadgen), "--seconds", "1", "--rounds", "1", "--fill", "1"]
    args += ["--viewers", "3"]
    assert views.main([*args, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    (row,) = report["rounds"]
    # Three sets beside the load and one alone each read at least once.
    assert row["view_reads"] >= 4 and row["viewers"] == 3 and row["scrapes"] >= 1
    assert row["loaded_cpu_per_s"] > 0 and row["loaded_viewed_cpu_per_s"] > 0
    assert row["views_share_of_loaded"] == pytest.approx(
        (row["loaded_viewed_cpu_per_s"] - row["loaded_cpu_per_s"]) / 3 / row["loaded_cpu_per_s"]
    )
    assert row["scrape_share_of_loaded"] == pytest.approx(
        (row["loaded_scraped_cpu_per_s"] - row["loaded_cpu_per_s"]) / 15 / row["loaded_cpu_per_s"]
    )
    assert report["views_share_of_loaded"] == row["views_share_of_loaded"]
    assert report["met"] == (report["views_share_of_loaded"] <= report["goal"] == 0.01)
