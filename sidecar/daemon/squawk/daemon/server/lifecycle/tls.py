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
rotation that cannot be used (a missing file, a half-written one, a key
that is not the certificate's) keeps the previous certificates and is
logged, once per change: gRPC itself would take the files and fail every
handshake after.

The files are checked as a TLS library loads them (Python's ssl, the same
OpenSSL checks): a key that does not match the certificate, or a CA file
that holds no certificate, stops the start with exit code 2 naming the
file. A certificate outside its validity dates (expired, or not yet
valid) is served, since clocks disagree and a refusal would only turn a
warning into an outage, but logged as a warning naming the file and the
date, at start and at each rotation.
"""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime

import grpc

from ...pem import read_pem

__all__ = [
    "TlsError",
    "TlsFiles",
    "check_files",
    "server_credentials",
]

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


def _der_tlv(data: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start, end) of the DER value at `at`: its content is data[start:end]."""
    tag, size, at = data[at], data[at + 1], at + 2
    if size & 0x80:
        count = size & 0x7F
        size, at = int.from_bytes(data[at : at + count], "big"), at + count
    return tag, at, at + size


def _der_time(data: bytes, at: int) -> datetime:
    tag, start, end = _der_tlv(data, at)
    text = data[start:end].decode("ascii")
    if tag == 0x17:  # UTCTime, YYMMDDHHMMSSZ: years 1950..2049 (RFC 5280)
        text = ("19" if int(text[:2]) >= 50 else "20") + text
    return datetime.strptime(text, "%Y%m%d%H%M%SZ").replace(tzinfo=UTC)


def _validity(pem: bytes) -> tuple[datetime, datetime]:
    """(notBefore, notAfter) of the first certificate in `pem` (RFC 5280
    4.1: Certificate > tbsCertificate > [version], serial, signature,
    issuer, validity); ValueError when it cannot be read."""
    try:
        text = pem.decode("ascii", "replace")
        begin = text.index("-----BEGIN CERTIFICATE-----")  # after any text before it
        end = text.index("-----END CERTIFICATE-----", begin)
        der = ssl.PEM_cert_to_DER_cert(text[begin:end] + "-----END CERTIFICATE-----\n")
        _, at, _ = _der_tlv(der, 0)  # Certificate
        _, at, _ = _der_tlv(der, at)  # tbsCertificate
        if der[at] == 0xA0:  # [0] version
            at = _der_tlv(der, at)[2]
        for _ in range(3):  # serialNumber, signature, issuer
            at = _der_tlv(der, at)[2]
        _, at, _ = _der_tlv(der, at)  # validity
        not_before = _der_time(der, at)
        return not_before, _der_time(der, _der_tlv(der, at)[2])
    except (ValueError, IndexError) as exc:
        raise ValueError(f"no certificate's dates can be read: {exc}") from None


def _warn_if_out_of_date(files: TlsFiles, pem: bytes, now: datetime | None = None) -> None:
    try:
        not_before, not_after = _validity(pem)
    except ValueError:
        return  # ssl has read it: a form this reader does not know
    now = now or datetime.now(UTC)
    if now > not_after:
        log.warning(
            "TLS: the certificate in --tls-cert %s expired on %s",
            files.cert,
            f"{not_after:%Y-%m-%d %H:%M:%S} UTC",
        )
    elif now < not_before:
        log.warning(
            "TLS: the certificate in --tls-cert %s is not valid until %s",
            files.cert,
            f"{not_before:%Y-%m-%d %H:%M:%S} UTC",
        )


def _check(files: TlsFiles, client_ca: bytes | None) -> None:
    """ValueError naming the file when OpenSSL would refuse the files."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(files.cert, files.key)
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc) or exc.reason == "KEY_VALUES_MISMATCH":
            raise ValueError(
                f"--tls-key {files.key} does not match the certificate in --tls-cert {files.cert}"
            ) from None
        raise ValueError(
            f"--tls-cert {files.cert} and --tls-key {files.key} cannot be used together "
            f"({exc.reason or exc})"
        ) from None
    if client_ca is not None:
        try:
            context.load_verify_locations(cadata=client_ca.decode("ascii", "replace"))
        except ssl.SSLError as exc:
            raise ValueError(
                f"--tls-client-ca {files.client_ca} holds no certificate OpenSSL can use "
                f"({exc.reason or exc})"
            ) from None


def _read(files: TlsFiles) -> dict[str, bytes]:
    """The files' PEM; OSError or ValueError naming the file that cannot be used."""
    pem = {}
    for name, path in (("cert", files.cert), ("key", files.key), ("client_ca", files.client_ca)):
        if path is not None:
            pem[name] = read_pem(f"--tls-{name.replace('_', '-')}", path)
    _check(files, pem.get("client_ca"))
    return pem


def _configuration(pem: dict[str, bytes]) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration(
        [(pem["key"], pem["cert"])], root_certificates=pem.get("client_ca")
    )


def check_files(files: TlsFiles) -> None:
    """Raises OSError or ValueError naming the file when the files cannot be used."""
    _read(files)


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """Credentials for every TCP listener, re-reading the files on change.

    Raises OSError or ValueError when the files cannot be used at start."""
    pem = _read(files)
    _warn_if_out_of_date(files, pem["cert"])
    initial = _configuration(pem)
    seen = [_identity(files)]

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        # Called by gRPC at each new handshake: a stat of two or three files.
        now = _identity(files)
        if now == seen[0]:
            return None
        seen[0] = now
        try:
            pem = _read(files)
        except (OSError, ValueError) as exc:
            log.warning("TLS: keeping the previous certificates: %s", exc)
            return None
        _warn_if_out_of_date(files, pem["cert"])
        log.info("TLS: certificates reloaded from %s", ", ".join(files.paths()))
        return _configuration(pem)

    # typeshed's stub says the fetcher always returns a configuration; gRPC
    # documents None as "no change".
    return grpc.dynamic_ssl_server_credentials(
        initial,
        fetch,  # type: ignore[arg-type]
        require_client_authentication=files.client_ca is not None,
    )
