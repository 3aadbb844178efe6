"""Who is calling: the bearer token checked against the store, with a one-second cache.

Expiry is checked on every request against the cached record; revocation reaches a cached
token when its entry ages out, at most ``token_cache_seconds`` (≤ 1 s) later.
"""

from __future__ import annotations

import time

from ..errors import InvalidToken
from ..store import Store, TokenRecord
from ..tokens import bearer_token, hash_token

_MAX_CACHED = 10_000
_TOUCH_EVERY_SECONDS = 60.0


class Authenticator:
    """Turns an Authorization header into the caller's token record, or a 401."""

    def __init__(self, store: Store, cache_seconds: float) -> None:
        self._store = store
        self._cache_seconds = cache_seconds
        self._cache: dict[str, tuple[TokenRecord, float]] = {}

    async def authenticate(self, authorization: str | None) -> TokenRecord:
        token_hash = hash_token(bearer_token(authorization))
        record = await self._lookup(token_hash)
        if record is None or not record.usable_at(time.time()):
            raise InvalidToken()
        return record

    async def _lookup(self, token_hash: str) -> TokenRecord | None:
        now = time.monotonic()
        cached = self._cache.get(token_hash)
        if cached is not None and now - cached[1] < self._cache_seconds:
            return cached[0]
        record = await self._store.find_token(token_hash)
        if record is None:
            self._cache.pop(token_hash, None)
            return None
        if len(self._cache) >= _MAX_CACHED:
            self._cache.clear()
        self._cache[token_hash] = (record, now)
        await self._note_use(record)
        return record

    async def _note_use(self, record: TokenRecord) -> None:
        """Keep 'last used' to the minute without a write per request."""
        wall = time.time()
        if record.last_used_at is None or wall - record.last_used_at >= _TOUCH_EVERY_SECONDS:
            await self._store.touch_token(record.token_id, wall)
