"""Policy hot reload: on SIGHUP, and when the policy file changes.

A Kubernetes ConfigMap update swaps a symlink (`..data`) in the mounted
folder, so the file's own path never sees a write: the watch polls
`os.stat` of the path, which follows the links, and compares the file's
identity (device, inode, size, mtime). Polling once a second costs one
stat; the kubelet itself takes up to a minute to swap.

A new file is read and checked off the event loop (YAML parsing is CPU
work), then swapped in with one call on the loop (`Daemon.use_policy`):
a call in flight finishes on the policy it started with, the next one
sees the new one, and the pod's upstream state is kept. An invalid file
changes nothing but a log line with its line number and the
`squawk_policy_reloads_total{result="invalid"}` count; health never moves.
A valid file's warnings (entries that can never take effect) are logged
as at start.
The `state:` and `analyzer:` sections are read at start only: a change
there is logged as needing a restart, and the rest of the file applies.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Callable

from ..config import Config, ConfigError, load_config, read_policy_file

__all__ = ["POLL_S", "PolicyWatch", "policy_hash"]

log = logging.getLogger(__name__)

POLL_S = 1.0


def policy_hash(text: bytes) -> str:
    """The loaded policy's version: the first 12 hex digits of its SHA-256."""
    return hashlib.sha256(text).hexdigest()[:12]


def _identity(path: str) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _read(path: str) -> tuple[str, Config]:
    """(hash, config) of the file now at `path`; raises ConfigError."""
    data, text = read_policy_file(path)
    # The same bytes are hashed and parsed, whatever swaps the file meanwhile.
    return policy_hash(data), load_config(path, text=text)


class PolicyWatch:
    """Reloads the policy file into a running daemon."""

    def __init__(
        self,
        path: str,
        running: Config,
        loaded_hash: str,
        apply: Callable[[Config, str], None],
        count: Callable[[str], None],
        poll_s: float = POLL_S,
    ) -> None:
        self.path = path
        self.hash = loaded_hash
        self._running = running
        self._apply = apply
        self._count = count
        self._poll_s = poll_s
        self._seen = _identity(path)
        self._lock = asyncio.Lock()

    async def watch(self) -> None:
        """Poll the file until cancelled."""
        while True:
            await asyncio.sleep(self._poll_s)
            seen = _identity(self.path)
            if seen != self._seen:
                self._seen = seen
                await self.reload("the file changed")

    async def reload(self, why: str) -> None:
        # One reload at a time: a SIGHUP during a poll's reload waits its turn.
        async with self._lock:
            self._seen = _identity(self.path)
            try:
                digest, config = await asyncio.to_thread(_read, self.path)
            except ConfigError as exc:
                self._count("invalid")
                log.error("policy reload (%s) refused, keeping %s: %s", why, self.hash, exc)
                return
            if digest == self.hash:
                self._count("unchanged")
                return
            for section, same in (
                ("state", config.state == self._running.state),
                ("analyzer", config.analyzer == self._running.analyzer),
            ):
                if not same:
                    log.warning(
                        "policy reload: the %s: section changed; it applies after a restart",
                        section,
                    )
            self._apply(config, digest)
            self._count("applied")
            log.info("policy reload (%s): %s -> %s", why, self.hash, digest)
            for warning in config.warnings:
                log.warning("%s", warning)
            self.hash = digest


def read_startup(path: str | None) -> str:
    """The hash of the policy the daemon starts with ("builtin" without a file)."""
    if not path:
        return "builtin"
    try:
        return policy_hash(read_policy_file(path)[0])
    except ConfigError:
        return "unreadable"
