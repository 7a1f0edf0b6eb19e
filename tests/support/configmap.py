"""A mounted Kubernetes ConfigMap, as the kubelet lays it out and updates it."""

from __future__ import annotations

import os
from pathlib import Path


class ConfigMap:
    """`policy.yaml` -> `..data/policy.yaml`, `..data` -> a versioned folder;
    an update swaps `..data` with one rename, as the kubelet's atomic writer
    does, so the file's own path never sees a write."""

    def __init__(self, root: Path, text: str) -> None:
        self.root = root
        self.version = 0
        self._write(text)
        os.symlink("..data/policy.yaml", root / "policy.yaml")

    @property
    def path(self) -> Path:
        return self.root / "policy.yaml"

    def _write(self, text: str) -> None:
        self.version += 1
        folder = self.root / f"..v{self.version}"
        folder.mkdir()
        (folder / "policy.yaml").write_text(text)
        os.symlink(folder.name, self.root / "..data_tmp")
        os.replace(self.root / "..data_tmp", self.root / "..data")

    def update(self, text: str) -> None:
        self._write(text)
