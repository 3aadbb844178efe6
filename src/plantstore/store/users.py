"""Users as the operator sees them, and the store methods for identity-provider users.

A user lives in a namespace: ``issuer`` is ``""`` for the users an operator names in
``token create``, and a JWT issuer's URL for the users its tokens name. The same name in two
namespaces is two users who never see each other's plants.
"""

from __future__ import annotations

from typing import Protocol

import msgspec

OPERATOR = ""  # the namespace of operator-created users


class UserRecord(msgspec.Struct, frozen=True, gc=False):
    """A user as stored, with what ``user list`` shows about it."""

    user_id: int
    name: str
    issuer: str
    created_at: float
    disabled_at: float | None
    plant_count: int = 0
    active_tokens: int = 0  # operator tokens neither revoked nor expired

    @property
    def from_provider(self) -> bool:
        return self.issuer != OPERATOR


class UserStore(Protocol):
    async def find_user(self, issuer: str, name: str) -> UserRecord | None:
        """The user ``name`` of namespace ``issuer``, if it exists."""

    async def create_user(self, issuer: str, name: str) -> UserRecord:
        """Create the user unless it exists (racing creators all get the one row), and
        return it; the write is durable when this returns."""

    async def user_disabled_at(self, user_id: int) -> float | None:
        """When the user was disabled; None while it may use the service (or is gone)."""

    async def list_users(self, issuer: str | None = None) -> list[UserRecord]:
        """Every user (of one namespace, if given), by id."""

    async def set_user_disabled(self, user_id: int, disabled: bool) -> bool:
        """Disable or enable a user; tell whether that changed anything."""
