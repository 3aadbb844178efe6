"""The rules of the plant collection: idempotent creates, and keyset pages with signed cursors
(``cursors.py``)."""

from __future__ import annotations

from typing import NamedTuple

from msgspec import UnsetType

from ..errors import Conflict, QuotaExceeded
from .cursors import CursorCodec
from .schemas import NewPlant, Plant
from .store import CreateOutcome, PlantRecord, PlantStore


class Page(NamedTuple):
    """A page of plants: a tuple, made faster than a frozen dataclass (no ``object.__setattr__``)."""

    plants: list[Plant]
    next_cursor: str | None


def to_plant(record: PlantRecord) -> Plant:
    return Plant(record.name) if record.tag is None else Plant(record.name, record.tag)


async def create_plant(store: PlantStore, user_id: int, new_plant: NewPlant, quota: int) -> Plant:
    """Store the plant; a repeat of the very same plant is a no-op, a different one a 409, and
    one more than ``quota`` (the user's, which the store enforces) a 403 that names it."""
    tag = None if isinstance(new_plant.tag, UnsetType) else new_plant.tag
    record = PlantRecord(new_plant.id, new_plant.name, tag)
    outcome = await store.create_plant(user_id, record)
    if outcome is CreateOutcome.OVER_QUOTA:
        raise QuotaExceeded(
            f"you already hold {quota:,} plants, the most a user may (the per-user quota); "
            "delete some first"
        )
    if outcome is CreateOutcome.CONFLICT:
        raise Conflict(
            f"a plant with id {new_plant.id} already exists with a different name or tag"
        )
    return to_plant(record)


async def list_page(
    store: PlantStore, codec: CursorCodec, user_id: int, limit: int, cursor: str | None
) -> Page:
    """Return up to ``limit`` plants after the cursor, and a cursor if more remain."""
    after_id = None if cursor is None else codec.decode(user_id, cursor)
    if limit == 0:
        return Page([], None)
    records = await store.list_plants(user_id, after_id, limit + 1)
    more = len(records) > limit
    records = records[:limit]
    next_cursor = codec.encode(user_id, records[-1].plant_id) if more else None
    # to_plant, inline: a call for each of the page's plants costs more than its work
    plants = [Plant(r.name) if r.tag is None else Plant(r.name, r.tag) for r in records]
    return Page(plants, next_cursor)
