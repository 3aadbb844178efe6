"""What the plant store keeps and promises, whatever the backend: ``PlantStore`` and the
records that cross it (``backends.plant_store_for`` picks the backend's store).

Handlers and rules talk only to ``PlantStore``; a store never sees HTTP. A write returns once
it is durable (fsynced on SQLite, flushed by PostgreSQL's commit).
"""

from __future__ import annotations

import enum
from typing import Protocol

import msgspec

# The calls on a request's path, whose durations the app observes as metrics.
TIMED_OPERATIONS = ("create_plant", "list_plants", "delete_plant")


class CreateOutcome(enum.Enum):
    """What a create did: stored it, found the very same plant or a different one, or refused."""

    CREATED = "created"
    UNCHANGED = "unchanged"
    CONFLICT = "conflict"
    OVER_QUOTA = "over quota"  # new, and the user already holds the most plants allowed


class PlantRecord(msgspec.Struct, frozen=True, gc=False):
    """A plant as stored. A Struct, not a dataclass: a list reads ten of these per request,
    and a frozen dataclass's ``__init__`` costs many times msgspec's."""

    plant_id: int
    name: str
    tag: str | None


class PlantStore(Protocol):
    async def cursor_key(self) -> bytes:
        """Return the secret that signs paging cursors; the same across restarts."""

    async def create_plant(self, user_id: int, plant: PlantRecord) -> CreateOutcome: ...

    async def list_plants(
        self, user_id: int, after_id: int | None, limit: int
    ) -> list[PlantRecord]:
        """Return up to ``limit`` of the user's plants with id > ``after_id``, by id."""

    async def delete_plant(self, user_id: int, plant_id: int) -> bool:
        """Delete the user's plant; tell whether there was one."""
