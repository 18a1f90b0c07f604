"""Caller keys kept in the run store, as ``CallerMiddleware`` looks them up: by digest, through a short cache.

Every request with a key the callers file does not know would otherwise be a query. The cache keeps each answer
(a key, or "no such key") for ``AGENT_CALLER_KEYS_CACHE_SECONDS``: a revoked key is refused at the latest that
long after ``python -m agent_service.keys revoke``, a new key is accepted at once (an unknown digest is asked
again once its "no" has expired), and a flood of wrong keys fills at most ``max_entries`` entries, the oldest
going first. A failure of the store is not cached: the next request asks again.

The lookup is by the key's sha256, the table's primary key: the digest of a presented key says nothing an
attacker could use about the stored ones, so the query's timing leaks nothing (the callers file's keys are
compared in constant time because they are a list scanned in memory).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from agent_service.store import CallerKeyStore, StoredCallerKey, StoreError

__all__ = ["MAX_CACHED_KEYS", "StoredKeys"]

MAX_CACHED_KEYS = 10_000
"""Answers kept at most (about 200 bytes each): wrong keys sent in bulk push out the oldest, never memory."""


class StoredKeys:
    """The store's caller keys, cached; ``attach`` the store once it is open (the app's lifespan)."""

    def __init__(
        self,
        *,
        cache_seconds: float,
        max_entries: int = MAX_CACHED_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cache_seconds = cache_seconds
        self.max_entries = max_entries
        self._clock = clock
        self._keys: CallerKeyStore | None = None
        self._cache: dict[bytes, tuple[float, StoredCallerKey | None]] = {}
        """digest -> (when the answer expires, the key or None); in insertion order, oldest first."""

    def attach(self, keys: CallerKeyStore) -> None:
        self._keys = keys

    async def find(self, digest: bytes) -> StoredCallerKey | None:
        """The stored, unrevoked key whose sha256 is ``digest`` (or None); ``StoreError`` when the store cannot
        say (not open yet, or unreachable)."""
        now = self._clock()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        if self._keys is None:
            raise StoreError("The run store is not open yet.")
        key = await self._keys.find(digest)
        if self.cache_seconds > 0:
            self._remember(digest, key, now + self.cache_seconds)
        return key

    def _remember(self, digest: bytes, key: StoredCallerKey | None, expires: float) -> None:
        self._cache.pop(digest, None)  # re-inserted at the end: the newest answer
        while len(self._cache) >= self.max_entries:
            del self._cache[next(iter(self._cache))]
        self._cache[digest] = (expires, key)

    def cached(self) -> int:
        """How many answers are cached (for tests and metrics)."""
        return len(self._cache)
