"""Claiming the addresses the daemon listens on.

gRPC replaces whatever socket file sits at a unix:// path, so a second
daemon started on the same path would take it over silently while the first
kept running, unreachable. Before binding, `claim_unix_socket` tells the
three cases apart:

- nothing there: bind;
- a socket nobody answers on (left by a daemon that was killed): remove it,
  then bind;
- a socket something answers on, or a path that is not a socket: refuse.

The check and the bind are two steps, so two daemons starting in the same
instant could both find a stale socket; one of them then replaces the
other's, the case this guard cannot close without a lock file.

Before gRPC binds a unix:// path (its error would say only "failed to
bind"), `check_unix_socket` creates the socket itself and removes it, so
a path too long for a socket, a missing folder or one the daemon may not
write is refused with the system's reason (AddressError): a setting to
correct, not an address in use.

The socket is created with the configured mode from the start: the umask is
narrowed around the bind, so there is no moment when the file exists with a
wider mode (a chmod after the bind would leave one). The umask is
per-process, so a file another thread creates during that call is created
narrower, never wider.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

__all__ = [
    "AddressError",
    "BindError",
    "BoundSocket",
    "check_address",
    "check_unix_socket",
    "claim_unix_socket",
    "socket_umask",
    "unix_socket_path",
]

log = logging.getLogger(__name__)

# How long a connect may take to tell "someone answers" from "stale".
_PROBE_TIMEOUT_S = 1.0


# A unix socket's path, in bytes with its NUL: sun_path's size (Linux
# 108; macOS and the BSDs 104).
_SUN_PATH_BYTES = 108 if sys.platform.startswith("linux") else 104


class BindError(RuntimeError):
    """The daemon could not listen on an address."""


class AddressError(ValueError):
    """A listen address that cannot work as given; the message says why."""


@dataclass(frozen=True, slots=True)
class BoundSocket:
    """A socket file this process created, known by its inode so that a
    clean exit never removes a file some other process put at the path."""

    path: str
    inode: int

    def remove(self) -> None:
        try:
            if os.lstat(self.path).st_ino == self.inode:
                os.unlink(self.path)
        except FileNotFoundError:
            pass  # gRPC removes it itself when the server stops


def unix_socket_path(address: str) -> str | None:
    """The file a gRPC listen address creates, or None (TCP, abstract socket)."""
    for prefix in ("unix://", "unix:"):
        if address.startswith(prefix):
            return address.removeprefix(prefix)
    return None


def check_address(address: str, *, unix: bool) -> None:
    """Raise ValueError, saying the expected form, unless `address` is
    HOST:PORT (or, with `unix`, unix:PATH). Checked before anything binds:
    gRPC would report `:50051` as an address in use, and a port alone as a
    host it cannot find."""
    expected = "HOST:PORT or unix:PATH" if unix else "HOST:PORT"
    if unix and address.startswith(("unix:", "unix-abstract:")):
        if not address.partition(":")[2].removeprefix("//"):
            raise ValueError(f"{address!r} names no socket path: expected {expected}")
        return
    host, _, port = address.rpartition(":")
    if not host or not (port.isascii() and port.isdigit() and int(port) <= 65535):
        raise ValueError(
            f"{address!r} is not {expected}: expected e.g. 127.0.0.1:50051 "
            "(0.0.0.0:50051 for every interface)"
        )


def claim_unix_socket(address: str, path: str) -> None:
    """Make `path` free for a new socket, or raise BindError naming `address`."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise BindError(f"cannot listen on {address}: {path} exists and is not a socket")
    if _answers(address, path):
        raise BindError(f"cannot listen on {address}: another process is serving on it")
    with suppress(FileNotFoundError):
        os.unlink(path)
    log.info("removed the stale socket %s: nothing answered on it", path)


def check_unix_socket(address: str, path: str) -> None:
    """Raise AddressError with the system's reason when no socket can be
    created at `path`; return when one can (the probe is removed)."""
    size = len(os.fsencode(path))
    if size >= _SUN_PATH_BYTES:
        raise AddressError(
            f"cannot listen on {address}: the path is {size} bytes, over the "
            f"{_SUN_PATH_BYTES - 1} a unix socket's path may have"
        )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(path)
        except OSError as exc:
            raise AddressError(
                f"cannot listen on {address}: cannot create {path}: {exc.strerror or exc}"
            ) from None
    with suppress(FileNotFoundError):
        os.unlink(path)


def _answers(address: str, path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(_PROBE_TIMEOUT_S)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except TimeoutError:
            return True  # a full backlog: a live listener that is busy
        except OSError as exc:
            if exc.errno == errno.EAGAIN:
                return True  # the same, as a non-blocking connect reports it
            raise BindError(
                f"cannot listen on {address}: cannot tell whether another process "
                f"serves on it ({exc.strerror})"
            ) from None
    return True


@contextmanager
def socket_umask(mode: int) -> Iterator[None]:
    """Files created inside get at most `mode` (sockets get exactly `mode`)."""
    previous = os.umask(0o777 & ~mode)
    try:
        yield
    finally:
        os.umask(previous)
