"""JWT callers: a verified token turned into the caller's record, its user made on first sight.

The record has the shape of a ``pst_`` token's (``TokenRecord``), so handlers, quotas, rate
limits and webhooks treat both alike; ``token_id`` is ``JWT_TOKEN_ID``, which no stored token
has. The user lives in the issuer's namespace (``auth.store``), never the operator's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ...errors import InvalidToken
from ...settings import Settings
from ..store import TokenRecord, TokenStore

if TYPE_CHECKING:
    from .jwks import JwksCache

JWT_TOKEN_ID = 0  # stored tokens are numbered from 1


class JwtCallers:
    """Verifies JWTs and finds (or creates) their users; owns the JWKS cache's lifetime."""

    def __init__(self, settings: Settings, store: TokenStore) -> None:
        assert settings.jwt_jwks_url is not None
        assert settings.jwt_issuer is not None
        assert settings.jwt_audience is not None
        # Imported here: the JOSE library, cryptography and aiohttp load only in services that
        # take JWTs (megabytes of every worker otherwise).
        from .jwks import JwksCache
        from .verifier import JwtVerifier

        self._store = store
        self._issuer = settings.jwt_issuer
        self.keys: JwksCache = JwksCache(settings.jwt_jwks_url, settings.jwt_jwks_cache_seconds)
        self._verifier = JwtVerifier(
            self.keys,
            issuer=settings.jwt_issuer,
            audience=settings.jwt_audience,
            algorithms=settings.jwt_algorithm_list,
            user_claim=settings.jwt_user_claim,
        )

    async def start(self) -> None:
        await self.keys.start()

    async def close(self) -> None:
        await self.keys.close()

    async def record_for(self, token: str) -> TokenRecord:
        """The caller's record for a JWT; a 401 unless valid and its user enabled."""
        verified = await self._verifier.verify(token)
        user = await self._store.find_user(self._issuer, verified.user)
        if user is None:  # first sight: a durable, race-safe create
            user = await self._store.create_user(self._issuer, verified.user)
        if user.disabled_at is not None:
            raise InvalidToken()
        return TokenRecord(
            token_id=JWT_TOKEN_ID,
            user=user.name,
            user_id=user.user_id,
            created_at=verified.issued_at,
            expires_at=verified.usable_until,
            last_used_at=None,
            revoked_at=None,
        )

    async def recheck(self, record: TokenRecord) -> TokenRecord:
        """The record with its user's current state (an operator may have disabled it)."""
        disabled_at = await self._store.user_disabled_at(record.user_id)
        if disabled_at is None:
            return record
        return msgspec.structs.replace(record, user_disabled_at=disabled_at)


def jwt_callers(settings: Settings, store: TokenStore) -> JwtCallers | None:
    """The JWT side of authentication, when a provider is configured."""
    return JwtCallers(settings, store) if settings.jwt_enabled else None
