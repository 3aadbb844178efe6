"""What the token and user store keeps and promises, whatever the backend: ``TokenStore``
and the records that cross it (``backends.token_store_for`` picks the backend's store).

A user lives in a namespace: ``issuer`` is ``""`` for the users an operator names in
``token create``, and a JWT issuer's URL for the users its tokens name. The same name in two
namespaces is two users who never see each other's plants. Tokens are stored only as the
SHA-256 of their secret.
"""

from __future__ import annotations

from typing import Protocol

import msgspec

OPERATOR = ""  # the namespace of operator-created users
# The calls on a request's path, whose durations the app observes as metrics.
TIMED_OPERATIONS = ("find_token",)


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
    own_quota: int | None = None  # the user's own plant quota (a sandbox user's); None: global

    def usable_at(self, now: float) -> bool:
        """Tell whether the token may authenticate a request at wall-clock time ``now``."""
        if self.revoked_at is not None or self.user_disabled_at is not None:
            return False
        return self.expires_at is None or now < self.expires_at


class UserRecord(msgspec.Struct, frozen=True, gc=False):
    """A user as stored, with what ``user list`` shows about it."""

    user_id: int
    name: str
    issuer: str
    created_at: float
    disabled_at: float | None
    plant_count: int = 0
    active_tokens: int = 0  # operator tokens neither revoked nor expired
    sandbox_expires_at: float | None = None  # a user POST /sandbox/tokens made, not the operator

    @property
    def from_provider(self) -> bool:
        return self.issuer != OPERATOR


class TokenStore(Protocol):
    """Tokens and users; every write returns once it is durable."""

    async def find_token(self, token_hash: str) -> TokenRecord | None: ...
    async def auth_generation(self) -> int:
        """A counter that moves whenever a token or a user changes in a way a cache of
        looked-up tokens must not miss (migration 0010's triggers)."""
        ...

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
