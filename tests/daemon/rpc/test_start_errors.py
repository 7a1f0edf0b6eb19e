"""Every start-up input the daemon cannot use stops it with exit code 2 and
one line naming the flag or variable, never a traceback; a bad
SQUAWK_LOG_LEVEL, like the other forgiving environment overrides, is a
warning and the default is kept."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import tomllib
from pathlib import Path

import pytest

from conftest import ROOT, SQUAWK, squawk, start_daemon

LEVELS = "DEBUG, INFO, WARNING or ERROR"


def refused(result: subprocess.CompletedProcess[str], *names: str) -> str:
    """The one line a refused start printed, after checking the exit code;
    only argparse's usage may come before it."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    *usage, line = result.stderr.strip().splitlines()
    assert all(u.startswith(("usage: ", " ")) for u in usage), result.stderr
    for name in names:
        assert name in line, result.stderr
    return line


@pytest.mark.parametrize(
    "args",
    [
        ("serve", "--log-level", "verbose"),
        ("--log-level", "verbose", "decide", "--attempt", "1"),
        ("decide", "--attempt", "1", "--log-level", "verbose"),
    ],
    ids=["serve", "before-the-subcommand", "after-the-subcommand"],
)
def test_an_unknown_log_level_flag_is_refused_with_the_levels(args: tuple[str, ...]) -> None:
    line = refused(squawk(*args), "--log-level", "'verbose'", LEVELS)
    assert "Unknown level" not in line


def test_an_unknown_log_level_variable_is_a_warning_and_info_is_kept() -> None:
    result = squawk("decide", "--attempt", "1", env={"SQUAWK_LOG_LEVEL": "verbose"})
    assert result.returncode == 0, result.stderr
    assert isinstance(json.loads(result.stdout), dict)
    (line,) = result.stderr.splitlines()
    assert "WARNING" in line and "SQUAWK_LOG_LEVEL" in line and LEVELS in line


def test_the_daemon_keeps_logging_at_info_under_an_unknown_log_level_variable() -> None:
    daemon = start_daemon(env={"SQUAWK_LOG_LEVEL": "verbose"})
    daemon.process.terminate()
    daemon.process.wait(timeout=15)
    output = daemon.output()
    daemon.log.close()
    assert "SQUAWK_LOG_LEVEL" in output and LEVELS in output
    assert " INFO " in output and " DEBUG " not in output


@pytest.mark.parametrize(
    ("args", "env", "name"),
    [
        (("--decision-log", "{missing}"), {}, "--decision-log"),
        ((), {"SQUAWK_DECISION_LOG": "{missing}"}, "SQUAWK_DECISION_LOG"),
    ],
    ids=["flag", "variable"],
)
def test_a_decision_log_that_cannot_be_opened_is_named_with_the_reason(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], name: str
) -> None:
    missing = str(tmp_path / "no-such-dir" / "decisions.log")
    result = squawk(
        "serve",
        "--listen",
        "127.0.0.1:0",
        *(a.format(missing=missing) for a in args),
        env={k: v.format(missing=missing) for k, v in env.items()},
    )
    refused(result, name, missing, "No such file or directory")


@pytest.mark.parametrize(
    ("policy", "env"),
    [
        ("", {"SQUAWK_STATE_URL": "redis://127.0.0.1:6399/0"}),
        ("state: {store: redis, url: 'redis://127.0.0.1:6399/0'}\n", {}),
    ],
    ids=["SQUAWK_STATE_URL", "policy-file"],
)
def test_the_redis_store_without_the_redis_extra_names_the_extra(
    tmp_path: Path, policy: str, env: dict[str, str]
) -> None:
    # The shared environment has redis installed: a `redis` package whose
    # import raises ImportError, first on PYTHONPATH, stands in for a daemon
    # installed without the extra.
    fake = tmp_path / "without-redis" / "redis"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("redis is not installed")\n')
    path = os.pathsep.join(p for p in (str(fake.parent), os.environ.get("PYTHONPATH")) if p)
    policy_args: tuple[str, ...] = ()
    if policy:
        policy_file = tmp_path / "policy.yaml"
        policy_file.write_text(policy)
        policy_args = ("--policy", str(policy_file))
    result = squawk(
        "serve", "--listen", "127.0.0.1:0", *policy_args, env={"PYTHONPATH": path, **env}
    )
    line = refused(result, "state.store redis needs the redis client")
    # The hint names only what exists: the checkout's own extra and the wheel
    # `make dist` builds. squawk-daemon is on no package index, so a hint of
    # `pip install 'squawk-daemon[redis]'` installs whatever anyone put there.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "redis" in project["optional-dependencies"]
    wheel = f"squawk_daemon-{project['version']}-py3-none-any.whl"
    assert "in the checkout, .venv/bin/pip install -e '.[redis]';" in line
    assert f"pip install 'dist/python/{wheel}[redis]'" in line
    assert "squawk-daemon[" not in line


@pytest.mark.parametrize(
    ("args", "env", "name"),
    [
        (("--listen", "50083"), {}, "--listen"),
        (("--listen", ":50085"), {}, "--listen"),
        (("--listen", "127.0.0.1:65536"), {}, "--listen"),
        (("--listen", "unix://"), {}, "--listen"),
        ((), {"SQUAWK_LISTEN": "127.0.0.1:0,:50085"}, "SQUAWK_LISTEN"),
        (("--listen", "127.0.0.1:0", "--metrics-listen", "bogus"), {}, "--metrics-listen"),
        (("--listen", "127.0.0.1:0", "--health-listen", ":8081"), {}, "--health-listen"),
        (("--listen", "127.0.0.1:0"), {"SQUAWK_METRICS_LISTEN": "bogus"}, "SQUAWK_METRICS_LISTEN"),
        (("--listen", "127.0.0.1:0"), {"SQUAWK_HEALTH_LISTEN": "8081"}, "SQUAWK_HEALTH_LISTEN"),
    ],
)
def test_an_address_that_is_not_host_port_is_refused_before_binding(
    args: tuple[str, ...], env: dict[str, str], name: str
) -> None:
    line = refused(squawk("serve", *args, env=env), name, "HOST:PORT")
    assert "cannot listen" not in line and "invalid literal" not in line


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """The squawk command, given 20 s: a start that hangs fails the test."""
    return subprocess.run(
        [*SQUAWK, *args], cwd=ROOT, capture_output=True, text=True, timeout=20, check=False
    )


@pytest.mark.parametrize("command", ["serve", "check-policy"])
@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("device", "not a regular file (a character device)"),
        ("fifo", "not a regular file (a FIFO)"),
        ("directory", "not a regular file (a directory)"),
        # 1 MiB is the policy file's stated bound (docs/configuration.md).
        ("large", "larger than 1048576 bytes"),
    ],
)
def test_a_policy_path_that_is_not_a_small_regular_file_is_refused_at_once(
    tmp_path: Path, command: str, kind: str, message: str
) -> None:
    # A FIFO used to block the start before binding, forever; /dev/zero to
    # be read until the size bound.
    path = {"device": "/dev/zero", "directory": str(tmp_path)}.get(kind, str(tmp_path / "p"))
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "large":
        Path(path).write_text("#" * (1 << 20) + "\n")
    args = ("serve", "--listen", "127.0.0.1:0", "--policy", path)
    line = refused(_run(*(args if command == "serve" else ("check-policy", path))))
    assert line == f"squawk: bad policy: {path}: {message}" + (
        "; the policy must be a file" if "regular" in message else ""
    )


DEEP = "[" * 5000
HOSTILE = {
    # (file, the one line's end): each used to end in a traceback and exit 1.
    "deep-flow": (DEEP, "nested deeper than 32 levels at line 1"),
    "deep-block": ("- " * 5000 + "x\n", "nested deeper than 32 levels at line 1"),
    "huge-duration": (
        "profiles:\n  default:\n    backoff: {max_delay: 99999999999999999999h}\n",
        "profiles.default.backoff.max_delay (line 3): expected a positive duration: "
        "'99999999999999999999h' is longer than any duration can be",
    ),
    "open-for": (
        "profiles:\n  default:\n    circuit_breaker: {open_for: 2000000000h}\n",
        "profiles.default.circuit_breaker.open_for (line 3): expected a duration such as "
        "30s: 2000000000h is over the limit of 168h",
    ),
    "huge-integer": (
        "profiles:\n  default:\n    max_attempts: 1" + "0" * 40 + "\n",
        "profiles.default.max_attempts (line 3): expected an integer >= 1: '1"
        + "0" * 40
        + "' is over the limit of 2147483647",
    ),
    "alias-bomb": (
        "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
        + "".join(
            f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n"
            for p, n in zip("abcd", "bcde", strict=True)
        ),
        "more than 50000 YAML nodes by line 5 (an alias counts its nodes each time it is used)",
    ),
}


@pytest.mark.parametrize("command", ["serve", "check-policy"])
@pytest.mark.parametrize("name", HOSTILE)
def test_a_file_the_parser_cannot_take_is_one_line_and_exit_2(
    tmp_path: Path, command: str, name: str
) -> None:
    text, end = HOSTILE[name]
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    args = ("serve", "--listen", "127.0.0.1:0", "--policy", str(path))
    line = refused(_run(*(args if command == "serve" else ("check-policy", str(path)))))
    assert line == f"squawk: bad policy: {path}: {end}"


def test_a_log_level_variable_holding_a_secret_is_quoted_bounded_and_redacted() -> None:
    secret = "sk-loglevel0canary0key0123456789"
    value = f"api_key={secret} " + "x" * 100_000
    result = squawk("decide", "--attempt", "1", env={"SQUAWK_LOG_LEVEL": value})
    assert result.returncode == 0, result.stderr
    (line,) = result.stderr.splitlines()
    assert "SQUAWK_LOG_LEVEL" in line and secret not in line
    assert len(line) < 1_000


def _bind_error(path: Path) -> str:
    """What the system says when this process creates a socket at `path`."""
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.bind(str(path))
        except OSError as exc:
            return str(exc.strerror)
    raise AssertionError(f"{path} is writable here")


@pytest.mark.parametrize("case", ["too-long", "missing-folder", "read-only-folder"])
def test_a_unix_socket_that_cannot_be_created_says_why(case: str) -> None:
    # It used to exit 3, "the address is in use or not available".
    folder = Path(tempfile.mkdtemp(prefix="squawk-sock-"))
    try:
        path = {
            "too-long": folder / ("s" * 120),
            "missing-folder": folder / "missing" / "s.sock",
            # Root writes any folder whatever its mode, but not sysfs.
            "read-only-folder": Path("/sys/squawk.sock") if os.geteuid() == 0 else folder / "s",
        }[case]
        folder.chmod(0o555)
        address = f"unix:{path}"
        line = refused(_run("serve", "--listen", address))
        reason = (
            f"the path is {len(os.fsencode(str(path)))} bytes, over the 107 a unix socket's "
            "path may have"
            if case == "too-long"
            else f"cannot create {path}: {_bind_error(path)}"
        )
        assert line == f"squawk: --listen: cannot listen on {address}: {reason}"
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder, ignore_errors=True)
