"""TLS and mutual TLS on the daemon's TCP listener, with certificates made
here by openssl, and their rotation without a restart."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import pytest

from conftest import ROOT, free_port, wait_serving
from squawk.v1 import policy_pb2 as pb
from squawk.v1 import policy_pb2_grpc as pb_grpc
from squawk_client import SquawkClient


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path

    def pem(self) -> tuple[bytes, bytes]:
        return self.key.read_bytes(), self.cert.read_bytes()


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_ca(folder: Path, name: str) -> Pair:
    ca = Pair(folder / f"{name}.pem", folder / f"{name}.key")
    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-days", "2", "-subj", f"/CN={name}", "-keyout", str(ca.key), "-out", str(ca.cert),
    )  # fmt: skip
    return ca


def issue(folder: Path, ca: Pair, name: str, usage: str) -> Pair:
    """A certificate for `name` signed by `ca`; usage serverAuth or clientAuth."""
    pair = Pair(folder / f"{name}.pem", folder / f"{name}.key")
    csr = folder / f"{name}.csr"
    ext = folder / f"{name}.ext"
    ext.write_text(
        f"subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage={usage}\n"
        "basicConstraints=CA:FALSE\n"
    )
    openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-subj", f"/CN={name}", "-keyout", str(pair.key), "-out", str(csr),
    )  # fmt: skip
    openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key),
        "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(pair.cert),
    )  # fmt: skip
    return pair


@dataclass
class Pki:
    folder: Path
    ca: Pair  # signs the server's first certificate and the clients'
    other_ca: Pair  # a CA the daemon does not trust
    server: Pair
    client: Pair
    stranger: Pair  # a client certificate from other_ca
    # What the daemon reads: symlinks, swapped as a Kubernetes Secret update does.
    cert: Path
    key: Path


def make_pki(folder: Path) -> Pki:
    ca, other = make_ca(folder, "ca"), make_ca(folder, "other-ca")
    server = issue(folder, ca, "server", "serverAuth")
    pki = Pki(
        folder,
        ca,
        other,
        server,
        issue(folder, ca, "client", "clientAuth"),
        issue(folder, other, "stranger", "clientAuth"),
        folder / "tls.crt",
        folder / "tls.key",
    )
    os.symlink(server.cert, pki.cert)
    os.symlink(server.key, pki.key)
    return pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@dataclass
class Served:
    target: str
    process: subprocess.Popen[bytes]


@contextmanager
def serving(pki: Pki, tmp_path: Path, *tls: str) -> Iterator[Served]:
    """A daemon with `--tls-cert` and `--tls-key`, and the `tls` flags."""
    port, health = free_port(), free_port()
    log = (tmp_path / "squawk.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable, "-m", "squawk.daemon.cli", "serve",
            "--listen", f"127.0.0.1:{port}", "--health-listen", f"127.0.0.1:{health}",
            "--tls-cert", str(pki.cert), "--tls-key", str(pki.key), *tls,
        ],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_serving(f"127.0.0.1:{health}")  # the health port is plaintext, for probes
        yield Served(f"127.0.0.1:{port}", process)
    finally:
        process.terminate()
        process.wait(timeout=15)
        log.close()


@pytest.fixture
def daemon(pki: Pki, tmp_path: Path) -> Iterator[Served]:
    """Mutual TLS: clients need a certificate from `pki.ca`."""
    with serving(pki, tmp_path, "--tls-client-ca", str(pki.ca.cert)) as served:
        yield served


def classify(target: str, credentials: grpc.ChannelCredentials) -> pb.ClassifyResponse:
    client = SquawkClient(target, credentials=credentials)
    try:
        return client.classify(pb.ClassifyRequest(error_message="HTTP 503"))
    finally:
        client.close()


def refused(target: str, credentials: grpc.ChannelCredentials | None) -> grpc.StatusCode:
    with (
        grpc.secure_channel(target, credentials)
        if credentials is not None
        else grpc.insecure_channel(target)
    ) as channel:
        stub: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            "/squawk.v1.PolicyService/Classify"
        )
        with pytest.raises(grpc.RpcError) as caught:
            stub(b"", timeout=3)
        code: grpc.StatusCode = caught.value.code()
        return code


def test_mutual_tls_admits_only_certificates_of_the_trusted_ca(pki: Pki, daemon: Served) -> None:
    ca = pki.ca.cert.read_bytes()
    reply = classify(daemon.target, grpc.ssl_channel_credentials(ca, *pki.client.pem()))
    assert reply.redacted_message == "HTTP 503" and reply.retryable
    # No client certificate, one from another CA, or no TLS at all: refused.
    assert refused(daemon.target, grpc.ssl_channel_credentials(ca)) == grpc.StatusCode.UNAVAILABLE
    stranger = grpc.ssl_channel_credentials(ca, *pki.stranger.pem())
    assert refused(daemon.target, stranger) == grpc.StatusCode.UNAVAILABLE
    assert refused(daemon.target, None) == grpc.StatusCode.UNAVAILABLE


def test_a_rotated_certificate_is_served_without_a_restart(pki: Pki, daemon: Served) -> None:
    # The new certificate comes from a new CA, so a client that trusts only
    # that CA tells which one the daemon serves.
    rotated_ca = make_ca(pki.folder, "rotated-ca")
    rotated = issue(pki.folder, rotated_ca, "server-rotated", "serverAuth")
    trusts_new = grpc.ssl_channel_credentials(rotated_ca.cert.read_bytes(), *pki.client.pem())
    assert refused(daemon.target, trusts_new) == grpc.StatusCode.UNAVAILABLE
    for link, target in ((pki.cert, rotated.cert), (pki.key, rotated.key)):
        tmp = link.with_suffix(".tmp")
        os.symlink(target, tmp)
        os.replace(tmp, link)
    deadline = time.monotonic() + 10
    while True:
        try:
            reply = classify(daemon.target, trusts_new)
            break
        except Exception:
            assert time.monotonic() < deadline, "the rotated certificate was never served"
            time.sleep(0.1)
    assert reply.redacted_message == "HTTP 503" and reply.retryable
    assert daemon.process.poll() is None  # the same process


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tls-cert", "CERT"], "--tls-cert and --tls-key go together"),
        (["--tls-client-ca", "CERT"], "--tls-cert and --tls-key go together"),
        (["--tls-cert", "CERT", "--tls-key", "MISSING"], "cannot read MISSING"),
        (["--tls-cert", "NOTPEM", "--tls-key", "KEY"], "--tls-cert NOTPEM: not a PEM file"),
        (["--tls-cert", "BIG", "--tls-key", "KEY"], "--tls-cert BIG: over 1 MiB"),
        (
            ["--tls-cert", "/dev/zero", "--tls-key", "KEY"],
            "--tls-cert /dev/zero: not a regular file",
        ),
        # Opening a FIFO for reading waits for a writer: the start hung.
        (["--tls-cert", "CERT", "--tls-key", "FIFO"], "--tls-key FIFO: not a regular file"),
        # It used to exit 3, "the address is in use or not available".
        (
            ["--tls-cert", "CERT", "--tls-key", "WRONG"],
            "--tls-key WRONG does not match the certificate in --tls-cert CERT",
        ),
        (
            ["--tls-cert", "CERT", "--tls-key", "KEY", "--tls-client-ca", "NOTCA"],
            "--tls-client-ca NOTCA holds no certificate OpenSSL can use",
        ),
    ],
)
def test_tls_settings_that_cannot_work_stop_the_start(
    pki: Pki, tmp_path: Path, args: list[str], message: str
) -> None:
    notpem = tmp_path / "not.pem"
    notpem.write_text("hello")
    big = tmp_path / "big.pem"
    big.write_bytes(b"-----BEGIN CERTIFICATE-----\n" + b"A" * (2 << 20))
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo)
    names = {
        "BIG": str(big),
        "FIFO": str(fifo),
        "CERT": str(pki.server.cert),
        "KEY": str(pki.server.key),
        "MISSING": str(tmp_path / "missing.key"),
        "NOTPEM": str(notpem),
        "WRONG": str(pki.client.key),
        "NOTCA": str(pki.server.key),  # PEM, but no certificate in it
    }
    argv = [names.get(a, a) for a in args]
    listen = f"127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "squawk.daemon.cli", "serve", "--listen", listen, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    expected = message
    for short, path in names.items():
        expected = expected.replace(short, path)
    assert f"squawk: TLS: {expected}" in done.stderr


def issue_dated(folder: Path, ca: Pair, name: str, start: str, end: str) -> Pair:
    """A server certificate valid from `start` to `end` (YYYYMMDDHHMMSSZ), which
    `openssl x509 -days` cannot give: `openssl ca` with a throwaway database."""
    pair = Pair(folder / f"{name}.pem", folder / f"{name}.key")
    db = folder / f"{name}-db"
    db.mkdir()
    (db / "index.txt").write_text("")
    (db / "serial").write_text("01\n")
    config = db / "ca.cnf"
    config.write_text(
        f"[ca]\ndefault_ca = d\n[d]\ndatabase = {db}/index.txt\nnew_certs_dir = {db}\n"
        f"serial = {db}/serial\ndefault_md = sha256\npolicy = p\n[p]\ncommonName = supplied\n"
    )
    csr = folder / f"{name}.csr"
    openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-subj", f"/CN={name}", "-keyout", str(pair.key), "-out", str(csr),
    )  # fmt: skip
    openssl(
        "ca", "-batch", "-config", str(config), "-cert", str(ca.cert), "-keyfile", str(ca.key),
        "-in", str(csr), "-startdate", start, "-enddate", end, "-out", str(pair.cert),
    )  # fmt: skip
    return pair


@pytest.mark.parametrize(
    ("start", "end", "warning"),
    [
        ("20200101000000Z", "20200102000000Z", "expired on 2020-01-02 00:00:00 UTC"),
        ("20990101000000Z", "20990102000000Z", "is not valid until 2099-01-01 00:00:00 UTC"),
    ],
    ids=["expired", "not-yet-valid"],
)
def test_a_certificate_outside_its_dates_is_served_with_a_warning(
    pki: Pki, tmp_path: Path, start: str, end: str, warning: str
) -> None:
    dated = issue_dated(tmp_path, pki.ca, "dated", start, end)
    local = replace(pki, cert=dated.cert, key=dated.key)
    with serving(local, tmp_path):
        pass
    log = (tmp_path / "squawk.log").read_text()
    assert (
        "WARNING squawk.daemon.server.lifecycle.tls: TLS: the certificate in "
        f"--tls-cert {dated.cert} {warning}" in log
    )


def test_a_rotation_gRPC_would_reject_keeps_the_certificate_served(
    pki: Pki, tmp_path: Path
) -> None:
    """A key that is not the certificate's used to be logged as "certificates
    reloaded"; now the old pair goes on serving and the refusal is logged."""
    local = replace(pki, cert=tmp_path / "tls.crt", key=tmp_path / "tls.key")
    os.symlink(pki.server.cert, local.cert)
    os.symlink(pki.server.key, local.key)
    trusts_old = grpc.ssl_channel_credentials(pki.ca.cert.read_bytes(), *pki.client.pem())
    with serving(local, tmp_path, "--tls-client-ca", str(pki.ca.cert)) as served:
        tmp = tmp_path / "tls.key.tmp"
        os.symlink(pki.client.key, tmp)  # a key, but another certificate's
        os.replace(tmp, local.key)
        # Each new connection's handshake asks for the files again (a local
        # subchannel pool: no connection is shared with an earlier channel).
        for _ in range(3):
            with grpc.secure_channel(
                served.target, trusts_old, options=[("grpc.use_local_subchannel_pool", 1)]
            ) as channel:
                reply = pb_grpc.PolicyServiceStub(channel).Classify(
                    pb.ClassifyRequest(error_message="HTTP 503"), timeout=5
                )
            assert reply.redacted_message == "HTTP 503"
    log = (tmp_path / "squawk.log").read_text()
    assert "certificates reloaded" not in log
    assert (
        log.count(
            f"TLS: keeping the previous certificates: --tls-key {local.key} "
            f"does not match the certificate in --tls-cert {local.cert}"
        )
        == 1
    )
