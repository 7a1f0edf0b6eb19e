"""Policy hot reload: on SIGHUP, and when the policy file changes.

A Kubernetes ConfigMap update swaps a symlink (`..data`) in the mounted
folder, so the file's own path never sees a write: the watch polls
`os.stat` of the path, which follows the links, and compares the file's
identity (device, inode, size, mtime). Polling once a second costs one
stat; the kubelet itself takes up to a minute to swap.

A reload reads the file (a regular file only, bounded in size and time:
config/policy_file.py) twice, SETTLE_S apart, and goes on only once two
reads agree: a file rewritten in place (truncated, then written) is not
applied half-written. That guards the common case only: a writer that
pauses longer can still be read mid-way, so the safe way to change the
file is to write another and rename it into place (what a ConfigMap
update does). Content whose hash is the running policy's is not parsed
again. New content is parsed off the event loop, in a thread, within the
parser's bounds (config/_yaml.py), then swapped in with one call on the
loop (`Daemon.use_policy`): a call in flight finishes on the policy it
started with, the next one sees the new one, and the pod's upstream state
is kept.

A file that cannot be used changes nothing but a log line with its line
number and the `squawk_policy_reloads_total{result="invalid"}` count;
health never moves, and the watch goes on, whatever the parser raised. An
empty file (no YAML document: nothing, or only comments) is one of those,
unless the policy in force was read from an empty file too (the file was
empty at start): a writer that truncates before writing would otherwise
swap in the built-in policy and drop every per-upstream setting.
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

from ...config import Config, ConfigError, load_config, read_policy_file
from ...settings import POLL_S

__all__ = ["SETTLE_S", "PolicyWatch", "policy_hash"]

log = logging.getLogger(__name__)

# Two reads of the file this far apart must agree before it is parsed; a
# file still changing after SETTLE_TRIES reads is refused until it changes again.
SETTLE_S = 0.25
SETTLE_TRIES = 8


def policy_hash(text: bytes) -> str:
    """The loaded policy's version: the first 12 hex digits of its SHA-256."""
    return hashlib.sha256(text).hexdigest()[:12]


def _identity(path: str) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


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
        settle_s: float = SETTLE_S,
    ) -> None:
        self.path = path
        self.hash = loaded_hash
        self._running = running
        # Whether the policy in force was read from an empty file.
        self._empty = running.empty
        self._apply = apply
        self._count = count
        self._poll_s = poll_s
        self._settle_s = settle_s
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
                await self._reload(why)
            except ConfigError as exc:
                self._count("invalid")
                log.error("policy reload (%s) refused, keeping %s: %s", why, self.hash, exc)
            except Exception:
                # A parser failure nobody foresaw: logged with its traceback,
                # and the watch goes on.
                self._count("invalid")
                log.exception("policy reload (%s) failed, keeping %s", why, self.hash)

    async def _read_settled(self) -> bytes:
        """The file's bytes once two reads SETTLE_S apart agree."""
        data = (await asyncio.to_thread(read_policy_file, self.path))[0]
        for _ in range(SETTLE_TRIES):
            await asyncio.sleep(self._settle_s)
            again = (await asyncio.to_thread(read_policy_file, self.path))[0]
            if again == data:
                return data
            data = again
        self._seen = None  # the next poll tries again
        raise ConfigError(
            f"{self.path}: still changing after {SETTLE_TRIES} reads {self._settle_s:g}s "
            "apart; write the new file elsewhere and rename it into place"
        )

    async def _reload(self, why: str) -> None:
        data = await self._read_settled()
        digest = policy_hash(data)
        if digest == self.hash:
            self._count("unchanged")
            return
        # The same bytes are hashed and parsed, whatever swaps the file meanwhile.
        text = data.decode("utf-8")  # read_policy_file has checked it
        config = await asyncio.to_thread(load_config, self.path, None, text)
        if config.empty and not self._empty:
            raise ConfigError(
                f"{self.path}: the file is empty; it would replace the policy with the "
                "built-in one (to mean that, write `profiles: {}`)"
            )
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
        self._empty = config.empty


def read_startup(path: str | None) -> str:
    """The hash of the policy the daemon starts with ("builtin" without a file)."""
    if not path:
        return "builtin"
    try:
        return policy_hash(read_policy_file(path)[0])
    except ConfigError:
        return "unreadable"
