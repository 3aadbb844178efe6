"""Peer (a): idiomatic FastAPI + pydantic v2 + sqlite3, as a team would write it in an afternoon.

``async def`` endpoints (FastAPI's tutorial style), pydantic v2 models, ``HTTPBearer``, one
sqlite3 connection for the process opened in the lifespan (SQLite queries of a few
microseconds run on the event loop; a thread hop would cost more than the query), WAL with
``synchronous=FULL`` so a 200 means the plant is on disk, and bearer tokens looked up (as
SHA-256) in a table of their own.

    PEER_DATABASE=plants.db PEER_TOKEN=secret uvicorn fastapi_sqlite:app --workers 1
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


def connect() -> sqlite3.Connection:
    conn = sqlite3.connect(DATABASE, timeout=5, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


db: sqlite3.Connection | None = None  # the process's one connection, opened in the lifespan


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Create the tables, and register the operator's token (PEER_TOKEN) for user 'bench'."""
    global db
    db = connect()
    db.executescript(SCHEMA)
    if token := os.environ.get("PEER_TOKEN"):
        db.execute("INSERT OR IGNORE INTO users (name) VALUES ('bench')")
        db.execute(
            "INSERT OR IGNORE INTO tokens SELECT ?, id FROM users WHERE name = 'bench'",
            (hash_token(token),),
        )
    yield
    db.close()


app = FastAPI(title="plants", lifespan=lifespan)
bearer = HTTPBearer()


async def get_db() -> sqlite3.Connection:
    assert db is not None
    return db


Db = Annotated[sqlite3.Connection, Depends(get_db)]


async def current_user(
    credentials: Annotated[HTTPAuthorizationCredentials, Depends(bearer)], db: Db
) -> int:
    row = db.execute(
        "SELECT user_id FROM tokens WHERE token_hash = ?", (hash_token(credentials.credentials),)
    ).fetchone()
    if row is None:
        raise HTTPException(401, "invalid token", headers={"WWW-Authenticate": "Bearer"})
    return int(row[0])


UserId = Annotated[int, Depends(current_user)]


@app.post("/plants", response_model=Plant, response_model_exclude_none=True)
async def create_plant(plant: NewPlant, user_id: UserId, db: Db) -> Plant:
    try:  # autocommit: the INSERT is its own transaction, fsynced before it returns
        db.execute(
            "INSERT INTO plants (user_id, id, name, tag) VALUES (?, ?, ?, ?)",
            (user_id, plant.id, plant.name, plant.tag),
        )
    except sqlite3.IntegrityError:  # a retried create is a 200, another plant on the id a 409
        held = db.execute(
            "SELECT name, tag FROM plants WHERE user_id = ? AND id = ?", (user_id, plant.id)
        ).fetchone()
        if held != (plant.name, plant.tag):
            raise HTTPException(409, "a plant with this id exists") from None
    return Plant(name=plant.name, tag=plant.tag)


@app.get("/plants", response_model=list[Plant], response_model_exclude_none=True)
async def list_plants(
    user_id: UserId, db: Db, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[Plant]:
    rows = db.execute(
        "SELECT name, tag FROM plants WHERE user_id = ? ORDER BY id LIMIT ?", (user_id, limit)
    ).fetchall()
    return [Plant(name=name, tag=tag) for name, tag in rows]


@app.delete("/plants/{plant_id}", status_code=204)
async def delete_plant(plant_id: int, user_id: UserId, db: Db) -> Response:
    deleted = db.execute(
        "DELETE FROM plants WHERE user_id = ? AND id = ?", (user_id, plant_id)
    ).rowcount
    if not deleted:
        raise HTTPException(404, "no such plant")
    return Response(status_code=204)
