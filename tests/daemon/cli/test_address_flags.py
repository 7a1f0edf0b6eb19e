"""Each address flag's help names exactly the forms the flag accepts.

`--listen` takes HOST:PORT, unix:PATH (unix:///absolute/path is one) and
unix-abstract:NAME; `--metrics-listen` and `--health-listen` take HOST:PORT
only (an HTTP server and a TCP probe port); the CLI's `--target` dials any
address gRPC dials, a unix socket included. The help was once "host:port or
unix:///path" for the one and "HOST:PORT" for the other, both short of what
the flags take.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest

from conftest import squawk, start_daemon
from squawk.daemon.cli import _parser

FORMS = {
    "HOST:PORT": "127.0.0.1:50051",
    "unix:PATH": "unix:relative/squawk.sock",
    "unix-abstract:NAME": "unix-abstract:squawk",
}


def flag_help(command: str, flag: str) -> str:
    """The help of `flag` in `squawk COMMAND --help`, unwrapped."""
    result = squawk(command, "--help", env={"COLUMNS": "1000"})
    assert result.returncode == 0, result.stderr
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith(f"  {flag} ")]
    return re.sub(r"\s+", " ", line)


def accepts(flag: str, address: str) -> bool:
    """Whether `squawk serve` parses `flag address` (the same parser serve uses)."""
    try:
        _parser().parse_args(["serve", flag, address])
    except SystemExit:
        return False
    return True


@pytest.mark.parametrize("flag", ["--listen", "--metrics-listen", "--health-listen"])
def test_a_serve_address_flag_names_the_forms_it_accepts(flag: str) -> None:
    shown = flag_help("serve", flag)
    named = {form for form in FORMS if form in shown}
    accepted = {form for form, example in FORMS.items() if accepts(flag, example)}
    assert named == accepted
    assert "HOST:PORT" in named


def test_target_says_and_dials_a_unix_socket() -> None:
    for command in ("decide", "classify", "upstreams"):
        assert "unix:PATH" in flag_help(command, "--target")
    # Short: a unix socket path is limited to about 100 bytes.
    with tempfile.TemporaryDirectory(prefix="sq-") as folder:
        address = f"unix:{Path(folder) / 's.sock'}"
        daemon = start_daemon(listen=address)
        try:
            result = squawk("decide", "--target", address, "--status", "503", "--attempt", "1")
        finally:
            daemon.stop()
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["action"] == "ACTION_RETRY"
