"""The storage protocol every backend implements, and the records that cross it.

Handlers and rules talk only to ``Store``; a backend never sees HTTP.
"""

from __future__ import annotations

import enum
from typing import Protocol

import msgspec

from .users import UserStore


class StoreOpenError(Exception):
    """The database cannot be used: unreachable, or set up to lose acknowledged writes."""


def describe_failure(exc: BaseException) -> str:
    """One line about a database failure: its kind and first line, never a DSN or stack."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


class CreateOutcome(enum.Enum):
    """What a create did: stored it, found the very same plant or a different one, or refused."""

    CREATED = "created"
    UNCHANGED = "unchanged"
    CONFLICT = "conflict"
    OVER_QUOTA = "over quota"  # new, and the user already holds the most plants allowed


class PlantRecord(msgspec.Struct, frozen=True, gc=False):
    """A plant as stored. A Struct, not a dataclass: a list reads ten of these per request,
    and a frozen dataclass's ``__init__`` cost 1.5 µs each against msgspec's 0.1 µs."""

    plant_id: int
    name: str
    tag: str | None


class TokenRecord(msgspec.Struct, frozen=True, gc=False):
    """A token as stored: everything but the secret."""

    token_id: int
    user: str
    user_id: int
    created_at: float
    expires_at: float | None
    last_used_at: float | None
    revoked_at: float | None
    label: str | None = None
    user_disabled_at: float | None = None  # the operator shut the user out (``user disable``)

    def usable_at(self, now: float) -> bool:
        """Tell whether the token may authenticate a request at wall-clock time ``now``."""
        if self.revoked_at is not None or self.user_disabled_at is not None:
            return False
        return self.expires_at is None or now < self.expires_at


class Store(UserStore, Protocol):
    """Plants, tokens and users (``users.UserStore``), with the durability promise: a write returns once it is synced."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Raise if the store cannot serve requests."""

    async def cursor_key(self) -> bytes:
        """Return the secret that signs paging cursors; the same across restarts."""

    async def create_plant(self, user_id: int, plant: PlantRecord) -> CreateOutcome: ...

    async def list_plants(
        self, user_id: int, after_id: int | None, limit: int
    ) -> list[PlantRecord]:
        """Return up to ``limit`` of the user's plants with id > ``after_id``, by id."""

    async def delete_plant(self, user_id: int, plant_id: int) -> bool:
        """Delete the user's plant; tell whether there was one."""

    async def find_token(self, token_hash: str) -> TokenRecord | None: ...

    async def touch_token(self, token_id: int, when: float) -> None:
        """Record a use of the token; best effort, not awaited for durability."""

    async def create_token(
        self, user: str, token_hash: str, expires_at: float | None, label: str | None = None
    ) -> TokenRecord: ...

    async def list_tokens(self, user: str | None) -> list[TokenRecord]: ...

    async def revoke_token(self, token_id: int) -> bool:
        """Revoke a token; tell whether it existed and was not revoked already."""

    async def create_first_token(self, user: str, token_hash: str) -> TokenRecord | None:
        """Create a token only if the database holds none at all (revoked ones count), as
        one atomic step, so that instances starting together issue one between them."""

    async def create_sandbox_user(
        self, name: str, token_hash: str, expires_at: float, max_plants: int, label: str
    ) -> TokenRecord:
        """Create a user with its own quota that expires at ``expires_at``, and its token."""

    async def purge_expired_users(self, before: float, max_rows: int) -> tuple[int, float]:
        """Delete at most ``max_rows`` rows of sandbox users expired before ``before`` (their
        plants, tokens, then the user); return how many (0 once none is left), and the seconds
        the step's statements took: how long it held SQLite's writer or its transaction."""
