"""Peer (a): idiomatic FastAPI + pydantic v2 + sqlite3, as a team would write it in an afternoon.

Sync endpoints (FastAPI runs them in its thread pool), a connection per request from a small
pool through a dependency, WAL with ``synchronous=FULL`` so a 200 means the plant is on disk,
and bearer tokens looked up (as SHA-256) in a table of their own.

    PEER_DATABASE=plants.db PEER_TOKEN=secret uvicorn fastapi_sqlite:app --workers 1
"""

# FastAPI lives in this peer's own venv, not the project's: mypy sees its names as Any.
# mypy: allow-untyped-decorators

from __future__ import annotations

import hashlib
import os
import queue
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, closing
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
    # FastAPI may open the connection in one pool thread and use it in another.
    conn = sqlite3.connect(DATABASE, timeout=5, check_same_thread=False)
    conn.execute("PRAGMA synchronous = FULL")
    return conn


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Create the tables, and register the operator's token (PEER_TOKEN) for user 'bench'."""
    with closing(connect()) as conn, conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(SCHEMA)
        if token := os.environ.get("PEER_TOKEN"):
            conn.execute("INSERT OR IGNORE INTO users (name) VALUES ('bench')")
            conn.execute(
                "INSERT OR IGNORE INTO tokens SELECT ?, id FROM users WHERE name = 'bench'",
                (hash_token(token),),
            )
    yield


app = FastAPI(title="plants", lifespan=lifespan)
bearer = HTTPBearer()


# Connections are reused, as SQLAlchemy's pool would (FastAPI's docs use one): opening one per
# request would also make SQLite checkpoint the WAL each time the last one closed.
idle: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()


def get_db() -> Iterator[sqlite3.Connection]:
    try:
        conn = idle.get_nowait()
    except queue.Empty:
        conn = connect()
    try:
        yield conn
    finally:
        idle.put(conn)


Db = Annotated[sqlite3.Connection, Depends(get_db)]


def current_user(
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
def create_plant(plant: NewPlant, user_id: UserId, db: Db) -> Plant:
    try:
        with db:
            db.execute(
                "INSERT INTO plants (user_id, id, name, tag) VALUES (?, ?, ?, ?)",
                (user_id, plant.id, plant.name, plant.tag),
            )
    except sqlite3.IntegrityError:
        raise HTTPException(409, "a plant with this id exists") from None
    return Plant(name=plant.name, tag=plant.tag)


@app.get("/plants", response_model=list[Plant], response_model_exclude_none=True)
def list_plants(
    user_id: UserId, db: Db, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[Plant]:
    rows = db.execute(
        "SELECT name, tag FROM plants WHERE user_id = ? ORDER BY id LIMIT ?", (user_id, limit)
    ).fetchall()
    return [Plant(name=name, tag=tag) for name, tag in rows]


@app.delete("/plants/{plant_id}", status_code=204)
def delete_plant(plant_id: int, user_id: UserId, db: Db) -> Response:
    with db:
        deleted = db.execute(
            "DELETE FROM plants WHERE user_id = ? AND id = ?", (user_id, plant_id)
        ).rowcount
    if not deleted:
        raise HTTPException(404, "no such plant")
    return Response(status_code=204)
