"""Sandbox mode's rules: a docs visitor gets a token for a fresh user of its own, with a small
quota, that expires; once it has, the user and everything it owns are deleted (``purge``).

The issuance limit is a budget like the rate limits' (shared through Redis when
``PLANTSTORE_REDIS_URL`` is set), spent before anything is written. No SQL here (each
backend has its sandbox module).
"""

from __future__ import annotations

import secrets
import time

import msgspec
from starlette.requests import Request

from ..auth.tokens import hash_token, new_token
from ..errors import TooManyRequests
from ..formats import rfc3339
from ..http.ratelimit import Budget, SharedBudget, client_address, retry_after, standalone_budget
from ..settings import Settings
from .store import SandboxStore

LABEL = "sandbox"  # the label 'plantstore token list' shows for these tokens
_NAME_PREFIX = "sandbox-"


class SandboxToken(msgspec.Struct):
    """What POST /sandbox/tokens answers."""

    token: str
    expires_at: str  # RFC 3339, UTC


async def issue_sandbox_token(
    store: SandboxStore, ttl_seconds: int, max_plants: int
) -> SandboxToken:
    """Create a fresh sandbox user with its own quota and expiry; return its one token."""
    token = new_token()
    expires_at = time.time() + ttl_seconds
    name = _NAME_PREFIX + secrets.token_hex(12)  # never a name an operator would choose
    await store.create_sandbox_user(name, hash_token(token), expires_at, max_plants, LABEL)
    return SandboxToken(token=token, expires_at=rfc3339(expires_at))


class SandboxIssuer:
    """Issues sandbox tokens within each client address's budget."""

    def __init__(self, store: SandboxStore, settings: Settings) -> None:
        self._store = store
        self._ttl = settings.sandbox_ttl_seconds
        self._max_plants = settings.sandbox_max_plants
        self._trusted_proxies = settings.trusted_proxy_addresses
        self._budget: Budget | SharedBudget | None = standalone_budget(
            settings.sandbox_issue_limit, settings.redis_url, "sandbox-issue"
        )

    async def issue(self, request: Request) -> SandboxToken:
        """A fresh token; a 429 once the caller's address has had its tokens."""
        if self._budget is not None:
            address = client_address(request.scope, self._trusted_proxies)
            if wait := await self._budget.spend(address):
                raise TooManyRequests(
                    "too many sandbox tokens from this address; retry later", retry_after(wait)
                )
        return await issue_sandbox_token(self._store, self._ttl, self._max_plants)
