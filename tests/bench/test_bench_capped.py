"""The capped-credential row (`make bench-capped`) runs, and measures what it
says: a tiny run of four executors against the real daemon and the real
capped loopback upstream, with and without the cap declared. No timing is
asserted (a CI machine is too noisy): only that the figures add up and
that, with the cap declared, every call the upstream rejected for
concurrency is one a runner sent without asking (a daemon answer that came
too late: admission fails open), never one the pod admitted past the cap."""

from __future__ import annotations

import json
import sys
from pathlib import Path

# bench/ is a folder at the repository's root, not an installed package,
# and pytest puts only tests/ on the import path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import capped
from squawk.daemon.config import parse_config


def test_the_row_declares_the_cap_only_when_asked() -> None:
    policy = parse_config(capped._policy(4), "<capped>").policy.profile("default")
    assert policy.for_upstream(capped.UPSTREAM).rate_limit.max_in_flight == 4
    bare = parse_config(capped._policy(None), "<bare>").policy.profile("default")
    assert bare.for_upstream(capped.UPSTREAM).rate_limit.max_in_flight is None


def test_a_tiny_capped_run(tmp_path: Path) -> None:
    out = tmp_path / "capped.json"
    assert capped.main(["--k", "1", "--seconds", "1", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["k"], r["declared"]) for r in rows] == [(1, False), (1, True)]
    for row in rows:
        assert row["served"] > 0
        assert 0.0 < row["utilisation"] <= 1.0 + 1e-6
        assert row["steps_ok"] <= row["served"]
    declared = rows[1]
    assert declared["rejected"] <= declared["fell_back"]
