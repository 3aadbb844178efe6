"""Who is calling: the bearer token checked against the store, with a one-second cache.

Expiry is checked on every request against the cached record; revocation reaches a cached
token when its entry ages out, at most ``token_cache_seconds`` (≤ 1 s) later. The rate
limits are spent here too: per token once it is known, per address when it is not.
"""

from __future__ import annotations

import time

from starlette.requests import Request

from ..errors import InvalidToken
from ..store import Store, TokenRecord
from ..tokens import bearer_token, hash_token
from .observe import USER_KEY
from .ratelimit import RateLimits, client_address

_MAX_CACHED = 10_000
_TOUCH_EVERY_SECONDS = 60.0


class Authenticator:
    """Turns an Authorization header into the caller's token record, or a 401 or 429."""

    def __init__(
        self,
        store: Store,
        cache_seconds: float,
        limits: RateLimits,
        trusted_proxies: frozenset[str] = frozenset(),
    ) -> None:
        self._store = store
        self._cache_seconds = cache_seconds
        # Authorization header -> (record, token hash, when it was read from the store)
        self._cache: dict[str, tuple[TokenRecord, str, float]] = {}
        self._limits = limits
        self._trusted_proxies = trusted_proxies

    async def authenticate(self, request: Request) -> TokenRecord:
        """The caller's token record; a 401 when there is none, a 429 past a rate limit.

        The cache is keyed by the Authorization header as sent, so a warm request neither
        parses nor hashes it. An address out of failed authentications is refused before its
        token is looked up; a token found in the cache was good a moment ago, so it skips
        that check (and its cost on every request).
        """
        authorization = request.headers.get("authorization")
        cached = self._cache.get(authorization or "")
        if cached is not None and time.monotonic() - cached[2] < self._cache_seconds:
            record, token_hash = cached[0], cached[1]
            if not record.usable_at(time.time()):
                raise InvalidToken()
        else:
            record, token_hash = await self._look_up(request, authorization)
        request.scope[USER_KEY] = record.user_id  # for the access log
        # Keyed by the hash, not the id: deployments sharing one Redis never share a budget.
        await self._limits.spend_token_request(token_hash)
        return record

    async def _look_up(
        self, request: Request, authorization: str | None
    ) -> tuple[TokenRecord, str]:
        """The token's record from the store, and its hash; a 401 or 429 if refused."""
        token = bearer_token(authorization)
        token_hash = hash_token(token)
        # Only the canonical spelling is cached: the scheme's case and the spaces before the
        # token vary, and each variant would be an entry of its own.
        cache_key = authorization if authorization == f"Bearer {token}" else None
        address = client_address(request.scope, self._trusted_proxies)
        await self._limits.check_address(address)
        record = await self._fetch(cache_key, token_hash)
        if record is None or not record.usable_at(time.time()):
            await self._limits.note_auth_failure(address)
            raise InvalidToken()
        return record, token_hash

    async def _fetch(self, cache_key: str | None, token_hash: str) -> TokenRecord | None:
        """The token's record from the store, cached under ``cache_key`` unless it is None."""
        record = await self._store.find_token(token_hash)
        if cache_key is not None:
            if record is None:
                self._cache.pop(cache_key, None)
            else:
                if len(self._cache) >= _MAX_CACHED:
                    self._cache.clear()
                self._cache[cache_key] = (record, token_hash, time.monotonic())
        if record is not None:
            await self._note_use(record)
        return record

    async def _note_use(self, record: TokenRecord) -> None:
        """Keep 'last used' to the minute without a write per request."""
        wall = time.time()
        if record.last_used_at is None or wall - record.last_used_at >= _TOUCH_EVERY_SECONDS:
            await self._store.touch_token(record.token_id, wall)
