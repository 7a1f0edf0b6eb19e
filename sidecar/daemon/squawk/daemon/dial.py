"""How the CLI reaches a running daemon: `--target`, and TLS to it.

`--tls-ca` turns TLS on: the CA that signed the daemon's `--tls-cert`.
`--tls-cert` and `--tls-key` add the client's own certificate, for a daemon
with `--tls-client-ca`. The files are read before dialling, so a file that
cannot be used is named with its flag rather than reported by gRPC as an
unreachable daemon.
"""

from __future__ import annotations

import argparse

import grpc

from .pem import read_pem
from .server.lifecycle.tls import TlsError

__all__ = ["add_target_flags", "check_local", "hint", "open_channel"]

_TLS_FLAGS = ("--tls-ca", "--tls-cert", "--tls-key", "--tls-server-name")


def _given(args: argparse.Namespace, flag: str) -> bool:
    return getattr(args, flag[2:].replace("-", "_")) is not None


def add_target_flags(cmd: argparse.ArgumentParser, *, required: bool, help: str) -> None:
    cmd.add_argument(
        "--target",
        required=required,
        metavar="ADDR",
        help=f"{help}: HOST:PORT or unix:PATH, as the daemon's --listen",
    )
    cmd.add_argument(
        "--tls-ca",
        metavar="FILE",
        help="dial with TLS, trusting this CA (PEM), the one that signed the daemon's "
        "--tls-cert (default: plaintext)",
    )
    cmd.add_argument(
        "--tls-cert",
        metavar="FILE",
        help="the client's certificate (PEM), for a daemon with --tls-client-ca",
    )
    cmd.add_argument("--tls-key", metavar="FILE", help="the client's key (PEM), with --tls-cert")
    cmd.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="the name the daemon's certificate must hold, when the target's host is not "
        "one of its names (default: the target's host)",
    )


def _read(flag: str, path: str) -> bytes:
    try:
        return read_pem(flag, path)
    except OSError as exc:
        raise TlsError(f"{flag} {path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise TlsError(str(exc)) from None


def open_channel(args: argparse.Namespace) -> grpc.Channel:
    """A channel to `args.target`, with TLS when --tls-ca is given.

    Raises TlsError naming the flag when the TLS flags cannot work."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise TlsError("--tls-cert and --tls-key go together")
    if args.tls_ca is None:
        # Not TLS with the system's CAs: a daemon's certificate comes from a
        # private CA, and plaintext would silently ignore these flags.
        for flag in ("--tls-cert", "--tls-server-name"):
            if _given(args, flag):
                raise TlsError(f"{flag} needs --tls-ca")
        return grpc.insecure_channel(args.target)
    ca = _read("--tls-ca", args.tls_ca)
    key = _read("--tls-key", args.tls_key) if args.tls_key is not None else None
    cert = _read("--tls-cert", args.tls_cert) if args.tls_cert is not None else None
    options = []
    if args.tls_server_name is not None:
        options.append(("grpc.ssl_target_name_override", args.tls_server_name))
    credentials = grpc.ssl_channel_credentials(ca, key, cert)
    return grpc.secure_channel(args.target, credentials, options=options)


def check_local(args: argparse.Namespace) -> None:
    """Refuses TLS flags on a call answered locally, which they cannot affect."""
    for flag in _TLS_FLAGS:
        if _given(args, flag):
            raise TlsError(f"{flag} needs --target")


def hint(args: argparse.Namespace, error: grpc.RpcError) -> str:
    """What to add to an answer that may be a TLS mismatch.

    A daemon serving TLS closes a plaintext connection, and so does one
    requiring a client certificate that none was given; gRPC reports both
    only as "Socket closed". A daemon that is down ("Connection refused") or
    a certificate that fails verification (named in the details) needs no
    hint."""
    if getattr(args, "target", None) is None or "Socket closed" not in (error.details() or ""):
        return ""
    if args.tls_ca is None:
        return " (if the daemon serves TLS, give --tls-ca)"
    if args.tls_cert is None:
        return " (if the daemon requires a client certificate, give --tls-cert and --tls-key)"
    return ""
