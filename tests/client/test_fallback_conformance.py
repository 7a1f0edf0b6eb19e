"""The fallback contract (docs/fallback.md) through one runner: every case
of clients/fallback/cases.json is fed to a small testee per language (JSON
lines on stdin and stdout, as protobuf's conformance suite does), and each
language's answers are checked against the same expectations.

A case that fails must be listed, with the reason, in that language's
clients/fallback/failure_list_<language>.txt; a listed case that passes fails
the run too, so that a list never goes stale silently.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, VECTORS

CONTRACT_DIR = ROOT / "clients" / "fallback"
CASES = json.loads((CONTRACT_DIR / "cases.json").read_text(encoding="utf-8"))
TS_CLIENT = ROOT / "clients" / "typescript"
# The instant a case without its own "now" is decided at (Unix seconds);
# such a case reads no date, so any instant answers the same.
DEFAULT_NOW = 1_767_225_600
LANGUAGES = ("python", "go", "typescript")


@dataclass(frozen=True)
class Case:
    name: str
    line: dict[str, Any]
    # What the response must hold, or the field a refused input names.
    expect: dict[str, Any] | None
    field: str | None


def _vector_case(name: str) -> Case:
    found = [c for c in VECTORS["decide"] if c["name"] == name]
    assert len(found) == 1, f"cases.json names decide vector {name!r}, found {len(found)}"
    vector = found[0]
    fallback = vector.get("fallback")
    assert fallback is not False, f"vector {name!r} is marked as not applying to the fallback"
    expect = fallback if isinstance(fallback, dict) else vector["expect"]
    line = {"name": name, "now": vector.get("now", DEFAULT_NOW), "request": vector["request"]}
    return Case(name, line, expect, None)


def _invalid_case(name: str) -> Case:
    found = [c for c in VECTORS["invalid"] if c["name"] == name]
    assert len(found) == 1, f"cases.json names invalid vector {name!r}, found {len(found)}"
    vector = found[0]
    assert vector["rpc"] == "DecideRetry", f"invalid vector {name!r} is not a DecideRetry"
    line = {"name": name, "now": DEFAULT_NOW, "request": vector["request"]}
    return Case(name, line, None, vector["field"])


def _request(request: dict[str, Any]) -> dict[str, Any]:
    """A case's request as proto3 JSON: 'responseBodyText' is a UTF-8 body,
    'responseBodySpaces' a body of that many spaces (a limit's size)."""
    out = dict(request)
    text = out.pop("responseBodyText", None)
    spaces = out.pop("responseBodySpaces", None)
    if spaces is not None:
        text = " " * spaces
    if text is not None:
        out["responseBody"] = base64.b64encode(text.encode()).decode()
    return out


def _own_case(case: dict[str, Any]) -> Case:
    line = {
        "name": case["name"],
        "now": case.get("now", DEFAULT_NOW),
        "env": case.get("env", {}),
        "request": _request(case["request"]),
    }
    return Case(case["name"], line, case.get("expect"), case.get("field"))


def all_cases() -> list[Case]:
    cases = (
        [_vector_case(name) for name in CASES["vectors"]]
        + [_invalid_case(name) for name in CASES["invalidVectors"]]
        + [_own_case(c) for c in CASES["cases"]]
    )
    names = [c.name for c in cases]
    assert len(set(names)) == len(names), "case names must be unique"
    return cases


def _is_default(value: Any) -> bool:
    return value in (False, 0, "", "0s") and value is not None


def _ms(text: str) -> float:
    return round(float(text[:-1]) * 1000, 3)


def mismatches(expect: Any, actual: Any, path: str = "") -> list[str]:
    """Where `actual` differs from what `expect` lists. A null expectation
    means absent; an absent field reads as its default; a Duration
    ("1.5s") compares to the microsecond."""
    if isinstance(expect, dict):
        if not isinstance(actual, dict):
            return [f"{path}: expected an object, got {actual!r}"]
        out: list[str] = []
        for key, value in expect.items():
            out += mismatches(value, actual.get(key), f"{path}.{key}")
        return out
    if expect is None:
        return [] if actual is None else [f"{path}: expected it absent, got {actual!r}"]
    if actual is None and _is_default(expect):
        return []
    if isinstance(expect, str) and expect.endswith("s") and isinstance(actual, str):
        try:
            same = _ms(expect) == _ms(actual)
        except ValueError:
            same = expect == actual
        return [] if same else [f"{path}: expected {expect}, got {actual}"]
    return [] if expect == actual else [f"{path}: expected {expect!r}, got {actual!r}"]


def judge(case: Case, answer: dict[str, Any] | None) -> list[str]:
    if answer is None:
        return ["no answer"]
    if "crash" in answer:
        return [f"crashed: {answer['crash']}"]
    if case.field is not None:
        got = answer.get("error", {}).get("field")
        return (
            []
            if got == case.field
            else [f"expected the input refused on {case.field!r}, got {answer!r}"]
        )
    if "error" in answer:
        return [f"refused the input: {answer['error']}"]
    return mismatches(case.expect, answer.get("response"))


def failure_list(language: str) -> dict[str, str]:
    """The listed case names and why each is listed."""
    path = CONTRACT_DIR / f"failure_list_{language}.txt"
    listed: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, why = line.partition(" # ")
        assert sep and why.strip(), f"{path.name}:{number}: say why: '<case name> # <reason>'"
        listed[name.strip()] = why.strip()
    return listed


def _go_testee(tmp: Path) -> list[str]:
    out = tmp / "go-testee"
    try:
        done = subprocess.run(
            ["go", "test", "-c", "-tags", "conformance", "-o", str(out), "."],
            cwd=ROOT / "clients" / "go",
            capture_output=True,
            text=True,
            # A cold module and build cache downloads and compiles gRPC.
            timeout=600,
            check=False,
        )
    except FileNotFoundError:
        pytest.fail("the conformance runner needs Go (`go` is not on PATH)")
    assert done.returncode == 0, f"go test -c failed:\n{done.stderr}"
    return [str(out), "-test.run=^TestFallbackTestee$"]


def _ts_testee() -> list[str]:
    built = TS_CLIENT / "dist" / "test" / "conformance" / "testee.js"
    if not built.exists():
        pytest.fail(f"{built.relative_to(ROOT)} is missing: run `make ts-build` first")
    newest = max(p.stat().st_mtime for d in ("src", "test") for p in (TS_CLIENT / d).rglob("*.ts"))
    if newest > built.stat().st_mtime:
        pytest.fail(f"{built.relative_to(ROOT)} is older than its sources: run `make ts-build`")
    return ["node", str(built)]


def run_testee(command: list[str], cases: list[Case]) -> dict[str, dict[str, Any]]:
    stdin = "".join(json.dumps(c.line) + "\n" for c in cases)
    done = subprocess.run(
        command,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{command[0]} exited {done.returncode}:\n{done.stderr}"
    answers: dict[str, dict[str, Any]] = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):  # a Go test binary also prints "PASS"
            answer = json.loads(line)
            answers[str(answer.get("name"))] = answer
    return answers


@pytest.fixture(scope="module")
def answers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, dict[str, dict[str, Any]]]]:
    cases = all_cases()
    commands = {
        "python": [sys.executable, str(ROOT / "tests" / "support" / "fallback_testee.py")],
        "go": _go_testee(tmp_path_factory.mktemp("go")),
        "typescript": _ts_testee(),
    }
    yield {language: run_testee(command, cases) for language, command in commands.items()}


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_case_passes_or_is_listed(
    language: str, answers: dict[str, dict[str, dict[str, Any]]]
) -> None:
    cases = all_cases()
    listed = failure_list(language)
    unknown = sorted(set(listed) - {c.name for c in cases})
    assert not unknown, f"failure_list_{language}.txt names no case: {unknown}"
    failed = {c.name: judge(c, answers[language].get(c.name)) for c in cases}
    failed = {name: why for name, why in failed.items() if why}
    unexpected = {name: why for name, why in failed.items() if name not in listed}
    stale = sorted(name for name in listed if name not in failed)
    assert not unexpected, f"{language} fails cases not in its failure list:\n" + "\n".join(
        f"  {name}: {'; '.join(why)}" for name, why in sorted(unexpected.items())
    )
    assert not stale, (
        f"{language} passes listed cases; remove them from failure_list_{language}.txt: {stale}"
    )


# The rules of docs/fallback.md; each has at least one case of its own.
CLAUSES = {
    "cancellation",
    "envelope",
    "terminal",
    "transient",
    "single dispatch",
    "no correction",
    "backoff",
    "retry-after",
    "pushback",
    "spent quota",
    "should-retry",
    "deadline",
    "wait bound",
    "classification",
    "no text",
    "limits",
}


def test_every_fallback_vector_is_a_case_or_dropped_with_a_reason() -> None:
    """A decide vector added to tests/vectors/decisions.json for the
    fallback must be placed: in the contract, or outside it and why."""
    applies = [c["name"] for c in VECTORS["decide"] if c.get("fallback") is not False]
    included, dropped = set(CASES["vectors"]), CASES["droppedVectors"]
    assert not included & set(dropped), "a vector is both a case and dropped"
    assert sorted(included | set(dropped)) == sorted(applies)
    assert all(why.strip() for why in dropped.values())


def test_every_rule_has_its_own_case() -> None:
    clauses = [c["clause"] for c in CASES["cases"]]
    assert set(clauses) == CLAUSES
    assert all(c["name"].startswith(f"{c['clause']}: ") for c in CASES["cases"])


def test_the_runner_catches_a_wrong_answer() -> None:
    """judge() is what every language is held to: a changed delay, a wrong
    reason, a crash or a missing answer each fail."""
    case = Case("x", {}, {"action": "ACTION_RETRY", "delay": "0.542s", "retryAfter": None}, None)
    good = {"response": {"action": "ACTION_RETRY", "delay": "0.542000s"}}
    assert judge(case, good) == []
    assert judge(case, {"response": {"action": "ACTION_RETRY", "delay": "0.543s"}})
    assert judge(case, {"response": {"action": "ACTION_FAIL", "delay": "0.542s"}})
    assert judge(case, {"response": {**good["response"], "retryAfter": "1s"}})
    assert judge(case, {"crash": "boom"})
    assert judge(case, None)
    refused = Case("y", {}, None, "attempt")
    assert judge(refused, {"error": {"field": "attempt"}}) == []
    assert judge(refused, {"error": {"field": "deadline"}})
    assert judge(refused, good)
