"""What the sandbox store does, whatever the backend (``backends.sandbox_store_for`` picks it)."""

from __future__ import annotations

from typing import Protocol

import msgspec

from ..auth.store import TokenRecord


class IssueBudget(msgspec.Struct, frozen=True):
    """An address's issuance budget: at most ``limit`` tokens in any ``window`` seconds,
    counted in the database under ``address_key`` (a keyed hash of the address)."""

    address_key: str
    now: float
    window: float
    limit: int


class SandboxStore(Protocol):
    async def address_key(self) -> bytes:
        """The secret the client addresses are hashed with; the same across restarts."""

    async def issue_sandbox_user(
        self,
        name: str,
        token_hash: str,
        expires_at: float,
        max_plants: int,
        label: str,
        budget: IssueBudget | None,
    ) -> TokenRecord | float:
        """Within ``budget`` (counted and spent in the same transaction, so racing workers
        and instances spend one budget), create a user with its own quota that expires at
        ``expires_at``, and its token; past it, create nothing and return the seconds until
        the address may have another."""

    async def forget_issues(self, before: float, max_rows: int) -> int:
        """Delete at most ``max_rows`` issuance rows older than ``before``; return how many."""

    async def purge_expired_users(self, before: float, max_rows: int) -> tuple[int, float]:
        """Delete at most ``max_rows`` rows of sandbox users expired before ``before`` (their
        plants, tokens, then the user); return how many (0 once none is left), and the seconds
        the step's statements took: how long it held SQLite's writer or its transaction."""
