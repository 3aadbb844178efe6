"""Sandbox mode's part of the OpenAPI document (only in sandbox mode): ``POST
/sandbox/tokens`` with the configured TTL, quota and limit, its schema and its 429, and the
smaller quota named on ``POST /plants``."""

from __future__ import annotations

from typing import Any

from ..openapi.parts import JSON, RETRY_AFTER, Document, DocumentPart
from ..settings import Settings, parse_rate

SANDBOX_TAG = {
    "name": "sandbox",
    "description": "Tokens for trying the API from its docs: each is a fresh user of its "
    "own, with a small quota, deleted with all its plants when the token expires.",
}


def sandbox_paths(ttl_seconds: int, max_plants: int, issue_limit: str) -> dict[str, Any]:
    """``POST /sandbox/tokens``, described with the configured TTL, quota and limit."""
    return {
        "/sandbox/tokens": {
            "post": {
                "operationId": "createSandboxToken",
                "summary": "Get a sandbox token",
                "description": (
                    "Issues a bearer token for a fresh user of its own, no token needed. It "
                    f"is valid for {_duration(ttl_seconds)}; that user may hold "
                    f"{max_plants} plants. When the token expires, the user and all its "
                    f"plants are deleted. {_issue_limit(issue_limit)}"
                ),
                "security": [],
                "tags": ["sandbox"],
                "responses": {
                    "200": {
                        "description": "The token, shown this once, and when it expires.",
                        "content": {
                            JSON: {
                                "schema": {"$ref": "#/components/schemas/SandboxToken"},
                                "example": {
                                    "token": "pst_" + "x" * 43,
                                    "expires_at": "2026-11-23T19:00:00Z",
                                },
                            }
                        },
                    },
                    "429": {"$ref": "#/components/responses/TooManySandboxTokens"},
                    "500": {
                        "description": "An unexpected fault of the service; the details are "
                        "logged, not sent.",
                        "content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}},
                    },
                    "503": {"$ref": "#/components/responses/Unavailable"},
                },
            }
        }
    }


def sandbox_components() -> dict[str, Any]:
    """The schema and the 429 response ``sandbox_paths`` refers to."""
    return {
        "schemas": {
            "SandboxToken": {
                "title": "SandboxToken",
                "type": "object",
                "properties": {
                    "token": {
                        "type": "string",
                        "pattern": "^pst_[A-Za-z0-9_-]{43}$",
                        "description": "Send it as `Authorization: Bearer <token>`.",
                    },
                    "expires_at": {
                        "type": "string",
                        "format": "date-time",
                        "description": "When the token stops working (RFC 3339, UTC).",
                    },
                },
                "required": ["token", "expires_at"],
                "additionalProperties": False,
            }
        },
        "responses": {
            "TooManySandboxTokens": {
                "description": "This address has had its sandbox tokens for now; retry "
                "after the given seconds.",
                "headers": {"Retry-After": RETRY_AFTER},
                "content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}},
            }
        },
    }


def _issue_limit(text: str) -> str:
    item = parse_rate(text)
    if item is None:
        return "Any client address may get any number of them."
    period = (
        item.GRANULARITY.name
        if item.multiples == 1
        else f"{item.multiples} {item.GRANULARITY.name}s"
    )
    return f"Each client address may get {item.amount} per {period}; past that, a 429."


def _duration(seconds: int) -> str:
    for unit, size in (("week", 604_800), ("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}" + ("s" if count != 1 else "")
    return f"{seconds} seconds"


def document_part(settings: Settings) -> DocumentPart:
    components = sandbox_components()
    max_plants = settings.sandbox_max_plants

    def name_the_quota(document: Document) -> None:
        quota = document["paths"]["/plants"]["post"]["responses"]["403"]
        quota["description"] += f" A sandbox user may hold {max_plants:,}."

    return DocumentPart(
        paths=sandbox_paths(settings.sandbox_ttl_seconds, max_plants, settings.sandbox_issue_limit),
        schemas=components["schemas"],
        responses=components["responses"],
        tags=[SANDBOX_TAG],
        amend=name_the_quota,
    )
