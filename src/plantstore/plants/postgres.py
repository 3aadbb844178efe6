"""Plants on PostgreSQL, over the database's pool. Creates waiting at the same moment share
one transaction and one flush (``postgres_batch``): the quota trigger's row lock would
otherwise give each create of a user a flush of its own."""

from __future__ import annotations

import asyncpg

from ..db.postgres.pool import PostgresDatabase
from .postgres_batch import CreateBatcher
from .quota import QUOTA_SQLSTATE
from .store import CreateOutcome, PlantRecord

# One round trip: insert, or else read the row that was already there. A row committed by a
# racing create after this statement's snapshot is neither; ``_create_one`` reads again. The
# quota trigger (quota.py) reads the limit from a setting this statement makes for its
# own transaction ($5; '' for none): a pooler keeps that, where it drops a session's.
CREATE_PLANT = """
WITH quota AS (SELECT set_config('plantstore.max_plants_per_user', $5, true)),
inserted AS (
    INSERT INTO plants (user_id, id, name, tag) SELECT $1, $2, $3, $4 FROM quota
    ON CONFLICT (user_id, id) DO NOTHING
    RETURNING name, tag
)
SELECT true, name, tag FROM inserted
UNION ALL
SELECT false, name, tag FROM plants WHERE user_id = $1 AND id = $2
"""
FIND_PLANT = "SELECT false, name, tag FROM plants WHERE user_id = $1 AND id = $2"
LIST_FIRST = "SELECT id, name, tag FROM plants WHERE user_id = $1 ORDER BY id LIMIT $2"
LIST_AFTER = "SELECT id, name, tag FROM plants WHERE user_id = $1 AND id > $2 ORDER BY id LIMIT $3"
DELETE_PLANT = "DELETE FROM plants WHERE user_id = $1 AND id = $2"


class PostgresPlants:
    def __init__(self, database: PostgresDatabase, max_plants_per_user: int | None) -> None:
        self._database = database
        self._connection = database.connection
        # The limit as the quota trigger reads it ('' for none), set by each create.
        self._quota = "" if max_plants_per_user is None else str(max_plants_per_user)
        self._creates = CreateBatcher(
            database.connection, self._create_one, database.budget, self._quota
        )

    async def cursor_key(self) -> bytes:
        (value,) = await self._database.fetchrow(
            "SELECT value FROM secrets WHERE name = 'cursor_key'"
        )
        return bytes.fromhex(value)

    async def create_plant(self, user_id: int, plant: PlantRecord) -> CreateOutcome:
        """Creates waiting together share one transaction (``postgres_batch``)."""
        return await self._creates.create(user_id, plant)

    async def _create_one(self, user_id: int, plant: PlantRecord) -> CreateOutcome:
        args = (user_id, plant.plant_id, plant.name, plant.tag)
        try:
            async with self._connection() as connection:
                row = await connection.fetchrow(CREATE_PLANT, *args, self._quota)
                while row is None:  # a racing create committed after our snapshot was taken
                    row = await connection.fetchrow(FIND_PLANT, user_id, plant.plant_id)
                    if row is None:  # ...and was deleted again: try the insert once more
                        row = await connection.fetchrow(CREATE_PLANT, *args, self._quota)
        except asyncpg.PostgresError as exc:
            if exc.sqlstate == QUOTA_SQLSTATE:
                return CreateOutcome.OVER_QUOTA
            raise
        created, name, tag = row
        if created:
            return CreateOutcome.CREATED
        same = name == plant.name and tag == plant.tag
        return CreateOutcome.UNCHANGED if same else CreateOutcome.CONFLICT

    async def list_plants(
        self, user_id: int, after_id: int | None, limit: int
    ) -> list[PlantRecord]:
        async with self._connection() as connection:
            if after_id is None:
                rows = await connection.fetch(LIST_FIRST, user_id, limit)
            else:
                rows = await connection.fetch(LIST_AFTER, user_id, after_id, limit)
        return [PlantRecord(row[0], row[1], row[2]) for row in rows]

    async def delete_plant(self, user_id: int, plant_id: int) -> bool:
        async with self._connection() as connection:
            status = await connection.execute(DELETE_PLANT, user_id, plant_id)
        return status == "DELETE 1"
