"""Which plant store serves a database: the SQLite one or the PostgreSQL one."""

from __future__ import annotations

from ..db import Database, SQLiteDatabase
from .postgres import PostgresPlants
from .sqlite import SQLitePlants
from .store import PlantStore


def plant_store_for(database: Database, max_plants_per_user: int | None = None) -> PlantStore:
    """The plant store on ``database`` (opened by its owner, who also closes it).

    On SQLite the quota is checked by the one writer; on PostgreSQL by a trigger
    (``quota.py``), reading the limit each create sets for its own transaction.
    """
    if isinstance(database, SQLiteDatabase):
        return SQLitePlants(database, max_plants_per_user)
    return PostgresPlants(database, max_plants_per_user)
