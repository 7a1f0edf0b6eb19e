"""What a user installs, installed as a user would: each artifact of
`make dist` goes into an empty environment of its own and calls a daemon
started from the daemon wheel.

- the daemon wheel (with the shared core) in a fresh venv: the `squawk`
  command serves, and there is no importable `sidecar` package;
- the Python client wheel (with the shared core) in another fresh venv: it
  installs nothing but grpcio, protobuf and the core, and calls the daemon;
- the npm tarball in an empty folder: `require("@squawk/client")` calls it;
- the Go module from a throwaway module with a `replace`: `go run` calls it.

Slow by nature (it builds and installs everything), so one daemon and one
build serve every test here.
"""

from __future__ import annotations

import json
import os
import subprocess
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import LOCK, ROOT, Daemon, start_daemon

# pip, npm and go fetch from their registries (or their caches): minutes at worst.
INSTALL_TIMEOUT = 600


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _venv(path: Path) -> Path:
    """A fresh, empty venv at `path`; returns its python."""
    venv.EnvBuilder(with_pip=True).create(path)
    return path / "bin" / "python"


def _install(python: Path, *wheels: Path) -> None:
    """Install `wheels` and what they require, as a user would (from the index),
    at the lock's versions: a new release elsewhere must not turn this red."""
    quiet = ("--quiet", "--disable-pip-version-check")
    _run(python, "-m", "pip", "install", *quiet, "-c", LOCK, *wheels, cwd=python.parent)


# Each installed distribution's normalised name and the names it requires.
_LIST_DISTRIBUTIONS = r"""
import importlib.metadata as m, json, re
def name(text):
    return re.split(r"[\s<>=!~;\[(]", text, maxsplit=1)[0].lower().replace("_", "-")
print(json.dumps({name(d.metadata["Name"]): [name(r) for r in d.requires or []]
                  for d in m.distributions()}))
"""


@dataclass(frozen=True)
class Built:
    dist: Path
    daemon: Daemon
    daemon_python: Path

    def wheel(self, name: str) -> Path:
        (found,) = (self.dist / "python").glob(f"{name}-*.whl")
        return found


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    work = tmp_path_factory.mktemp("dist")
    dist = work / "artifacts"
    _run("make", "--no-print-directory", "-s", "dist", f"DIST={dist}", f"LOCK={LOCK}", cwd=ROOT)
    wheels = dist / "python"
    core = next(wheels.glob("squawk_core-*.whl"))
    daemon_wheel = next(wheels.glob("squawk_daemon-*.whl"))
    python = _venv(work / "daemon-venv")
    _install(python, core, daemon_wheel)
    daemon = start_daemon(command=(str(python.parent / "squawk"),), cwd=work)
    yield Built(dist, daemon, python)
    daemon.stop()


def test_the_daemon_wheel_installs_no_sidecar_package(built: Built) -> None:
    probe = (
        "import importlib.util, json;"
        "print(json.dumps([importlib.util.find_spec(n) is not None"
        " for n in ('sidecar', 'squawk.daemon.cli', 'squawk.policy', 'squawk.v1.policy_pb2')]))"
    )
    found = json.loads(_run(built.daemon_python, "-c", probe, cwd=built.dist))
    assert found == [False, True, True, True]


CLIENT_SCRIPT = """
import json, sys
from datetime import timedelta
from squawk_client import (
    Category, ClassifyRequest, DecideRetryRequest, SquawkClient, SquawkInputError, StepError,
    StepOptions, run_step_sync,
)

client = SquawkClient(sys.argv[1], call_timeout=timedelta(seconds=10))
decision = client.decide_retry(DecideRetryRequest(attempt=1, http_status=503))
classified = client.classify(ClassifyRequest(error_message="HTTP status 429: rate limit exceeded"))
try:
    client.decide_retry(DecideRetryRequest(attempt=0))
    refused = ""
except SquawkInputError as exc:
    refused = exc.field
calls = []
def step(params):
    calls.append(params)
    if len(calls) == 1:
        raise StepError("busy", http_status=429, headers={"Retry-After": "0"})
    return "done"
result = run_step_sync(client, step, {"q": 1})
print(json.dumps({
    "action": decision.action.name, "delay_ms": decision.delay // timedelta(milliseconds=1),
    "fallback": decision.fallback, "category": Category(classified.category).name,
    "refused": refused, "result": result, "calls": len(calls),
    "fallbacks": client.fallback_count,
}))
"""


def test_the_client_wheel_installs_alone_and_calls_the_daemon(built: Built, tmp_path: Path) -> None:
    python = _venv(tmp_path / "client-venv")
    before = set(json.loads(_run(python, "-c", _LIST_DISTRIBUTIONS, cwd=tmp_path)))
    _install(python, built.wheel("squawk_core"), built.wheel("squawk_client"))
    installed = json.loads(_run(python, "-c", _LIST_DISTRIBUTIONS, cwd=tmp_path))
    assert installed["squawk-client"] == ["squawk-core", "grpcio", "protobuf"]
    assert installed["squawk-core"] == ["grpcio", "protobuf"]
    # Nothing else, but what grpcio and protobuf themselves require.
    theirs = set(installed["grpcio"] + installed["protobuf"])
    wanted = {"squawk-client", "squawk-core", "grpcio", "protobuf"}
    extra = set(installed) - before - wanted - theirs
    assert extra == set(), f"the client pulled in {sorted(extra)}"
    answer = json.loads(_run(python, "-c", CLIENT_SCRIPT, built.daemon.target, cwd=tmp_path))
    assert answer == {
        "action": "RETRY",
        "delay_ms": 542,
        "fallback": False,
        "category": "RATE_LIMIT",
        "refused": "attempt",
        "result": "done",
        "calls": 2,
        "fallbacks": 0,
    }


NODE_SCRIPT = """
const squawk = require("@squawk/client");
(async () => {
  const client = new squawk.SquawkClient(process.argv[2], { callTimeoutMs: 10000 });
  const decision = await client.decideRetry({ attempt: 1, httpStatus: 503 });
  let refused = "";
  try {
    await client.decideRetry({ attempt: 0 });
  } catch (err) {
    refused = err instanceof squawk.SquawkInputError ? err.field : String(err);
  }
  client.close();
  console.log(JSON.stringify({
    action: decision.action, retry: decision.action === squawk.Action.ACTION_RETRY,
    delayMs: squawk.durationToMs(decision.delay), fallback: decision.fallback, refused,
  }));
})().catch((err) => { console.error(err); process.exit(1); });
"""


def test_the_npm_tarball_installs_alone_and_calls_the_daemon(built: Built, tmp_path: Path) -> None:
    (tarball,) = built.dist.glob("squawk-client-*.tgz")
    (tmp_path / "package.json").write_text('{"name": "try-squawk", "private": true}')
    _run("npm", "install", "--no-audit", "--no-fund", "--silent", tarball, cwd=tmp_path)
    (tmp_path / "try.js").write_text(NODE_SCRIPT)
    answer = json.loads(_run("node", "try.js", built.daemon.target, cwd=tmp_path))
    assert answer == {
        "action": "ACTION_RETRY",
        "retry": True,
        "delayMs": 542,
        "fallback": False,
        "refused": "attempt",
    }


GO_MAIN = """package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	squawk "github.com/squawk-dev/squawk/clients/go"
	"github.com/squawk-dev/squawk/clients/go/squawkv1"
)

func main() {
	c, err := squawk.New(os.Args[1],
		squawk.WithCallTimeout(10*time.Second), squawk.WithFallbackDisabled())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()
	d, err := c.DecideRetry(ctx, &squawkv1.DecideRetryRequest{Attempt: 1, HttpStatus: 503})
	if err != nil {
		panic(err)
	}
	_, err = c.DecideRetry(ctx, &squawkv1.DecideRetryRequest{Attempt: 0})
	var bad *squawk.InputError
	refused := ""
	if errors.As(err, &bad) {
		refused = bad.Field
	}
	fmt.Printf("%s %d %v %s\\n", d.Action, d.Delay.Milliseconds(), d.Fallback, refused)
}
"""


def test_the_go_module_builds_from_a_user_module_and_calls_the_daemon(
    built: Built, tmp_path: Path
) -> None:
    (tmp_path / "go.mod").write_text(
        "module example.com/try\n\ngo 1.26\n\n"
        "require github.com/squawk-dev/squawk/clients/go v0.0.0\n\n"
        f"replace github.com/squawk-dev/squawk/clients/go => {ROOT / 'clients' / 'go'}\n"
    )
    (tmp_path / "main.go").write_text(GO_MAIN)
    env = {"GOFLAGS": "-mod=mod"}
    _run("go", "mod", "tidy", cwd=tmp_path, env=env)
    out = _run("go", "run", ".", built.daemon.target, cwd=tmp_path, env=env)
    assert out.split() == ["ACTION_RETRY", "542", "false", "attempt"]
