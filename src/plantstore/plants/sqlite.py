"""Plants on SQLite: reads on the database's reader connection, writes through its
group-commit writer (the writer is alone, so a quota it reads cannot change under it)."""

from __future__ import annotations

import sqlite3
from itertools import starmap

from ..db.sqlite.database import SQLiteDatabase, unavailable_if_environment
from ..db.sqlite.ops import WriteOp
from .store import CreateOutcome, PlantRecord

_LIST_FIRST = "SELECT id, name, tag FROM plants WHERE user_id = ? ORDER BY id LIMIT ?"
_LIST_AFTER = "SELECT id, name, tag FROM plants WHERE user_id = ? AND id > ? ORDER BY id LIMIT ?"


class SQLitePlants:
    def __init__(self, database: SQLiteDatabase, max_plants_per_user: int | None = None) -> None:
        self._database = database
        self._writer = database.writer
        self._max_plants = max_plants_per_user

    async def cursor_key(self) -> bytes:
        row = self._database.read("SELECT value FROM secrets WHERE name = 'cursor_key'").fetchone()
        return bytes.fromhex(row[0])

    async def create_plant(self, user_id: int, plant: PlantRecord) -> CreateOutcome:
        return await self._writer.submit(CREATE_PLANT, user_id, plant, self._max_plants)

    async def list_plants(
        self, user_id: int, after_id: int | None, limit: int
    ) -> list[PlantRecord]:
        reader = self._database.reader
        try:
            if after_id is None:
                rows = reader.execute(_LIST_FIRST, (user_id, limit))
            else:
                rows = reader.execute(_LIST_AFTER, (user_id, after_id, limit))
            return list(starmap(PlantRecord, rows))
        except sqlite3.Error as exc:
            raise unavailable_if_environment(exc) from exc

    async def delete_plant(self, user_id: int, plant_id: int) -> bool:
        return await self._writer.submit(DELETE_PLANT, user_id, plant_id)


def _create_plant(
    conn: sqlite3.Connection, user_id: int, plant: PlantRecord, max_plants: int | None
) -> CreateOutcome:
    """Insert unless the plant exists or the user is at the quota (the writer is alone, so
    the count it reads cannot change before the insert)."""
    held, own_quota = _plant_count(conn, user_id)
    quota = max_plants if own_quota is None else own_quota
    if quota is None or held < quota:
        inserted = conn.execute(
            "INSERT INTO plants (user_id, id, name, tag) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (user_id, id) DO NOTHING",
            (user_id, plant.plant_id, plant.name, plant.tag),
        ).rowcount
        if inserted == 1:
            return CreateOutcome.CREATED
    existing = conn.execute(
        "SELECT name, tag FROM plants WHERE user_id = ? AND id = ?", (user_id, plant.plant_id)
    ).fetchone()
    if existing is None:
        return CreateOutcome.OVER_QUOTA
    name, tag = existing
    same = name == plant.name and tag == plant.tag
    return CreateOutcome.UNCHANGED if same else CreateOutcome.CONFLICT


def _delete_plant(conn: sqlite3.Connection, user_id: int, plant_id: int) -> bool:
    return (
        conn.execute(
            "DELETE FROM plants WHERE user_id = ? AND id = ?", (user_id, plant_id)
        ).rowcount
        == 1
    )


def _plant_count(conn: sqlite3.Connection, user_id: int) -> tuple[int, int | None]:
    """The user's plants, and its own quota (None: the global one applies)."""
    row = conn.execute(
        "SELECT plant_count, max_plants FROM users WHERE id = ?", (user_id,)
    ).fetchone()
    return (0, None) if row is None else (int(row[0]), row[1])


CREATE_PLANT = WriteOp(_create_plant, one_write=True)
DELETE_PLANT = WriteOp(_delete_plant, one_write=True)
