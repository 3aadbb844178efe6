"""Peer (b): a naive Starlette + msgspec + sqlite3 app, served by granian.

The shortest thing that works: one sqlite3 connection shared by every request and used
straight from the async handlers (WAL, ``synchronous=FULL``, one commit per create), the
tokens in a dict loaded at start, msgspec for the JSON.

    PEER_DATABASE=plants.db PEER_TOKEN=secret granian --interface asgi starlette_naive:app
"""

from __future__ import annotations

import os
import sqlite3

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


class NewPlant(msgspec.Struct):
    id: int
    name: str
    tag: str | None = None


class Plant(msgspec.Struct, omit_defaults=True):
    name: str
    tag: str | None = None


db = sqlite3.connect(os.environ.get("PEER_DATABASE", "plants.db"), isolation_level=None)
db.execute("PRAGMA journal_mode = WAL")
db.execute("PRAGMA synchronous = FULL")
db.execute("CREATE TABLE IF NOT EXISTS users (id INTEGER PRIMARY KEY, name TEXT UNIQUE)")
db.execute(
    "CREATE TABLE IF NOT EXISTS plants (user_id INTEGER, id INTEGER, name TEXT NOT NULL,"
    " tag TEXT, PRIMARY KEY (user_id, id))"
)
db.execute("INSERT OR IGNORE INTO users (name) VALUES ('bench')")
(BENCH_USER,) = db.execute("SELECT id FROM users WHERE name = 'bench'").fetchone()
TOKENS: dict[str, int] = (
    {os.environ["PEER_TOKEN"]: BENCH_USER} if "PEER_TOKEN" in os.environ else {}
)


def json(data: object, status: int = 200) -> Response:
    return Response(msgspec.json.encode(data), status, media_type="application/json")


def error(status: int, message: str) -> Response:
    return json({"error": status, "message": message}, status)


def user_of(request: Request) -> int | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return TOKENS.get(token) if scheme.lower() == "bearer" else None


async def create_plant(request: Request) -> Response:
    user = user_of(request)
    if user is None:
        return error(401, "invalid token")
    try:
        plant = msgspec.json.decode(await request.body(), type=NewPlant)
    except msgspec.ValidationError as exc:
        return error(400, str(exc))
    except msgspec.DecodeError:
        return error(400, "invalid JSON")
    try:
        db.execute(
            "INSERT INTO plants (user_id, id, name, tag) VALUES (?, ?, ?, ?)",
            (user, plant.id, plant.name, plant.tag),
        )
    except sqlite3.IntegrityError:  # a retried create is a 200, another plant on the id a 409
        held = db.execute(
            "SELECT name, tag FROM plants WHERE user_id = ? AND id = ?", (user, plant.id)
        ).fetchone()
        if held != (plant.name, plant.tag):
            return error(409, "a plant with this id exists")
    return json(Plant(plant.name, plant.tag))


async def list_plants(request: Request) -> Response:
    user = user_of(request)
    if user is None:
        return error(401, "invalid token")
    try:
        limit = int(request.query_params.get("limit", "100"))
    except ValueError:
        return error(400, "limit must be an integer")
    rows = db.execute(
        "SELECT name, tag FROM plants WHERE user_id = ? ORDER BY id LIMIT ?", (user, limit)
    ).fetchall()
    return json([Plant(name, tag) for name, tag in rows])


async def delete_plant(request: Request) -> Response:
    user = user_of(request)
    if user is None:
        return error(401, "invalid token")
    cursor = db.execute(
        "DELETE FROM plants WHERE user_id = ? AND id = ?", (user, request.path_params["id"])
    )
    return Response(status_code=204) if cursor.rowcount else error(404, "no such plant")


app = Starlette(
    routes=[
        Route("/plants", create_plant, methods=["POST"]),
        Route("/plants", list_plants, methods=["GET"]),
        Route("/plants/{id:int}", delete_plant, methods=["DELETE"]),
    ]
)
