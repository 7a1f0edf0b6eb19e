"""PEM files as every TLS setting reads them: the daemon's listeners, the
fleet store's Redis connection and the CLI's client flags, each naming
the setting in its error.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from squawk.policy.text import shown_text

__all__ = ["MAX_PEM_BYTES", "read_pem", "shown_path"]

# A bundle of hundreds of CA certificates fits many times over; a device
# such as /dev/zero, given by mistake, would otherwise be read forever.
MAX_PEM_BYTES = 1 << 20


def shown_path(path: str) -> str:
    """A file's path as an error names it: through the redaction boundary
    like any text (a path can hold what looks like a key), and bounded."""
    return shown_text(path, 300)


def read_pem(flag: str, path: str) -> bytes:
    """The file given to `flag`; OSError when it cannot be read, ValueError
    naming the flag when it is not PEM (gRPC's own error would name neither).
    The CLI's client flags are checked by the same rule.

    Only a regular file: opening a FIFO waits for a writer forever, which
    would hang the start (or a rotation) before anything is logged."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError(f"{flag} {shown_path(path)}: not a regular file, so not a PEM file")
    with Path(path).open("rb") as file:
        data = file.read(MAX_PEM_BYTES + 1)
    if len(data) > MAX_PEM_BYTES:
        raise ValueError(
            f"{flag} {shown_path(path)}: over {MAX_PEM_BYTES >> 20} MiB, not a PEM file"
        )
    if b"-----BEGIN " not in data:
        raise ValueError(f"{flag} {shown_path(path)}: not a PEM file")
    return data
