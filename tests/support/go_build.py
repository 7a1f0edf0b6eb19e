"""Building a Go command of the repository for a test, with the module
cache the Makefile uses (GOFLAGS=-mod=mod)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["go_build"]


def go_build(cwd: Path, package: str, out: Path) -> Path:
    """`go build -o out/ package` in `cwd`; the folder the binaries are in."""
    done = subprocess.run(
        ["go", "build", "-o", str(out) + "/", package],
        cwd=cwd,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
        capture_output=True,
        text=True,
        # A cold module and build cache downloads and compiles gRPC.
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"go build {package} failed:\n{done.stderr}"
    return out
