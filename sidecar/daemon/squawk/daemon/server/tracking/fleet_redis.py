"""The fleet store's line to Redis: the client (by URL or through Redis
Sentinel, with TLS), the script's round trips and the reconnect pings.
Every wait here is bounded; what a late or failed one means is the
store's (fleet_store.py, fleet_outage.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from ...config import ConfigError
from ...config.state import StateSettings
from ...pem import read_pem, shown_path
from ...settings import STATE_TLS_CA, STATE_TLS_CERT, STATE_TLS_KEY
from .fleet_link import Call
from .fleet_wire import SCRIPT, SHA

__all__ = ["BACKGROUND_TIMEOUT_S", "REDIS_EXTRA_MISSING", "RedisLine"]

# What a daemon installed without the redis extra says when asked for the
# store. Only what exists: the checkout's own extra (make setup's dev set-up
# includes it) and the wheel `make dist` builds. The distribution is not on
# any package index, so `pip install 'squawk-daemon[redis]'` would install
# whatever anyone registered under that name.
REDIS_EXTRA_MISSING = (
    "state.store redis needs the redis client, which the daemon's redis extra installs: "
    "in the checkout, .venv/bin/pip install -e '.[redis]'; for the wheel make dist builds, "
    "pip install 'dist/python/squawk_daemon-0.1.0-py3-none-any.whl[redis]'"
)

# A ping or a script load waits this long (nobody waits on it).
BACKGROUND_TIMEOUT_S = 1.0
_MAX_CONNECTIONS = 32


class RedisLine:
    """The Redis client and the fleet script's calls on it."""

    def __init__(self, settings: StateSettings, late_s: float) -> None:
        try:
            from redis.exceptions import NoScriptError
        except ImportError:  # pragma: no cover - tested in a subprocess (test_start_errors.py)
            # A configuration error (exit code 2), not a crash: the policy or
            # SQUAWK_STATE_URL asked for a store this installation cannot run.
            raise ConfigError(REDIS_EXTRA_MISSING) from None
        self._no_script = NoScriptError
        self._late_s = late_s
        self._redis, self._sentinels = _connect(settings)

    async def aclose(self) -> None:
        await self._redis.aclose()
        for sentinel in self._sentinels:
            await sentinel.aclose()

    async def ping(self) -> None:
        async with asyncio.timeout(BACKGROUND_TIMEOUT_S):
            await self._redis.ping()

    async def execute(self, calls: Sequence[Call]) -> list[object]:
        """The calls' replies, in one round trip (an item's error is its reply)."""
        replies = await self._round_trip(calls)
        missing = [i for i, r in enumerate(replies) if isinstance(r, self._no_script)]
        if missing:
            # A server that restarted (or flushed its scripts) has lost the
            # script: load it once and send those calls again (they did not run).
            await self.load_script()
            again = await self._round_trip([calls[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies

    async def _round_trip(self, calls: Sequence[Call]) -> list[object]:
        # EVALSHA itself: a registered script would ask SCRIPT EXISTS first,
        # a second round trip per pipeline. The context closes the pipeline
        # on every path: one left holding a connection is an asyncio
        # "Unclosed Pipeline client" at each outage.
        async with self._redis.pipeline(transaction=False) as pipe:
            for call in calls:
                pipe.evalsha(SHA, len(call.keys), *call.keys, call.words)
            async with asyncio.timeout(max(BACKGROUND_TIMEOUT_S, self._late_s)):
                replies: list[object] = await pipe.execute(raise_on_error=False)
        return replies

    async def load_script(self) -> None:
        async with asyncio.timeout(BACKGROUND_TIMEOUT_S):
            await self._redis.script_load(SCRIPT)

    async def drop_connections(self) -> None:
        """Connections from before an outage may be dead or half-read: drop
        them (a dead connection's close may fail: nothing to do then)."""
        with contextlib.suppress(Exception):
            await self._redis.connection_pool.disconnect()

    async def answers_in_time(self, pings: int, clock: Callable[[], float]) -> bool:
        """Whether Redis answers `pings` pings in a row within the
        deadline: a Redis that is up but slow stays out, instead of the
        fleet flapping on and off with a log line each."""
        # Untimed: it may open the connection (and TLS, AUTH, SELECT), which
        # the calls that follow do not pay.
        await self.ping()
        for _ in range(pings):
            started = clock()
            await self.ping()
            if clock() - started > self._late_s:
                return False
        return True


def _connect(settings: StateSettings) -> tuple[Any, list[Any]]:
    """The Redis client, by URL or through Redis Sentinel, and the sentinels'
    own clients (closed with it). Settings that cannot work stop the start
    (ConfigError, exit code 2), naming the setting and the file."""
    from redis.asyncio import BlockingConnectionPool, Redis
    from redis.asyncio.retry import Retry
    from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
    from redis.backoff import NoBackoff

    options: dict[str, Any] = {
        "max_connections": _MAX_CONNECTIONS,
        # Our own deadlines bound every wait; these only end a hung socket.
        "socket_connect_timeout": BACKGROUND_TIMEOUT_S,
        "socket_timeout": BACKGROUND_TIMEOUT_S,
        "retry": Retry(NoBackoff(), 0),
    }
    tls = _tls_options(settings)
    if not settings.sentinels:
        pool = BlockingConnectionPool.from_url(settings.url, **options, **tls)
        return Redis.from_pool(pool), []  # owns the pool: aclose() closes its connections
    if settings.url:
        raise ConfigError("state.sentinels and state.url are both set: give one of them")

    class BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
        """The master's connections, found through the sentinels, at most
        max_connections of them (a caller waits for one, as with a URL)."""

    # redis-py < 8.2 leaves Sentinel.__init__ untyped; newer releases type it.
    sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(settings.sentinels),
        sentinel_kwargs={
            "socket_connect_timeout": BACKGROUND_TIMEOUT_S,
            "socket_timeout": BACKGROUND_TIMEOUT_S,
        },
    )
    client = sentinel.master_for(
        settings.service_name, connection_pool_class=BlockingSentinelPool, **options
    )
    return client, list(sentinel.sentinels)


def _tls_options(settings: StateSettings) -> dict[str, str]:
    """redis-py's own TLS keywords for a rediss:// URL: the CA to trust
    (unset: the system's), and the client's certificate and key. Each file
    is checked as Python's ssl loads it, so a bad one is named at start
    rather than found at the first handshake as an outage."""
    given = [
        (f"{setting.file_key} ({setting.env})", keyword, path)
        for setting, keyword, path in (
            (STATE_TLS_CA, "ssl_ca_certs", settings.tls_ca),
            (STATE_TLS_CERT, "ssl_certfile", settings.tls_cert),
            (STATE_TLS_KEY, "ssl_keyfile", settings.tls_key),
        )
        if path
    ]
    if not given:
        return {}
    if settings.sentinels or urlsplit(settings.url).scheme != "rediss":
        raise ConfigError(f"{given[0][0]}: needs a rediss:// state.url")
    if bool(settings.tls_cert) != bool(settings.tls_key):
        raise ConfigError(
            f"{STATE_TLS_CERT.file_key} and {STATE_TLS_KEY.file_key} go together: "
            "a client certificate needs its key"
        )
    for name, _, path in given:
        try:
            read_pem(name, path)
        except OSError as exc:
            raise ConfigError(f"{name} {shown_path(path)}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    context = ssl.create_default_context()
    for name, keyword, path in given:
        try:
            if keyword == "ssl_ca_certs":
                context.load_verify_locations(cafile=path)
            elif keyword == "ssl_certfile":
                context.load_cert_chain(path, settings.tls_key)
        except ssl.SSLError:
            what = (
                "holds no CA certificate"
                if keyword == "ssl_ca_certs"
                else "not a certificate, or not the one whose key is "
                + shown_path(settings.tls_key)
            )
            raise ConfigError(f"{name} {shown_path(path)}: {what}") from None
    return {keyword: path for _, keyword, path in given}
