"""Rate limits: requests per token, and failed authentications per client address.

Both use the ``limits`` library's fixed windows, kept in this process by default, or in Redis
when ``PLANTSTORE_REDIS_URL`` is set so that every instance spends the same budget. An address
that has failed authentication too often is refused (429) before its token is even looked
up, so tokens cannot be guessed quickly; requests with a good token never count against it.
If Redis cannot be reached the limits are not enforced (logged): they protect the service,
and must not take it down.
"""

from __future__ import annotations

import logging
import math
import time

from limits import RateLimitItem
from limits.aio.strategies import FixedWindowRateLimiter
from limits.storage import storage_from_string
from starlette.types import Scope

from ..errors import TooManyRequests
from ..settings import parse_rate

log = logging.getLogger(__name__)
_WARN_EVERY_SECONDS = 5.0


def client_address(scope: Scope, trusted_proxies: frozenset[str]) -> str:
    """The caller's address; behind a trusted proxy, the last hop its X-Forwarded-For names."""
    peer = scope.get("client")
    address: str = peer[0] if peer else "unknown"
    if address in trusted_proxies:
        for name, value in scope["headers"]:
            if name == b"x-forwarded-for":
                address = value.decode("latin-1").rsplit(",", 1)[-1].strip() or address
    return address


class RateLimits:
    """The two budgets a request may spend; a check raises a 429 when one is used up."""

    def __init__(self, per_token: str, auth_failures: str, redis_url: str | None) -> None:
        uri = "async+memory://" if not redis_url else f"async+{redis_url.removeprefix('async+')}"
        self._limiter = FixedWindowRateLimiter(storage_from_string(uri))
        self._per_token = parse_rate(per_token)
        self._auth_failures = parse_rate(auth_failures)
        self._last_warning = -math.inf

    async def spend_token_request(self, token_hash: str) -> None:
        if self._per_token is not None and not await self._hit(
            self._per_token, "token", token_hash
        ):
            retry_after = await self._retry_after(self._per_token, "token", token_hash)
            raise TooManyRequests("too many requests with this token; slow down", retry_after)

    async def check_address(self, address: str) -> None:
        """Refuse an address that has used up its failed authentications."""
        if self._auth_failures is None:
            return
        try:
            allowed = await self._limiter.test(self._auth_failures, "auth-failure", address)
        except Exception as exc:  # any storage failure: fail open, and say so
            self._warn(exc)
            return
        if not allowed:
            retry_after = await self._retry_after(self._auth_failures, "auth-failure", address)
            raise TooManyRequests("too many failed authentications from this address", retry_after)

    async def note_auth_failure(self, address: str) -> None:
        if self._auth_failures is not None:
            await self._hit(self._auth_failures, "auth-failure", address)

    async def _hit(self, item: RateLimitItem, kind: str, key: object) -> bool:
        try:
            return await self._limiter.hit(item, kind, str(key))
        except Exception as exc:  # any storage failure: fail open, and say so
            self._warn(exc)
            return True

    async def _retry_after(self, item: RateLimitItem, kind: str, key: object) -> int:
        try:
            stats = await self._limiter.get_window_stats(item, kind, str(key))
        except Exception:  # the window cannot be read: a second is a fair guess
            return 1
        return max(1, math.ceil(stats.reset_time - time.time()))

    def _warn(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._last_warning >= _WARN_EVERY_SECONDS:
            self._last_warning = now
            log.warning("rate limits not enforced: their store failed (%s)", type(exc).__name__)
