"""Who is calling: the bearer token checked against the store, with a cache of looked-up tokens.

Expiry is checked on every request against the cached record. Revocation (and a disabled
user, a deleted or re-timed token) reaches the cache through the store's auth generation, a
counter that triggers move on every such change: at most every ``token_cache_seconds``
(≤ 1 s) a cache hit first reads it, and when it moved the whole cache is forgotten. So a
revoked token is refused within ``token_cache_seconds`` on every worker and instance, while a
token looked up once is not looked up again for ``CACHE_AGE_SECONDS``, however many callers
there are (forgetting every entry after half a second made nearly every request of a service
with many callers a lookup). The rate limits are spent here too: per token once it is known,
per address when it is not.

A JWT (told apart by its shape alone) is verified once and then cached like a ``pst_`` token,
under the SHA-256 of its header (a JWT is long; a digest keeps each entry small), until its
``exp``. When its entry ages out only its user is read again, so that disabling the user
takes effect as soon as for a ``pst_`` token, without verifying the signature again.
"""

from __future__ import annotations

import hashlib
import time

from starlette.requests import Request

from ..errors import InvalidToken
from ..http.ratelimit import RateLimits, client_address
from ..http.scope import USER_KEY, MalformedHeader, one_value
from .jwt.callers import JWT_TOKEN_ID, JwtCallers
from .store import TokenRecord, TokenStore
from .tokens import bearer_token, hash_token, is_jwt

_MAX_CACHED = 65_536
CACHE_AGE_SECONDS = 30.0  # a cached token is looked up again after this ('last used' moves)
# "Bearer pst_…" is 54 characters; any longer header is keyed by its digest.
_LONGEST_PLAIN_KEY = 64
_TOUCH_EVERY_SECONDS = 60.0


class Authenticator:
    """Turns an Authorization header into the caller's token record, or a 401 or 429."""

    def __init__(
        self,
        store: TokenStore,
        cache_seconds: float,
        limits: RateLimits,
        trusted_proxies: frozenset[str] = frozenset(),
        jwt: JwtCallers | None = None,
    ) -> None:
        self._store = store
        self._cache_seconds = cache_seconds
        # Authorization header (or its digest) -> (record, token hash, when it was read)
        self._cache: dict[str | bytes, tuple[TokenRecord, str, float]] = {}
        self._jwt = jwt
        self._limits = limits
        self._trusted_proxies = trusted_proxies
        self._generation: int | None = None  # the store's auth generation the cache is of
        self._next_check = 0.0  # monotonic: when a cache hit reads the generation again

    async def authenticate(self, request: Request) -> TokenRecord:
        """The caller's token record; a 401 when there is none, a 429 past a rate limit.

        The cache is keyed by the Authorization header as sent (a JWT's by its SHA-256), so
        a warm request neither parses it nor reads the store. An address out of failed
        authentications is refused before its token is looked up; a token found in the cache
        was good a moment ago, so it skips that check (and its cost on every request).
        """
        try:
            authorization = one_value(request.scope, request.headers, "authorization")
        except MalformedHeader as exc:  # sent twice, or not as text: a malformed token
            raise InvalidToken(str(exc)) from None
        known = self._known_caller(authorization)
        if known is None:
            known = await self._identify(request, authorization)
        record, token_hash = known
        request.scope[USER_KEY] = record.user_id  # for the access log
        # A request of the token's rate budget (a 429 once spent), keyed by the hash, not the
        # id: deployments sharing one Redis never share a budget.
        await self._limits.spend_token_request(token_hash)
        return record

    def _known_caller(self, authorization: str | None) -> tuple[TokenRecord, str] | None:
        """The caller's record and token hash when the cache alone can tell (a fresh entry,
        still usable, no check of the auth generation due): the fast path of every request
        of a known caller; None when ``authenticate`` has to do more."""
        cached = self._cache.get(_cache_key(authorization))
        if cached is None:
            return None
        now = time.monotonic()
        if now >= self._next_check or now - cached[2] >= CACHE_AGE_SECONDS:
            return None
        record = cached[0]
        return (record, cached[1]) if record.usable_at(time.time()) else None

    async def _identify(
        self, request: Request, authorization: str | None
    ) -> tuple[TokenRecord, str]:
        """What ``_known_caller`` could not tell: the generation checked when it is due, an
        aged JWT rechecked, a token looked up; a 401 when the caller is not let in."""
        cache_key = _cache_key(authorization)
        cached = self._cache.get(cache_key)
        now = 0.0
        if cached is not None:
            now = time.monotonic()
            if now >= self._next_check:
                await self._follow_changes(now)
                cached = self._cache.get(cache_key)
        if cached is not None and now - cached[2] < CACHE_AGE_SECONDS:
            if not cached[0].usable_at(time.time()):
                raise InvalidToken()
            return cached[0], cached[1]
        if cached is not None and cached[0].token_id == JWT_TOKEN_ID:
            return await self._recheck_jwt(cache_key, cached)
        return await self._look_up(request, authorization)

    async def _look_up(
        self, request: Request, authorization: str | None
    ) -> tuple[TokenRecord, str]:
        """The token's record from the store, and its hash; a 401 or 429 if refused."""
        token = bearer_token(authorization)
        token_hash = hash_token(token)
        # Only the canonical spelling is cached: the scheme's case and the spaces before the
        # token vary, and each variant would be an entry of its own.
        cache_key = _cache_key(authorization) if authorization == f"Bearer {token}" else None
        address = client_address(request.scope, self._trusted_proxies)
        await self._limits.check_address(address)
        if self._generation is None and cache_key is not None:
            await self._learn_generation()
        if is_jwt(token):
            record = await self._verify_jwt(cache_key, token, token_hash)
        else:
            record = await self._fetch(cache_key, token_hash)
        if record is None or not record.usable_at(time.time()):
            await self._limits.note_auth_failure(address)
            raise InvalidToken()
        return record, token_hash

    async def _verify_jwt(
        self, cache_key: str | bytes | None, token: str, token_hash: str
    ) -> TokenRecord | None:
        """The JWT's record, cached until its expiry; None if it is not valid."""
        if self._jwt is None:
            return None  # no provider configured: a JWT is just an unknown token
        try:
            record = await self._jwt.record_for(token)
        except InvalidToken:
            return None
        if cache_key is not None:
            self._remember(cache_key, record, token_hash)
        return record

    async def _recheck_jwt(
        self, cache_key: str | bytes, cached: tuple[TokenRecord, str, float]
    ) -> tuple[TokenRecord, str]:
        """A cached JWT whose entry aged out: its signature still holds; its user may not."""
        assert self._jwt is not None
        record = await self._jwt.recheck(cached[0])
        if not record.usable_at(time.time()):
            self._cache.pop(cache_key, None)
            raise InvalidToken()
        self._cache[cache_key] = (record, cached[1], time.monotonic())
        return record, cached[1]

    async def _learn_generation(self) -> None:
        """Read the store's auth generation before a lookup is cached under none known (at
        start, or after it could not be read). Otherwise the first check after start finds it
        "moved" from nothing and forgets every token looked up so far, and each is looked up
        again; a lookup made after this read is no older than the generation it is kept under."""
        try:
            generation = await self._store.auth_generation()
        except Exception:
            return  # the lookup that follows says what is wrong, if anything is
        self._generation = generation
        self._next_check = time.monotonic() + self._cache_seconds

    async def _follow_changes(self, now: float) -> None:
        """Forget every cached token if the store's auth generation moved since the cache was
        filled; if it cannot be read, forget them too (the lookup that follows says why)."""
        self._next_check = now + self._cache_seconds
        try:
            generation = await self._store.auth_generation()
        except Exception:
            self._cache.clear()
            self._generation, self._next_check = None, now
            return
        if generation != self._generation:
            self._cache.clear()
            self._generation = generation

    def _remember(self, cache_key: str | bytes, record: TokenRecord, token_hash: str) -> None:
        if len(self._cache) >= _MAX_CACHED:
            self._cache.clear()
        self._cache[cache_key] = (record, token_hash, time.monotonic())

    async def _fetch(self, cache_key: str | bytes | None, token_hash: str) -> TokenRecord | None:
        """The token's record from the store, cached under ``cache_key`` unless it is None."""
        record = await self._store.find_token(token_hash)
        if cache_key is not None:
            if record is None:
                self._cache.pop(cache_key, None)
            else:
                self._remember(cache_key, record, token_hash)
        if record is not None and record.usable_at(time.time()):
            await self._note_use(record)  # a refused token is not "used": it was not let in
        return record

    async def _note_use(self, record: TokenRecord) -> None:
        """Keep 'last used' to the minute without a write per request."""
        wall = time.time()
        if record.last_used_at is None or wall - record.last_used_at >= _TOUCH_EVERY_SECONDS:
            await self._store.touch_token(record.token_id, wall)


def _cache_key(authorization: str | None) -> str | bytes:
    """The header itself when short (``pst_``), else its SHA-256: a cached JWT costs 32 bytes
    of key, not the kilobyte or more of the token."""
    if authorization is None:
        return ""
    if len(authorization) <= _LONGEST_PLAIN_KEY:
        return authorization
    return hashlib.sha256(authorization.encode()).digest()
