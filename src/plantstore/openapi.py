"""The served OpenAPI 3.1 document: schemas from the msgspec Structs, operations declared here.

Tests hold this document against the running service (schemathesis), so every status,
header and parameter listed here is one the service really answers.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from . import openapi_docs_site as docs_site
from . import openapi_webhooks
from .schemas import INT32_MAX, INT64_MAX, INT64_MIN, Error, NewPlant, Plant, Status
from .settings import Settings

JSON = "application/json"
Document = dict[str, Any]

_DESCRIPTION = """\
A plant store: each user adds, lists and deletes their own plants.

Every `/plants` operation needs `Authorization: Bearer <token>`: a token an operator issues
with `plantstore token create USER`, or, where an identity provider is configured, a JWT
access token from it. Ids are scoped to their owner. Every error answers the
`Error` body, whose `error` equals the HTTP status.

Every answer carries `X-Request-ID`: the request's own, when it sent a short one of letters,
digits and `._:/+=-`, or a fresh one; the access log records it.
"""


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _error(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {JSON: {"schema": _ref("Error")}},
    }
    if headers:
        response["headers"] = headers
    return response


_COMMON_ERRORS = {
    "401": {"$ref": "#/components/responses/Unauthorized"},
    "429": {"$ref": "#/components/responses/TooManyRequests"},
    "500": _error("An unexpected fault of the service; the details are logged, not sent."),
    "503": {"$ref": "#/components/responses/Unavailable"},
}

_RETRY_AFTER = {
    "description": "Seconds to wait before retrying.",
    "required": True,
    "schema": {"type": "integer", "minimum": 1},
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
                    "schema": {"type": "array", "items": _ref("Plant")},
                    "example": [{"name": "Monstera", "tag": "tropical"}, {"name": "Fern"}],
                }
            },
        },
        "400": _error("`limit` or `cursor` is invalid or repeated."),
        **_COMMON_ERRORS,
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
                "schema": _ref("NewPlant"),
                "example": {"id": 1, "name": "Monstera", "tag": "tropical"},
            }
        },
    },
    "responses": {
        "200": {
            "description": "The plant response.",
            "content": {
                JSON: {"schema": _ref("Plant"), "example": {"name": "Monstera", "tag": "tropical"}}
            },
            "links": {
                "DeletePlant": {
                    "operationId": "deletePlant",
                    "parameters": {"id": "$request.body#/id"},
                    "description": "The created plant is deleted by the id it was created with.",
                }
            },
        },
        "400": _error("The body is not a valid NewPlant; the message names the member."),
        **_COMMON_ERRORS,
        "403": _error(
            "The caller already holds the most plants the per-user quota allows (100,000 by "
            "default, PLANTSTORE_MAX_PLANTS_PER_USER); delete some first."
        ),
        "408": _error(
            "The body did not arrive within the body deadline (30 s by default, "
            "PLANTSTORE_BODY_TIMEOUT); nothing was stored and the connection is closed."
        ),
        "409": _error("The caller already has a different plant with this id."),
        "413": _error("The body is larger than the configured limit (64 KiB by default)."),
        "415": _error("Content-Type is not application/json (optionally charset=utf-8)."),
    },
}

_DELETE = {
    "operationId": "deletePlant",
    "summary": "Delete a plant",
    "parameters": [_PLANT_ID],
    "responses": {
        "204": {"description": "The plant was deleted."},
        "400": _error("`id` is not a decimal 64-bit integer."),
        **_COMMON_ERRORS,
        "404": _error("The caller has no plant with this id."),
    },
}


def _probe(operation_id: str, summary: str, *, needs_store: bool) -> dict[str, Any]:
    responses: dict[str, Any] = {
        "200": {"description": "OK", "content": {JSON: {"schema": _ref("Status")}}}
    }
    if needs_store:
        responses["503"] = {"$ref": "#/components/responses/Unavailable"}
    return {
        "operationId": operation_id,
        "summary": summary,
        "security": [],
        "tags": ["operations"],
        "responses": responses,
    }


def _components() -> dict[str, Any]:
    _, schemas = msgspec.json.schema_components(
        [Plant, NewPlant, Error, Status], ref_template="#/components/schemas/{name}"
    )
    return {
        "schemas": {**schemas, **openapi_webhooks.schemas()},
        "securitySchemes": {
            "bearerAuth": {
                "type": "http",
                "scheme": "bearer",
                "description": (
                    "A token issued with `plantstore token create USER`, or a JWT access token "
                    "from the configured identity provider (its `sub`, by default, is the user)."
                ),
            }
        },
        "responses": {
            "Unauthorized": _error(
                "No bearer token, another scheme, or a token that is invalid, expired or revoked.",
                {
                    "WWW-Authenticate": {
                        "description": 'Bearer realm="plantstore"[, error="invalid_token"]',
                        "required": True,
                        "schema": {"type": "string"},
                    }
                },
            ),
            "TooManyRequests": _error(
                "A rate limit is spent: requests per token, or failed authentications from "
                "this address. Nothing was done; retry after the given seconds.",
                {"Retry-After": _RETRY_AFTER},
            ),
            "Unavailable": _error(
                "The database, or the identity provider's keys for a JWT, cannot be reached "
                "just now. Retry after the given seconds: a "
                "create or delete answered 503 may or may not have been applied, and repeating "
                "it is safe (an identical create answers 200; a repeated delete, 404).",
                {"Retry-After": _RETRY_AFTER},
            ),
        },
    }


def build_document(settings: Settings | None = None) -> Document:
    """Return the OpenAPI 3.1 document describing exactly what the service does with
    ``settings`` (its public address, whether sandbox mode is on)."""
    document = {
        "openapi": "3.1.0",
        "info": {
            "title": "Plant Store",
            "version": "1.0.0",
            "description": _DESCRIPTION,
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "servers": docs_site.servers(settings.public_url if settings else None),
        "security": [{"bearerAuth": []}],
        "tags": list(docs_site.TAGS),
        "paths": {
            "/plants": {
                "get": {**_LIST, "tags": ["plants"]},
                "post": {**_CREATE, "tags": ["plants"]},
            },
            "/plants/{id}": {"delete": {**_DELETE, "tags": ["plants"]}},
            "/healthz": {"get": _probe("healthz", "The process is alive", needs_store=False)},
            "/readyz": {"get": _probe("readyz", "The store is reachable", needs_store=True)},
            **openapi_webhooks.paths(),
        },
        "webhooks": openapi_webhooks.webhooks(),
        "components": _components(),
    }
    if settings is not None and settings.sandbox:
        # A copy: the operations above are module-level dicts that later builds share.
        document = copy.deepcopy(document)
        _add_sandbox(document, settings)
    return document


def _add_sandbox(document: Document, settings: Settings) -> None:
    """``POST /sandbox/tokens``, its tag and its components: only in sandbox mode."""
    document["tags"].append(docs_site.SANDBOX_TAG)
    quota = document["paths"]["/plants"]["post"]["responses"]["403"]
    quota["description"] += f" A sandbox user may hold {settings.sandbox_max_plants:,}."
    document["paths"].update(
        docs_site.sandbox_paths(
            settings.sandbox_ttl_seconds,
            settings.sandbox_max_plants,
            settings.sandbox_issue_limit,
        )
    )
    for section, entries in docs_site.sandbox_components(_RETRY_AFTER).items():
        document["components"][section].update(entries)
