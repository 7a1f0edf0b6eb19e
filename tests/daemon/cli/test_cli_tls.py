"""`squawk decide` and `squawk upstreams` against a daemon serving TLS:
`--tls-ca` trusts its certificate, `--tls-cert` and `--tls-key` present the
client's own to a daemon with `--tls-client-ca`."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import squawk
from test_tls import Pki, make_pki, serving

UPSTREAM = "api.example"


def decide(target: str, *tls: str) -> subprocess.CompletedProcess[str]:
    return squawk(
        "decide", "--status", "503", "--attempt", "1", "--upstream", UPSTREAM,
        "--target", target, *tls,
    )  # fmt: skip


def upstreams(target: str, *tls: str) -> subprocess.CompletedProcess[str]:
    return squawk("upstreams", "--target", target, *tls)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def decided(target: str, *tls: str) -> str:
    action: str = json.loads(ok(decide(target, *tls)))["action"]
    return action


def tracked(target: str, *tls: str) -> list[str]:
    """The UPSTREAM column of `squawk upstreams`."""
    header, *rows = ok(upstreams(target, *tls)).splitlines()
    assert header.split()[:2] == ["PROFILE", "UPSTREAM"]
    return [row.split()[1] for row in rows]


def unavailable(result: subprocess.CompletedProcess[str], *names: str) -> None:
    """A refused call: no traceback, and a last line naming `names` (gRPC's
    core may log the failed handshake before it)."""
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("squawk: UNAVAILABLE: "), line
    for name in names:
        assert name in line, line


Command = Callable[..., subprocess.CompletedProcess[str]]
CALLS: tuple[Command, ...] = (decide, upstreams)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_tls_is_reached_with_the_ca_that_signed_the_daemon(pki: Pki, tmp_path: Path) -> None:
    ca = ("--tls-ca", str(pki.ca.cert))
    with serving(pki, tmp_path) as daemon:
        # 503 on a first attempt is transient: retry.
        assert decided(daemon.target, *ca) == "ACTION_RETRY"
        assert tracked(daemon.target, *ca) == [UPSTREAM]
        # The certificate names 127.0.0.1 and localhost, so only the second
        # of these can be checked against it.
        assert decided(daemon.target, *ca, "--tls-server-name", "localhost") == "ACTION_RETRY"
        unavailable(decide(daemon.target, *ca, "--tls-server-name", "elsewhere.example"))
        for call in CALLS:
            unavailable(call(daemon.target), "--tls-ca")
            unavailable(call(daemon.target, "--tls-ca", str(pki.other_ca.cert)))


def test_mutual_tls_is_reached_with_a_client_certificate(pki: Pki, tmp_path: Path) -> None:
    ca = ("--tls-ca", str(pki.ca.cert))
    mine = (*ca, "--tls-cert", str(pki.client.cert), "--tls-key", str(pki.client.key))
    stranger = (*ca, "--tls-cert", str(pki.stranger.cert), "--tls-key", str(pki.stranger.key))
    with serving(pki, tmp_path, "--tls-client-ca", str(pki.ca.cert)) as daemon:
        assert decided(daemon.target, *mine) == "ACTION_RETRY"
        assert tracked(daemon.target, *mine) == [UPSTREAM]
        for call in CALLS:
            unavailable(call(daemon.target), "--tls-ca")
            unavailable(call(daemon.target, *ca), "--tls-cert", "--tls-key")
            unavailable(call(daemon.target, *stranger))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-t", "--tls-ca", "CA", "--tls-cert", "CERT"], "--tls-cert and --tls-key go together"),
        (["-t", "--tls-ca", "CA", "--tls-key", "KEY"], "--tls-cert and --tls-key go together"),
        (["-t", "--tls-cert", "CERT", "--tls-key", "KEY"], "--tls-cert needs --tls-ca"),
        (["-t", "--tls-server-name", "localhost"], "--tls-server-name needs --tls-ca"),
        (["-t", "--tls-ca", "MISSING"], "--tls-ca MISSING: cannot read: "),
        (["-t", "--tls-ca", "NOTPEM"], "--tls-ca NOTPEM: not a PEM file"),
        (["-t", "--tls-ca", "/dev/zero"], "--tls-ca /dev/zero: not a regular file"),
        (
            ["-t", "--tls-ca", "CA", "--tls-cert", "CERT", "--tls-key", "MISSING"],
            "--tls-key MISSING: cannot read: ",
        ),
        (["--tls-ca", "CA"], "--tls-ca needs --target"),
    ],
)  # fmt: skip
def test_tls_flags_that_cannot_work_are_named(
    pki: Pki, tmp_path: Path, args: list[str], message: str
) -> None:
    notpem = tmp_path / "not.pem"
    notpem.write_text("hello")
    files = {
        "CA": str(pki.ca.cert),
        "CERT": str(pki.client.cert),
        "KEY": str(pki.client.key),
        "MISSING": str(tmp_path / "missing.pem"),
        "NOTPEM": str(notpem),
    }
    # Nothing listens on port 1: the flags must be refused before dialling.
    argv = [files.get(a, "--target=127.0.0.1:1" if a == "-t" else a) for a in args]
    expected = message
    for short, path in files.items():
        expected = expected.replace(short, path)
    commands = [["decide", "--attempt", "1", *argv]]
    if "-t" in args:
        commands.append(["upstreams", *argv])
    for command in commands:
        result = squawk(*command)
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"squawk: TLS: {expected}"), line
