"""The executors of examples/, one per language, run as examples/README.md
says: each built with its own toolchain (python, go build, npm install and
node), against the real daemon and the stand-in hotel API of
examples/hotel_api.py on loopback.

Three cases per language, each against a daemon of its own (so no case sees
another's upstream state):

- a city name where the API wants its code: the API refuses PARIS with a
  400 naming PAR; the runner asks DecideRetry (CORRECT), the correction hook
  asks AnalyzeError and merges its suggested_changes, and the API then sees
  PAR, the other parameter kept;
- a code nothing can fix: AnalyzeError suggests nothing and the hook stops
  the step after one call;
- an outage (503 on every call): the runner resends until the attempt
  budget is spent, and the program prints the language's step-failure error.

The Python program must print exactly what examples/README.md shows for
each case; and with no daemon listening, the local fallback decides both
the outage and the refused city alone.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, Daemon, free_port, start_daemon
from readme_clients.build import built_typescript_client, go, tsc
from squawk_client import SquawkClient

sys.path.insert(0, str(ROOT))
from examples.hotel_api import HotelApi

EXAMPLES = ROOT / "examples"

# The language's step-failure error, as its program names it.
FAILURE_TYPE = {"python": "StepFailed", "go": "RunError", "typescript": "StepFailedError"}


@dataclass(frozen=True)
class Program:
    language: str
    argv: list[str]
    cwd: Path

    def run(self, target: str, url: str, city: str) -> subprocess.CompletedProcess[str]:
        """Run to its end, told where the daemon and the API are as a user tells it."""
        clean = {k: v for k, v in os.environ.items() if not k.startswith("SQUAWK_")}
        return subprocess.run(
            [*self.argv, city],
            cwd=self.cwd,
            env={**clean, "SQUAWK_ADDRESS": target, "UPSTREAM_URL": url},
            capture_output=True,
            text=True,
            timeout=60,
        )


def readme_shows(city: str) -> list[str]:
    """What examples/README.md says the Python program prints for `city`:
    the lines after its ```console block's `$ ... executor.py CITY`."""
    readme = (EXAMPLES / "README.md").read_text()
    blocks: list[str] = re.findall(r"```console\n(.*?)```", readme, re.S)
    for block in blocks:
        command, *output = block.rstrip("\n").split("\n")
        if command.startswith("$ ") and command.endswith(f"executor.py {city}"):
            return output
    raise AssertionError(f"examples/README.md shows no run of executor.py {city}")


def check_readme(program: Program, city: str, ran: subprocess.CompletedProcess[str]) -> None:
    if program.language == "python":
        assert ran.stdout.splitlines() == readme_shows(city)


def build(language: str, work: Path) -> Program:
    if language == "python":
        return Program(language, [sys.executable, "executor.py"], EXAMPLES / "python")
    if language == "go":
        # Its own module, with go.sum as committed: a stale one fails here.
        go(["build", "-o", str(work / "executor"), "."], EXAMPLES / "go")
        return Program(language, [str(work / "executor")], EXAMPLES / "go")
    built_typescript_client()
    example = EXAMPLES / "typescript"
    # Links the built client into the example's node_modules, as a user's
    # `npm install` does; nothing is downloaded.
    install = ["npm", "install", "--offline", "--no-audit", "--no-fund"]
    done = subprocess.run(install, cwd=example, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    # Plain JavaScript: its JSDoc types are checked, strict, and Node runs it as is.
    tsc(work, [str(example / "executor.js")], allowJs=True, checkJs=True, noEmit=True)
    return Program(language, ["node", "executor.js"], example)


@pytest.fixture(scope="module", params=sorted(FAILURE_TYPE))
def program(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Program:
    return build(request.param, tmp_path_factory.mktemp(request.param))


@dataclass
class Pod:
    daemon: Daemon
    decisions: Path

    def upstream(self) -> list[tuple[int, int]]:
        """The calls and failures in the window of each state the pod keeps for
        the examples' upstream (GetUpstreams): one, once Admit named it."""
        # Not the 50 ms default: a loaded machine must not fail the read.
        with SquawkClient(self.daemon.target, call_timeout=timedelta(seconds=5)) as client:
            states = client.get_upstreams(upstream="hotel-api")
        return [(state.window_calls, state.window_failures) for state in states]

    def decided(self) -> list[tuple[str, str]]:
        """Each RPC of the decision log with its answer, once the daemon stopped."""
        self.daemon.stop()
        lines = self.decisions.read_text().splitlines()
        return [(d["rpc"], answer(d)) for d in map(json.loads, lines)]


def answer(logged: dict[str, Any]) -> str:
    if logged["rpc"] == "AnalyzeError":
        return str(logged["squawk.analyzer.source"])
    return f"{logged['squawk.action']} {logged['squawk.reason']}"


@pytest.fixture
def pod(tmp_path: Path) -> Iterator[Pod]:
    decisions = tmp_path / "decisions.jsonl"
    daemon = start_daemon("--decision-log", str(decisions))
    try:
        yield Pod(daemon, decisions)
    finally:
        daemon.stop()


def test_a_refused_city_is_corrected_with_the_analyzers_suggestion(
    program: Program, pod: Pod
) -> None:
    with HotelApi() as api:
        ran = program.run(pod.daemon.target, f"{api.url}/search", "PARIS")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    # The suggested code was merged over the parameters: nights is kept.
    assert api.seen == [{"city_code": "PARIS", "nights": "2"}, {"city_code": "PAR", "nights": "2"}]
    assert ran.stdout.splitlines()[-1] == "2 hotels in PAR: Hotel du Louvre, Le Marais Suites"
    check_readme(program, "PARIS", ran)
    # The pod heard of the success (ReportOutcome) ...
    assert pod.upstream() == [(1, 0)]
    # ... admitted each dispatch, and decided the correction itself.
    assert pod.decided() == [
        ("Admit", "ADMIT ADMITTED"),
        ("DecideRetry", "CORRECT CORRECTION_ELIGIBLE"),
        ("AnalyzeError", "HEURISTIC"),
        ("Admit", "ADMIT ADMITTED"),
    ]


def test_a_code_nothing_can_fix_stops_the_step_after_one_call(program: Program, pod: Pod) -> None:
    with HotelApi() as api:
        ran = program.run(pod.daemon.target, f"{api.url}/search", "XYZ")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert api.seen == [{"city_code": "XYZ", "nights": "2"}]
    (said,) = ran.stdout.splitlines()
    assert said.startswith("step stopped: "), said
    assert "No safe correction: the offline analyzer" in said
    check_readme(program, "XYZ", ran)
    assert pod.decided() == [
        ("Admit", "ADMIT ADMITTED"),
        ("DecideRetry", "CORRECT CORRECTION_ELIGIBLE"),
        ("AnalyzeError", "NONE"),
    ]


def test_an_outage_ends_in_the_languages_step_failure_error(program: Program, pod: Pod) -> None:
    with HotelApi() as api:
        ran = program.run(pod.daemon.target, f"{api.url}/down", "PAR")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert api.seen == [{"city_code": "PAR", "nights": "2"}] * 3  # the default attempt budget
    (said,) = ran.stdout.splitlines()
    failure = FAILURE_TYPE[program.language]
    assert said.startswith(f"step failed: {failure}: REASON_ATTEMPTS_EXHAUSTED after 3 calls: "), (
        said
    )
    assert "(last error: HTTP 503" in said, said
    check_readme(program, "PAR", ran)
    assert pod.upstream() == [(3, 3)]


@pytest.mark.parametrize(
    ("path", "city", "calls", "reason"),
    [
        ("/down", "PAR", 3, "REASON_ATTEMPTS_EXHAUSTED"),
        # Only the daemon corrects: the fallback never resends a 4xx.
        ("/search", "PARIS", 1, "REASON_NO_CORRECTION_AVAILABLE"),
    ],
)
def test_with_no_daemon_the_local_fallback_decides(
    program: Program, path: str, city: str, calls: int, reason: str
) -> None:
    with HotelApi() as api:
        ran = program.run(f"127.0.0.1:{free_port()}", f"{api.url}{path}", city)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert len(api.seen) == calls
    (said,) = ran.stdout.splitlines()
    failure = FAILURE_TYPE[program.language]
    assert said.startswith(f"step failed: {failure}: {reason} after {calls} calls: "), said
