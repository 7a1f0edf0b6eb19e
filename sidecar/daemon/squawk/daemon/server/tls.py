"""TLS, and mutual TLS, for the daemon's TCP listeners.

`--tls-cert` and `--tls-key` give the server's certificate chain and key
(PEM); `--tls-client-ca` adds mutual TLS: a client must present a
certificate that CA signed, or its handshake fails. Unix sockets stay
plaintext (they are reachable inside the pod only), and so does the
`--health-listen` port, which the kubelet's gRPC probe dials without TLS
and which serves nothing but health.

Rotation needs no restart: gRPC asks for the certificates at every new
handshake, and the files are read again whenever one of them changed (its
device, inode, size or mtime: a Kubernetes Secret update swaps a symlink).
Connections already open keep the certificate they were made with. A
rotation that cannot be read (a missing file, a half-written one) keeps
the previous certificates and is logged, once per change.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import grpc

__all__ = ["TlsError", "TlsFiles", "read_pem", "server_credentials"]

log = logging.getLogger(__name__)


class TlsError(ValueError):
    """The TLS settings or files, the daemon's or the CLI's, cannot be used."""


_Identity = tuple[tuple[int, int, int, int] | None, ...]


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert: str
    key: str
    # Set: clients must present a certificate this CA signed.
    client_ca: str | None = None

    def paths(self) -> tuple[str, ...]:
        return (self.cert, self.key) + ((self.client_ca,) if self.client_ca else ())


def _identity(files: TlsFiles) -> _Identity:
    out: list[tuple[int, int, int, int] | None] = []
    for path in files.paths():
        try:
            st = os.stat(path)
            out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


# A bundle of hundreds of CA certificates fits many times over; a device
# such as /dev/zero, given by mistake, would otherwise be read forever.
MAX_PEM_BYTES = 1 << 20


def read_pem(flag: str, path: str) -> bytes:
    """The file given to `flag`; OSError when it cannot be read, ValueError
    naming the flag when it is not PEM (gRPC's own error would name neither).
    The CLI's client flags are checked by the same rule."""
    with Path(path).open("rb") as file:
        data = file.read(MAX_PEM_BYTES + 1)
    if len(data) > MAX_PEM_BYTES:
        raise ValueError(f"{flag} {path}: over {MAX_PEM_BYTES >> 20} MiB, not a PEM file")
    if b"-----BEGIN " not in data:
        raise ValueError(f"{flag} {path}: not a PEM file")
    return data


def _configuration(files: TlsFiles) -> grpc.ServerCertificateConfiguration:
    """Raises OSError or ValueError naming the file that cannot be used."""
    pem = {}
    for name, path in (("cert", files.cert), ("key", files.key), ("client_ca", files.client_ca)):
        if path is not None:
            pem[name] = read_pem(f"--tls-{name.replace('_', '-')}", path)
    return grpc.ssl_server_certificate_configuration(
        [(pem["key"], pem["cert"])], root_certificates=pem.get("client_ca")
    )


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """Credentials for every TCP listener, re-reading the files on change.

    Raises OSError or ValueError when the files cannot be used at start."""
    initial = _configuration(files)
    seen = [_identity(files)]

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        # Called by gRPC at each new handshake: a stat of two or three files.
        now = _identity(files)
        if now == seen[0]:
            return None
        seen[0] = now
        try:
            configuration = _configuration(files)
        except (OSError, ValueError) as exc:
            log.warning("TLS: keeping the previous certificates: %s", exc)
            return None
        log.info("TLS: certificates reloaded from %s", ", ".join(files.paths()))
        return configuration

    # typeshed's stub says the fetcher always returns a configuration; gRPC
    # documents None as "no change".
    return grpc.dynamic_ssl_server_credentials(
        initial,
        fetch,  # type: ignore[arg-type]
        require_client_authentication=files.client_ca is not None,
    )
