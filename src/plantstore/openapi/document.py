"""The document assembled from the features' parts: ``info``, ``servers``, security, the
common responses, and each part's paths, schemas, tags and webhooks in the order given.

Docs platforms (Mintlify, Redocly, ReadMe) import the served document as it is: without
``servers`` their "Try it" has no address to call. ``tests/e2e/test_docs_site.py`` lints the
served document with Redocly's and Mintlify's own command-line tools.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from ..errors import Error
from ..settings import Settings
from .parts import RETRY_AFTER, Document, DocumentPart, error, schemas_of

_DESCRIPTION = """\
A plant store: each user adds, lists and deletes their own plants.

Every `/plants` operation needs `Authorization: Bearer <token>`: a token an operator issues
with `plantstore token create USER`, or, where an identity provider is configured, a JWT
access token from it. Ids are scoped to their owner. Every error answers the
`Error` body, whose `error` equals the HTTP status.

Every answer carries `X-Request-ID`: the request's own, when it sent a short one of letters,
digits and `._:/+=-`, or a fresh one; the access log records it.
"""


def servers(public_url: str | None) -> list[dict[str, str]]:
    """Where clients send requests: the configured public address, or this server itself."""
    if public_url:
        return [{"url": public_url.rstrip("/") or "/", "description": "This service."}]
    return [{"url": "/", "description": "The server this document was fetched from."}]


def build_document(settings: Settings | None, parts: Sequence[DocumentPart]) -> Document:
    """Return the OpenAPI 3.1 document describing exactly what the service does with
    ``settings`` (its public address) and the features' ``parts``."""
    # A copy: parts hold module-level dicts that later builds share, and ``amend`` changes.
    parts = copy.deepcopy(list(parts))
    document: Document = {
        "openapi": "3.1.0",
        "info": {
            "title": "Plant Store",
            "version": "1.0.0",
            "description": _DESCRIPTION,
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "servers": servers(settings.public_url if settings else None),
        "security": [{"bearerAuth": []}],
        "tags": [tag for part in parts for tag in part.tags],
        "paths": {path: item for part in parts for path, item in part.paths.items()},
        "webhooks": {name: item for part in parts for name, item in part.webhooks.items()},
        "components": _components(parts),
    }
    for part in parts:
        if part.amend is not None:
            part.amend(document)
    return document


def _components(parts: Sequence[DocumentPart]) -> dict[str, Any]:
    schemas = {name: schema for part in parts for name, schema in part.schemas.items()}
    return {
        "schemas": {**schemas, **schemas_of([Error])},
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
            "Unauthorized": error(
                "No bearer token, another scheme, or a token that is invalid, expired or revoked.",
                {
                    "WWW-Authenticate": {
                        "description": 'Bearer realm="plantstore"[, error="invalid_token"]',
                        "required": True,
                        "schema": {"type": "string"},
                    }
                },
            ),
            "TooManyRequests": error(
                "A rate limit is spent: requests per token, or failed authentications from "
                "this address. Nothing was done; retry after the given seconds.",
                {"Retry-After": RETRY_AFTER},
            ),
            "Unavailable": error(
                "The database cannot take the request just now (unreachable or restarting, "
                "its disk full, failing or frozen, its file replaced; the message says which), "
                "or the identity provider's keys for a JWT cannot be fetched. Never a fault of "
                "the request. Retry after the given seconds: a "
                "create or delete answered 503 may or may not have been applied, and repeating "
                "it is safe (an identical create answers 200; a repeated delete, 404).",
                {"Retry-After": RETRY_AFTER},
            ),
            **{name: item for part in parts for name, item in part.responses.items()},
        },
    }
