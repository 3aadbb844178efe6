"""What the sandbox store does, whatever the backend (``backends.sandbox_store_for`` picks it)."""

from __future__ import annotations

from typing import Protocol

from ..auth.store import TokenRecord


class SandboxStore(Protocol):
    async def create_sandbox_user(
        self, name: str, token_hash: str, expires_at: float, max_plants: int, label: str
    ) -> TokenRecord:
        """Create a user with its own quota that expires at ``expires_at``, and its token."""

    async def purge_expired_users(self, before: float, max_rows: int) -> tuple[int, float]:
        """Delete at most ``max_rows`` rows of sandbox users expired before ``before`` (their
        plants, tokens, then the user); return how many (0 once none is left), and the seconds
        the step's statements took: how long it held SQLite's writer or its transaction."""
