"""Sandbox mode's rules: a docs visitor gets a token for a fresh user of its own, with a small
quota, that expires; once it has, the user and everything it owns are deleted (``purge``).

The issuance limit (``PLANTSTORE_SANDBOX_ISSUE_LIMIT``) is counted where the tokens are: each
issue is a row in the database under a keyed hash of the client address (never the address
itself), counted and written in the token's own transaction, so one budget holds across
workers, restarts and instances, with or without Redis. No SQL here (each backend has its
sandbox module).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

import msgspec
from starlette.requests import Request

from ..auth.tokens import hash_token, new_token
from ..errors import TooManyRequests
from ..formats import rfc3339
from ..http.ratelimit import client_address, retry_after
from ..settings import Settings, parse_rate
from .store import IssueBudget, SandboxStore

LABEL = "sandbox"  # the label 'plantstore token list' shows for these tokens
_NAME_PREFIX = "sandbox-"


class SandboxToken(msgspec.Struct):
    """What POST /sandbox/tokens answers."""

    token: str
    expires_at: str  # RFC 3339, UTC


async def issue_sandbox_token(
    store: SandboxStore, ttl_seconds: int, max_plants: int, budget: IssueBudget | None = None
) -> SandboxToken | float:
    """Create a fresh sandbox user with its own quota and expiry and return its one token; or,
    past ``budget``, nothing, and the seconds until the address may have another."""
    token = new_token()
    expires_at = time.time() + ttl_seconds
    name = _NAME_PREFIX + secrets.token_hex(12)  # never a name an operator would choose
    issued = await store.issue_sandbox_user(
        name, hash_token(token), expires_at, max_plants, LABEL, budget
    )
    if isinstance(issued, float):
        return issued
    return SandboxToken(token=token, expires_at=rfc3339(expires_at))


def issue_window_seconds(settings: Settings) -> float:
    """How long an issue counts against its address (0 with the limit off)."""
    item = parse_rate(settings.sandbox_issue_limit)
    return 0.0 if item is None else float(item.get_expiry())


class SandboxIssuer:
    """Issues sandbox tokens within each client address's budget."""

    def __init__(self, store: SandboxStore, settings: Settings, address_key: bytes) -> None:
        self._store = store
        self._ttl = settings.sandbox_ttl_seconds
        self._max_plants = settings.sandbox_max_plants
        self._trusted_proxies = settings.trusted_proxy_addresses
        self._limit = parse_rate(settings.sandbox_issue_limit)
        self._keyed = hmac.new(address_key, digestmod=hashlib.sha256)

    async def issue(self, request: Request) -> SandboxToken:
        """A fresh token; a 429 once the caller's address has had its tokens."""
        issued = await issue_sandbox_token(
            self._store, self._ttl, self._max_plants, self._budget_of(request)
        )
        if isinstance(issued, float):
            raise TooManyRequests(
                "too many sandbox tokens from this address; retry later", retry_after(issued)
            )
        return issued

    def _budget_of(self, request: Request) -> IssueBudget | None:
        if self._limit is None:
            return None
        address = client_address(request.scope, self._trusted_proxies)
        keyed = self._keyed.copy()
        keyed.update(address.encode())
        window = float(self._limit.get_expiry())
        return IssueBudget(keyed.hexdigest(), time.time(), window, self._limit.amount)
