"""The plant operations' part of the OpenAPI document: ``/plants`` and ``/plants/{id}``, and
the Plant and NewPlant schemas from their msgspec Structs."""

from __future__ import annotations

from ..http.parsing import INT32_MAX, INT64_MAX, INT64_MIN
from ..openapi.parts import COMMON_ERRORS, JSON, DocumentPart, error, ref, schemas_of
from .schemas import NewPlant, Plant

TAG = {
    "name": "plants",
    "description": "Each user's plants: create, list a page at a time, delete. Every "
    "operation needs a bearer token and sees only the caller's plants.",
}

_LIMIT = {
    "name": "limit",
    "in": "query",
    "required": False,
    "description": (
        "The maximum number of results to return. The server returns at most "
        "min(limit, page cap) plants; absent means the page cap (1000 by default)."
    ),
    "schema": {"type": "integer", "format": "int32", "minimum": 0, "maximum": INT32_MAX},
}

_CURSOR = {
    "name": "cursor",
    "in": "query",
    "required": False,
    "description": (
        'Opaque cursor from a previous page\'s `Link: rel="next"` header. It is bound to the '
        "user it was issued to; a cursor not issued to the caller is refused with 400."
    ),
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{32}$"},
}

_PLANT_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "The identifier of the plant.",
    "schema": {"type": "integer", "format": "int64", "minimum": INT64_MIN, "maximum": INT64_MAX},
}

_LIST = {
    "operationId": "listPlants",
    "summary": "List your plants",
    "description": "Returns the caller's plants ordered by id ascending, a page at a time.",
    "parameters": [_LIMIT, _CURSOR],
    "responses": {
        "200": {
            "description": "A page of the caller's plants.",
            "headers": {
                "Link": {
                    "description": 'RFC 8288 `<...>; rel="next"` link, present when more plants remain.',
                    "schema": {"type": "string"},
                }
            },
            "content": {
                JSON: {
                    "schema": {"type": "array", "items": ref("Plant")},
                    "example": [{"name": "Monstera", "tag": "tropical"}, {"name": "Fern"}],
                }
            },
        },
        "400": error("`limit` or `cursor` is invalid or repeated."),
        **COMMON_ERRORS,
    },
}

_CREATE = {
    "operationId": "createPlant",
    "summary": "Create a plant",
    "description": (
        "Stores a plant for the caller. Repeating a create with the same id, name and tag "
        "answers 200 again and changes nothing; the same id with a different plant is a 409."
    ),
    "requestBody": {
        "required": True,
        "content": {
            JSON: {
                "schema": ref("NewPlant"),
                "example": {"id": 1, "name": "Monstera", "tag": "tropical"},
            }
        },
    },
    "responses": {
        "200": {
            "description": "The plant response.",
            "content": {
                JSON: {"schema": ref("Plant"), "example": {"name": "Monstera", "tag": "tropical"}}
            },
            "links": {
                "DeletePlant": {
                    "operationId": "deletePlant",
                    "parameters": {"id": "$request.body#/id"},
                    "description": "The created plant is deleted by the id it was created with.",
                }
            },
        },
        "400": error("The body is not a valid NewPlant; the message names the member."),
        **COMMON_ERRORS,
        "403": error(
            "The caller already holds the most plants the per-user quota allows (100,000 by "
            "default, PLANTSTORE_MAX_PLANTS_PER_USER), which the message gives; delete some "
            "first."
        ),
        "408": error(
            "The body did not arrive within the body deadline (30 s by default, "
            "PLANTSTORE_BODY_TIMEOUT); nothing was stored and the connection is closed."
        ),
        "409": error("The caller already has a different plant with this id."),
        "413": error("The body is larger than the configured limit (64 KiB by default)."),
        "415": error(
            "Content-Type is not application/json (optionally charset=utf-8), or the body "
            "is sent in a content coding (Content-Encoding): send it uncompressed."
        ),
        "501": error(
            "The body is sent in a transfer coding other than chunked (Transfer-Encoding)."
        ),
    },
}

_DELETE = {
    "operationId": "deletePlant",
    "summary": "Delete a plant",
    "parameters": [_PLANT_ID],
    "responses": {
        "204": {"description": "The plant was deleted."},
        "400": error("`id` is not a decimal 64-bit integer."),
        **COMMON_ERRORS,
        "404": error("The caller has no plant with this id."),
    },
}


def document_part() -> DocumentPart:
    tags = {"tags": ["plants"]}
    return DocumentPart(
        paths={
            "/plants": {"get": {**_LIST, **tags}, "post": {**_CREATE, **tags}},
            "/plants/{id}": {"delete": {**_DELETE, **tags}},
        },
        schemas=schemas_of([Plant, NewPlant]),
        tags=[TAG],
    )
