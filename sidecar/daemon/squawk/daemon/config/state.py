"""Where the upstream state lives: the policy file's `state:` section.

```yaml
state:
  store: redis            # memory (the default): each pod alone
  url: redis://redis.squawk.svc:6379/0
  key_prefix: "squawk:"
  sync: 100ms             # how often a pod sends its counts and reads the fleet's
  deadline: 100ms         # a sync later than this is late (three in a row: an outage)
  min_pods: 2             # distinct failing pods before the fleet breaker opens
  fallback_share: 0.25    # without Redis, past the share's lease: this part of a rate
  tls_ca: /etc/squawk/redis-ca.pem     # rediss:// only: trust this CA, not the system's
  tls_cert: /etc/squawk/redis-client.pem   # with tls_key: mutual TLS
  tls_key: /etc/squawk/redis-client.key
```

Or, instead of `url`, Redis Sentinel finds the master (redis-py's
`redis.asyncio.sentinel.Sentinel(...).master_for(service)`):

```yaml
state:
  store: redis
  sentinels: "sentinel-0.squawk:26379,sentinel-1.squawk:26379"
  service_name: mymaster
```

Each of these may also come from the environment (SQUAWK_STATE_TLS_CA,
SQUAWK_STATE_TLS_CERT, SQUAWK_STATE_TLS_KEY, SQUAWK_STATE_SENTINELS,
SQUAWK_STATE_SERVICE_NAME; the variable wins). The files are checked when
the store is made, at start (squawk.daemon.server.tracking.fleet_store),
not here: `check-policy` may run where they are not.

`SQUAWK_STATE_URL` in the environment turns the Redis store on with that
URL, and is the only place a password may be given (`redis://:pw@host`, from
a Kubernetes Secret): the file is usually a ConfigMap, so a URL with
credentials there is refused. The URL is never logged, only its host; a bad
one stops the daemon, naming the variable, never the value. For the same
reason of one file for many pods, `pod` (which must differ per pod) is
`SQUAWK_STATE_POD` only.
"""

from __future__ import annotations

import enum
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from squawk.policy import parse_duration

from ..settings import (
    STATE_POD,
    STATE_SENTINELS,
    STATE_SERVICE_NAME,
    STATE_TLS_CA,
    STATE_TLS_CERT,
    STATE_TLS_KEY,
    STATE_URL,
    Setting,
)
from ._yaml import ConfigError, choice, integer, mapping, one_of, scalar, where
from .needs import Need

__all__ = ["StateSettings", "Store", "apply_state_env", "parse_state", "state_needs"]

_FIELDS = {
    "store", "url", "key_prefix", "deadline", "min_pods", "pod", "sync", "fallback_share",
    "tls_ca", "tls_cert", "tls_key", "sentinels", "service_name",
}  # fmt: skip
# redis-py reads other query parameters as connection settings; the URL may
# choose the database, nothing else.
_QUERY = {"db"}
_SCHEMES = ("redis", "rediss", "unix")
MIN_DEADLINE = timedelta(milliseconds=1)
MAX_DEADLINE = timedelta(seconds=1)
MIN_SYNC = timedelta(milliseconds=10)
MAX_SYNC = timedelta(seconds=1)
MAX_MIN_PODS = 1000
MAX_PREFIX_CHARS = 64
MAX_POD_CHARS = 253  # a Kubernetes pod name's limit
# Redis's databases are numbered from 0; its default config has 16.
MAX_DB = 1_000_000
MAX_PATH_CHARS = 4096
MAX_SENTINELS = 16
DEFAULT_SENTINEL_PORT = 26379


class Store(enum.StrEnum):
    MEMORY = "memory"
    REDIS = "redis"


@dataclass(frozen=True, slots=True)
class StateSettings:
    store: Store = Store.MEMORY
    # May carry a password (from the environment only): never logged; see `where`.
    url: str = ""
    key_prefix: str = "squawk:"
    # No call waits on the store: a sync round trip later than this is late.
    deadline: timedelta = timedelta(milliseconds=100)
    min_pods: int = 2
    pod: str = ""
    # PEM files for a rediss:// URL: the CA to trust instead of the system's,
    # and the client's certificate and key for mutual TLS; "" is unset.
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    # Redis Sentinel, instead of `url`: (host, port) of each sentinel, and
    # the name of the master they watch.
    sentinels: tuple[tuple[str, int], ...] = ()
    service_name: str = ""
    # How often a pod sends what it saw and reads the fleet's sums back.
    sync: timedelta = timedelta(milliseconds=100)
    # The part of an upstream's declared or announced rate a pod paces by
    # once its fleet share's lease ran out without Redis; None: the whole
    # rate (its own pacer, as without the fleet).
    fallback_share: float | None = None

    @property
    def where(self) -> str:
        """The store's address without credentials, for logs."""
        if self.sentinels:
            hosts = ",".join(f"{h}:{p}" for h, p in self.sentinels)
            return f"sentinel {self.service_name!r} via {hosts}"
        parts = urlsplit(self.url)
        if parts.scheme == "unix":
            return f"unix:{parts.path}"
        return f"{parts.scheme}://{parts.hostname}:{parts.port or 6379}"

    def pod_name(self) -> str:
        """This pod's member name in the store: distinct per daemon by default
        (a Kubernetes pod's hostname is its name; the pid tells apart daemons
        sharing a host)."""
        if self.pod:
            return self.pod
        # The store reads the name as one word: a host name's odd characters go.
        host = "".join(
            c if c.isprintable() and not c.isspace() else "-" for c in socket.gethostname()
        )
        return f"{host[:200]}/{os.getpid()}"


def _url(text: str, *, credentials: bool) -> str:
    # The messages never echo the URL: it might carry a password.
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 -- raises on a port out of range
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise ValueError("not a URL") from None
    if parts.scheme not in _SCHEMES:
        raise ValueError("not a redis://, rediss:// or unix:// URL")
    if parts.scheme != "unix" and not parts.hostname:
        raise ValueError("the URL names no host")
    if "@" in parts.path or "@" in parts.query or "@" in parts.fragment:
        # A password with an unencoded "/" would be read as part of the host.
        raise ValueError("an '@' after the host: percent-encode '/' and '@' in a password")
    if not query.keys() <= _QUERY or not all(v.isdigit() for vs in query.values() for v in vs):
        raise ValueError("the only query parameter allowed is db=<number>")
    path_db = parts.path.strip("/") if parts.scheme != "unix" else ""
    if path_db and not (path_db.isdigit() and int(path_db) <= MAX_DB):
        raise ValueError(f"the path is a database number, 0..{MAX_DB}")
    if path_db and query:
        raise ValueError("the database is given twice, in the path and in db=")
    if parts.fragment:
        raise ValueError("a URL with a fragment")
    if not credentials and (parts.username or parts.password):
        raise ValueError("credentials in the file are not allowed; give them in SQUAWK_STATE_URL")
    return text


def _deadline(text: str) -> timedelta:
    value = parse_duration(text)
    if not MIN_DEADLINE <= value <= MAX_DEADLINE:
        raise ValueError("must be between 1ms and 1s")
    return value


def _sync(text: str) -> timedelta:
    value = parse_duration(text)
    if not MIN_SYNC <= value <= MAX_SYNC:
        raise ValueError("must be between 10ms and 1s")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("not a number") from None
    if not 0.0 < value <= 1.0:
        raise ValueError("must be in (0, 1]")
    return value


def _min_pods(text: str) -> int:
    value = integer(text)
    if not 1 <= value <= MAX_MIN_PODS:
        raise ValueError(f"must be between 1 and {MAX_MIN_PODS}")
    return value


def _name(limit: int) -> Any:
    def parse(text: str) -> str:
        if len(text) > limit or not text.isprintable() or " " in text:
            raise ValueError(f"at most {limit} printable characters without spaces")
        return text

    return parse


def _path(text: str) -> str:
    if not text or len(text) > MAX_PATH_CHARS or not text.isprintable():
        raise ValueError(f"empty, or not {MAX_PATH_CHARS} printable characters at most")
    return text


def _sentinels(text: str) -> tuple[tuple[str, int], ...]:
    out = []
    for item in text.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host:
            host, port = port, str(DEFAULT_SENTINEL_PORT)
        if not host or not port.isdigit() or not 0 < int(port) < 65536 or " " in host:
            raise ValueError(f"{item.strip()!r} is not a host and a port 1..65535")
        out.append((host.strip("[]"), int(port)))
    if len(out) > MAX_SENTINELS:
        raise ValueError(f"at most {MAX_SENTINELS} sentinels")
    return tuple(out)


def parse_state(node: yaml.Node) -> StateSettings:
    path = "state"
    fields = mapping(node, path, _FIELDS)
    parsers: dict[str, tuple[Any, str]] = {
        "store": (choice(Store), one_of(Store)),
        "url": (lambda t: _url(t, credentials=False), "a redis:// URL"),
        "key_prefix": (_name(MAX_PREFIX_CHARS), "a key prefix"),
        "deadline": (_deadline, "a duration such as 5ms"),
        "min_pods": (_min_pods, "an integer"),
        "sync": (_sync, "a duration such as 100ms"),
        "fallback_share": (_fraction, "a fraction such as 0.25"),
        "tls_ca": (_path, "a PEM file's path"),
        "tls_cert": (_path, "a PEM file's path"),
        "tls_key": (_path, "a PEM file's path"),
        "sentinels": (_sentinels, "host:port pairs, separated by commas"),
        "service_name": (_name(MAX_PREFIX_CHARS), "the master's name"),
    }
    if "pod" in fields:
        raise ConfigError(
            f"{where(fields['pod'], 'state.pod')}: one file serves many pods, and each "
            "needs its own name: set SQUAWK_STATE_POD (e.g. from metadata.name)"
        )
    updates = {
        name: scalar(fields[name], f"{path}.{name}", *parsers[name])
        for name in parsers
        if name in fields
    }
    return replace(StateSettings(), **updates)


def apply_state_env(settings: StateSettings, environ: Mapping[str, str]) -> StateSettings:
    """SQUAWK_STATE_URL (turns the Redis store on) and SQUAWK_STATE_POD over
    the file's settings.

    Unlike the other environment overrides, a bad value stops the daemon
    (ConfigError, naming the variable and never the URL): an operator who
    set it asked for the fleet, and a pod quietly alone is worse than one
    that does not start."""
    url = environ.get(STATE_URL.variable, "").strip()
    if url:
        try:
            settings = replace(settings, store=Store.REDIS, url=_url(url, credentials=True))
        except ValueError as exc:
            raise ConfigError(f"{STATE_URL.variable}: {exc}") from None
    overrides: tuple[tuple[Setting, str, Callable[[str], Any]], ...] = (
        (STATE_TLS_CA, "tls_ca", _path),
        (STATE_TLS_CERT, "tls_cert", _path),
        (STATE_TLS_KEY, "tls_key", _path),
        (STATE_SENTINELS, "sentinels", _sentinels),
        (STATE_SERVICE_NAME, "service_name", _name(MAX_PREFIX_CHARS)),
    )
    for setting, name, parse in overrides:
        text = environ.get(setting.variable, "").strip()
        if text:
            try:
                value: Any = parse(text)
                settings = replace(settings, **{name: value})
            except ValueError as exc:
                raise ConfigError(f"{setting.variable}: {exc}") from None
    if environ.get(STATE_SENTINELS.variable, "").strip():
        settings = replace(settings, store=Store.REDIS)
    pod = environ.get(STATE_POD.variable, "").strip()
    if pod:
        try:
            settings = replace(settings, pod=_name(MAX_POD_CHARS)(pod))
        except ValueError as exc:
            raise ConfigError(f"{STATE_POD.variable}: {exc}") from None
    return settings


def state_needs(settings: StateSettings) -> list[Need]:
    if settings.store is not Store.REDIS:
        return []
    if settings.sentinels and not settings.service_name:
        return [Need("state.service_name", STATE_SERVICE_NAME.variable, "state.sentinels", "set")]
    if not settings.url and not settings.sentinels:
        return [Need("state.url", STATE_URL.variable, "state.store", "redis")]
    return []
