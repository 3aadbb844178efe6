"""Sandbox mode's rules: a docs visitor gets a token for a fresh user of its own, with a small
quota, that expires; once it has, the user and everything it owns are deleted.

No HTTP here (``api/sandbox.py`` serves it) and no SQL (each store has its sandbox module).
"""

from __future__ import annotations

import secrets
import time

import msgspec

from .store import Store
from .times import rfc3339
from .tokens import hash_token, new_token

LABEL = "sandbox"  # the label 'plantstore token list' shows for these tokens
_NAME_PREFIX = "sandbox-"


class SandboxToken(msgspec.Struct):
    """What POST /sandbox/tokens answers."""

    token: str
    expires_at: str  # RFC 3339, UTC


async def issue_sandbox_token(store: Store, ttl_seconds: int, max_plants: int) -> SandboxToken:
    """Create a fresh sandbox user with its own quota and expiry; return its one token."""
    token = new_token()
    expires_at = time.time() + ttl_seconds
    name = _NAME_PREFIX + secrets.token_hex(12)  # never a name an operator would choose
    await store.create_sandbox_user(name, hash_token(token), expires_at, max_plants, LABEL)
    return SandboxToken(token=token, expires_at=rfc3339(expires_at))
