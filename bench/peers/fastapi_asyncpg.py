"""Peer (c): idiomatic FastAPI + asyncpg for PostgreSQL, as a team would write it in an afternoon.

Async endpoints, an asyncpg pool made in the lifespan, bearer tokens looked up (as SHA-256)
in a table of their own. Each create is its own committed statement, so with PostgreSQL's
default ``synchronous_commit`` a 200 means the plant is on disk.

    PEER_DATABASE=postgresql://... PEER_TOKEN=secret uvicorn fastapi_asyncpg:app --workers 1
"""

# FastAPI lives in this peer's own venv, not the project's: mypy sees its names as Any.
# mypy: allow-untyped-decorators

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import asyncpg
from fastapi import (  # type: ignore[import-not-found]
    Depends,
    FastAPI,
    HTTPException,
    Query,
    Request,
    Response,
)
from fastapi.security import (  # type: ignore[import-not-found]
    HTTPAuthorizationCredentials,
    HTTPBearer,
)
from pydantic import BaseModel

SCHEMA = """
CREATE TABLE IF NOT EXISTS users (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS tokens (
    token_hash TEXT PRIMARY KEY,
    user_id BIGINT NOT NULL REFERENCES users (id)
);
CREATE TABLE IF NOT EXISTS plants (
    user_id BIGINT NOT NULL REFERENCES users (id),
    id BIGINT NOT NULL,
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


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Open the pool, create the tables, register the operator's token (PEER_TOKEN)."""
    async with asyncpg.create_pool(os.environ["PEER_DATABASE"]) as pool:
        async with pool.acquire() as conn:
            await conn.execute(SCHEMA)
            if token := os.environ.get("PEER_TOKEN"):
                await conn.execute(
                    "INSERT INTO users (name) VALUES ('bench') ON CONFLICT DO NOTHING"
                )
                await conn.execute(
                    "INSERT INTO tokens SELECT $1, id FROM users WHERE name = 'bench'"
                    " ON CONFLICT DO NOTHING",
                    hash_token(token),
                )
        app.state.pool = pool
        yield


app = FastAPI(title="plants", lifespan=lifespan)
bearer = HTTPBearer()


def get_pool(request: Request) -> asyncpg.Pool:
    pool: asyncpg.Pool = request.app.state.pool
    return pool


Pool = Annotated[asyncpg.Pool, Depends(get_pool)]


async def current_user(
    credentials: Annotated[HTTPAuthorizationCredentials, Depends(bearer)], pool: Pool
) -> int:
    user_id = await pool.fetchval(
        "SELECT user_id FROM tokens WHERE token_hash = $1", hash_token(credentials.credentials)
    )
    if user_id is None:
        raise HTTPException(401, "invalid token", headers={"WWW-Authenticate": "Bearer"})
    return int(user_id)


UserId = Annotated[int, Depends(current_user)]


@app.post("/plants", response_model=Plant, response_model_exclude_none=True)
async def create_plant(plant: NewPlant, user_id: UserId, pool: Pool) -> Plant:
    try:
        await pool.execute(
            "INSERT INTO plants (user_id, id, name, tag) VALUES ($1, $2, $3, $4)",
            user_id,
            plant.id,
            plant.name,
            plant.tag,
        )
    except asyncpg.UniqueViolationError:  # a retried create is a 200, another plant a 409
        held = await pool.fetchrow(
            "SELECT name, tag FROM plants WHERE user_id = $1 AND id = $2", user_id, plant.id
        )
        if held is None or (held["name"], held["tag"]) != (plant.name, plant.tag):
            raise HTTPException(409, "a plant with this id exists") from None
    return Plant(name=plant.name, tag=plant.tag)


@app.get("/plants", response_model=list[Plant], response_model_exclude_none=True)
async def list_plants(
    user_id: UserId, pool: Pool, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[Plant]:
    rows = await pool.fetch(
        "SELECT name, tag FROM plants WHERE user_id = $1 ORDER BY id LIMIT $2", user_id, limit
    )
    return [Plant(name=row["name"], tag=row["tag"]) for row in rows]


@app.delete("/plants/{plant_id}", status_code=204)
async def delete_plant(plant_id: int, user_id: UserId, pool: Pool) -> Response:
    status = await pool.execute(
        "DELETE FROM plants WHERE user_id = $1 AND id = $2", user_id, plant_id
    )
    if status == "DELETE 0":
        raise HTTPException(404, "no such plant")
    return Response(status_code=204)
