"""A small TTL cache with an injected clock, so tests step time instead of sleeping."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["TTLCache"]

V = TypeVar("V")


class TTLCache(Generic[V]):
    """Up to `size` entries, each readable for `ttl_s` seconds after it was put.

    Oldest-first eviction keeps memory bounded whatever the traffic; a TTL of
    0 (or a size of 0) turns the cache off.
    """

    def __init__(self, ttl_s: float, size: int, clock: Callable[[], float]) -> None:
        self._ttl_s = ttl_s
        self._size = size
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, V]] = OrderedDict()

    def get(self, key: str) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, value = entry
        if self._clock() >= expires:
            del self._entries[key]
            return None
        return value

    def put(self, key: str, value: V) -> None:
        if self._ttl_s <= 0 or self._size <= 0:
            return
        self._entries.pop(key, None)
        self._entries[key] = (self._clock() + self._ttl_s, value)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)
