"""The webhooks' part of the OpenAPI document: paths under ``/webhooks``, their schemas,
and the event under the document's top-level ``webhooks`` so that Swagger UI and client
generators show what a subscriber receives.
"""

from __future__ import annotations

from typing import Any

from ..http.parsing import INT64_MAX, INT64_MIN
from ..openapi.parts import COMMON_ERRORS, JSON, DocumentPart, schemas_of
from ..openapi.parts import error as _error
from ..openapi.parts import ref as _ref
from .events import Event
from .schemas import (
    Delivery,
    NewWebhook,
    Redelivered,
    RedeliverSince,
    Webhook,
    WebhookCreated,
)

SCHEMAS = [NewWebhook, WebhookCreated, Webhook, Delivery, RedeliverSince, Redelivered, Event]


_BODY_ERRORS = {
    "408": _error("The body did not arrive within the body deadline; nothing was done."),
    "413": _error("The body is larger than the configured limit (64 KiB by default)."),
    "415": _error(
        "Content-Type is not application/json (optionally charset=utf-8), or the body is "
        "sent in a content coding (Content-Encoding): send it uncompressed."
    ),
    "501": _error("The body is sent in a transfer coding other than chunked (Transfer-Encoding)."),
}


def _id(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {
            "type": "integer",
            "format": "int64",
            "minimum": INT64_MIN,
            "maximum": INT64_MAX,
        },
    }


_WEBHOOK_ID = _id("id", "The subscription's id.")
_DELIVERY_ID = _id("delivery_id", "The delivery's id, from the deliveries listing.")
_NOT_YOURS = _error("The caller has no webhook with this id.")
_BAD_ID = _error(
    "A path id is not a decimal 64-bit integer (an optional leading '-', then digits)."
)


def _ok(description: str, schema: dict[str, Any], status: str = "200") -> dict[str, Any]:
    return {status: {"description": description, "content": {JSON: {"schema": schema}}}}


_CREATE = {
    "operationId": "createWebhook",
    "summary": "Subscribe to plant changes",
    "description": (
        "Each change of the caller's plants is POSTed to `url`, signed per Standard Webhooks "
        "v1 with the returned secret (shown this once). The URL must be absolute http(s), "
        "without credentials, naming or resolving to globally routable addresses only. "
        "A user holds at most `PLANTSTORE_WEBHOOK_MAX_SUBSCRIPTIONS` (10 by default)."
    ),
    "requestBody": {
        "required": True,
        "content": {
            JSON: {
                "schema": _ref("NewWebhook"),
                "example": {"url": "https://hooks.example.com/plants", "events": ["plant.created"]},
            }
        },
    },
    "responses": {
        **_ok("The subscription, with its signing secret.", _ref("WebhookCreated")),
        "400": _error("The body is invalid, or `url` is refused; the message names the member."),
        "403": _error(
            "The caller already holds the most webhook subscriptions allowed "
            "(`PLANTSTORE_WEBHOOK_MAX_SUBSCRIPTIONS`, 10 by default); the message names the limit."
        ),
        **COMMON_ERRORS,
        **_BODY_ERRORS,
    },
}
_LIST = {
    "operationId": "listWebhooks",
    "summary": "List your webhook subscriptions",
    "responses": {
        **_ok(
            "The caller's subscriptions (no secrets).", {"type": "array", "items": _ref("Webhook")}
        ),
        **COMMON_ERRORS,
    },
}
_DELETE = {
    "operationId": "deleteWebhook",
    "summary": "Unsubscribe",
    "parameters": [_WEBHOOK_ID],
    "responses": {
        "204": {"description": "The subscription and its pending deliveries are gone."},
        "400": _BAD_ID,
        "404": _NOT_YOURS,
        **COMMON_ERRORS,
    },
}
_DELIVERIES = {
    "operationId": "listWebhookDeliveries",
    "summary": "A subscription's recent deliveries, newest first",
    "parameters": [
        _WEBHOOK_ID,
        {
            "name": "limit",
            "in": "query",
            "required": False,
            "description": "At most this many (and at most 100; absent: 100).",
            "schema": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 2147483647},
        },
    ],
    "responses": {
        **_ok("Deliveries, newest first.", {"type": "array", "items": _ref("Delivery")}),
        "400": _error("An id or `limit` is invalid or repeated."),
        "404": _NOT_YOURS,
        **COMMON_ERRORS,
    },
}
_REDELIVER_ONE = {
    "operationId": "redeliverWebhookDelivery",
    "summary": "Send one delivery again",
    "description": "The delivery becomes due now, with its original body and webhook-id.",
    "parameters": [_WEBHOOK_ID, _DELIVERY_ID],
    "responses": {
        **_ok("Queued.", _ref("Redelivered"), "202"),
        "400": _BAD_ID,
        "404": _error("The caller's webhook has no delivery with this id."),
        **COMMON_ERRORS,
    },
}
_REDELIVER_FAILED = {
    "operationId": "redeliverFailedWebhookDeliveries",
    "summary": "Send every failed delivery since a time again",
    "parameters": [_WEBHOOK_ID],
    "requestBody": {
        "required": True,
        "content": {
            JSON: {"schema": _ref("RedeliverSince"), "example": {"since": "2026-11-23T00:00:00Z"}}
        },
    },
    "responses": {
        **_ok("How many were queued.", _ref("Redelivered"), "202"),
        "400": _error("An id or the body is invalid; the message names it."),
        "404": _NOT_YOURS,
        **COMMON_ERRORS,
        **_BODY_ERRORS,
    },
}
_SIGNED_HEADERS = {
    name: {"required": True, "description": description, "schema": {"type": "string"}}
    for name, description in (
        ("webhook-id", "The event's id, the same on every attempt: de-duplicate by it."),
        ("webhook-timestamp", "Unix seconds of this attempt."),
        (
            "webhook-signature",
            "`v1,<base64 HMAC-SHA256 of {id}.{timestamp}.{body}>`; two, space-separated, "
            "for 24 h after a secret rotation.",
        ),
    )
}


def _event(summary: str) -> dict[str, Any]:
    return {
        "post": {
            "operationId": "plantChanged",
            "tags": ["webhooks"],
            "summary": summary,
            "security": [],
            "parameters": [
                {"name": name, "in": "header", **header} for name, header in _SIGNED_HEADERS.items()
            ],
            "requestBody": {"required": True, "content": {JSON: {"schema": _ref("Event")}}},
            "responses": {
                "200": {"description": "Any 2xx within 15 s acknowledges the event."},
                "410": {"description": "Disables the subscription."},
            },
        }
    }


TAG = {
    "name": "webhooks",
    "description": "Subscriptions that POST each of the caller's plant changes to a URL, "
    "signed per Standard Webhooks and delivered at least once; their delivery records.",
}


def document_part() -> DocumentPart:
    tags = {"tags": ["webhooks"]}
    return DocumentPart(
        paths={
            "/webhooks": {"get": {**_LIST, **tags}, "post": {**_CREATE, **tags}},
            "/webhooks/{id}": {"delete": {**_DELETE, **tags}},
            "/webhooks/{id}/deliveries": {"get": {**_DELIVERIES, **tags}},
            "/webhooks/{id}/deliveries/{delivery_id}/redeliver": {
                "post": {**_REDELIVER_ONE, **tags}
            },
            "/webhooks/{id}/redeliver": {"post": {**_REDELIVER_FAILED, **tags}},
        },
        schemas=schemas_of(SCHEMAS),
        tags=[TAG],
        webhooks={
            "plantChanged": _event(
                "A plant of the subscriber's was created or deleted "
                "(`plant.created`, `plant.deleted`)"
            )
        },
    )
