"""Reading the policy file: a regular file only, bounded in size and in time.

At start, on reload and in `check-policy` alike. A FIFO, a device or a
socket at the path is refused by a stat before it is opened (opening a
FIFO for reading waits for a writer, forever; reading /dev/zero never
ends), and the file is opened non-blocking and checked again with fstat,
so a swap between the two checks is refused too. Symlinks are followed: a
Kubernetes ConfigMap is one.

The read runs in a daemon thread that the caller waits for at most
READ_TIMEOUT_S: a file on a mount that stopped answering costs a refusal
naming the file, not a daemon that never binds, never reloads again or
never exits (a thread of asyncio's default executor blocks the exit).
"""

from __future__ import annotations

import os
import stat
import threading

from ._yaml import ConfigError

__all__ = ["MAX_POLICY_BYTES", "READ_TIMEOUT_S", "read_policy_file"]

# A policy file larger than this is refused before it is parsed.
MAX_POLICY_BYTES = 1 << 20
READ_TIMEOUT_S = 5.0

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _not_regular(path: str, mode: int) -> ConfigError:
    kind = next((name for test, name in _KINDS if test(mode)), "not a file")
    return ConfigError(f"{path}: not a regular file ({kind}); the policy must be a file")


def _read(path: str) -> bytes:
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the policy file: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_POLICY_BYTES:
            chunk = os.read(fd, MAX_POLICY_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the policy file: {exc.strerror}") from None
    finally:
        os.close(fd)


def read_policy_file(path: str, timeout_s: float = READ_TIMEOUT_S) -> tuple[bytes, str]:
    """The file's bytes and its text; ConfigError naming the file when it
    is not a regular file, cannot be read in `timeout_s`, is too large or
    is not UTF-8."""
    result: list[bytes | ConfigError] = []

    def run() -> None:
        try:
            result.append(_read(path))
        except ConfigError as exc:
            result.append(exc)

    reader = threading.Thread(target=run, name="squawk-policy-read", daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not result:
        raise ConfigError(f"{path}: reading the policy file took longer than {timeout_s:g}s")
    data = result[0]
    if isinstance(data, ConfigError):
        raise data
    if len(data) > MAX_POLICY_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_POLICY_BYTES} bytes")
    try:
        return data, data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
