"""Peer (a'): FastAPI + pydantic v2 + aiosqlite, the async SQLite driver FastAPI users reach for.

As ``fastapi_sqlite.py`` (``async def`` endpoints, ``HTTPBearer``, one connection for the
process opened in the lifespan, WAL with ``synchronous=FULL``), but every query is awaited
on aiosqlite's thread, so the event loop never blocks on SQLite or its fsync. ``make bench``
times the faster of the two as its FastAPI peer (bench/README.md says which).

    PEER_DATABASE=plants.db PEER_TOKEN=secret uvicorn fastapi_aiosqlite:app --workers 1
"""

# FastAPI lives in this peer's own venv, not the project's: mypy sees its names as Any.
# mypy: allow-untyped-decorators

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import aiosqlite  # type: ignore[import-not-found]
from fastapi import Depends, FastAPI, HTTPException, Query, Response  # type: ignore[import-not-found]
from fastapi.security import (  # type: ignore[import-not-found]
    HTTPAuthorizationCredentials,
    HTTPBearer,
)
from pydantic import BaseModel

DATABASE = os.environ.get("PEER_DATABASE", "plants.db")
SCHEMA = """
CREATE TABLE IF NOT EXISTS users (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS tokens (
    token_hash TEXT PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users (id)
);
CREATE TABLE IF NOT EXISTS plants (
    user_id INTEGER NOT NULL REFERENCES users (id),
    id INTEGER NOT NULL,
    name TEXT NOT NULL,
    tag TEXT,
    PRIMARY KEY (user_id, id)
);
"""


class NewPlant(BaseModel):
    id: int
    name: str
    tag: str | None = None


class Plant(BaseModel):
    name: str
    tag: str | None = None


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


db: aiosqlite.Connection | None = None  # the process's one connection, opened in the lifespan


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Create the tables, and register the operator's token (PEER_TOKEN) for user 'bench'."""
    global db
    db = await aiosqlite.connect(DATABASE, timeout=5, isolation_level=None)
    await db.execute("PRAGMA journal_mode = WAL")
    await db.execute("PRAGMA synchronous = FULL")
    await db.executescript(SCHEMA)
    if token := os.environ.get("PEER_TOKEN"):
        await db.execute("INSERT OR IGNORE INTO users (name) VALUES ('bench')")
        await db.execute(
            "INSERT OR IGNORE INTO tokens SELECT ?, id FROM users WHERE name = 'bench'",
            (hash_token(token),),
        )
    yield
    await db.close()


app = FastAPI(title="plants", lifespan=lifespan)
bearer = HTTPBearer()


async def get_db() -> aiosqlite.Connection:
    assert db is not None
    return db


Db = Annotated[aiosqlite.Connection, Depends(get_db)]


async def current_user(
    credentials: Annotated[HTTPAuthorizationCredentials, Depends(bearer)], db: Db
) -> int:
    async with db.execute(
        "SELECT user_id FROM tokens WHERE token_hash = ?", (hash_token(credentials.credentials),)
    ) as cursor:
        row = await cursor.fetchone()
    if row is None:
        raise HTTPException(401, "invalid token", headers={"WWW-Authenticate": "Bearer"})
    return int(row[0])


UserId = Annotated[int, Depends(current_user)]


@app.post("/plants", response_model=Plant, response_model_exclude_none=True)
async def create_plant(plant: NewPlant, user_id: UserId, db: Db) -> Plant:
    try:  # autocommit: the INSERT is its own transaction, fsynced before it returns
        await db.execute(
            "INSERT INTO plants (user_id, id, name, tag) VALUES (?, ?, ?, ?)",
            (user_id, plant.id, plant.name, plant.tag),
        )
    except sqlite3.IntegrityError:  # a retried create is a 200, another plant on the id a 409
        async with db.execute(
            "SELECT name, tag FROM plants WHERE user_id = ? AND id = ?", (user_id, plant.id)
        ) as cursor:
            held = await cursor.fetchone()
        if held != (plant.name, plant.tag):
            raise HTTPException(409, "a plant with this id exists") from None
    return Plant(name=plant.name, tag=plant.tag)


@app.get("/plants", response_model=list[Plant], response_model_exclude_none=True)
async def list_plants(
    user_id: UserId, db: Db, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[Plant]:
    async with db.execute(
        "SELECT name, tag FROM plants WHERE user_id = ? ORDER BY id LIMIT ?", (user_id, limit)
    ) as cursor:
        rows = await cursor.fetchall()
    return [Plant(name=name, tag=tag) for name, tag in rows]


@app.delete("/plants/{plant_id}", status_code=204)
async def delete_plant(plant_id: int, user_id: UserId, db: Db) -> Response:
    cursor = await db.execute(
        "DELETE FROM plants WHERE user_id = ? AND id = ?", (user_id, plant_id)
    )
    if not cursor.rowcount:
        raise HTTPException(404, "no such plant")
    return Response(status_code=204)
