"""The wire shapes of ``/webhooks``: msgspec Structs that decode, validate, encode and feed
the OpenAPI document."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from ..http.parsing import INT64_MAX
from .addresses import MAX_URL_LENGTH

EventName = Literal["plant.created", "plant.deleted"]
WebhookUrl = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_URL_LENGTH,
        description="An absolute http or https URL without credentials, on a global address",
        extra_json_schema={"format": "uri"},
    ),
]
Events = Annotated[
    list[EventName],
    Meta(min_length=1, max_length=2, description="The events to deliver; absent: both"),
]
WebhookId = Annotated[
    int,
    Meta(
        ge=1,
        le=INT64_MAX,
        description="The subscription's id",
        extra_json_schema={"format": "int64"},
    ),
]


class NewWebhook(msgspec.Struct, forbid_unknown_fields=True):
    """The body of ``POST /webhooks``."""

    url: WebhookUrl
    events: Events | UnsetType = UNSET


class WebhookCreated(msgspec.Struct):
    """A new subscription, with its signing secret: shown this once."""

    id: WebhookId
    url: str
    events: list[EventName]
    secret: Annotated[
        str, Meta(description="whsec_ and the base64 of 32 random bytes: the HMAC key")
    ]


class Webhook(msgspec.Struct, omit_defaults=True):
    """A subscription as listed: no secret."""

    id: WebhookId
    url: str
    events: list[EventName]
    enabled: bool
    disabled_reason: str | UnsetType = UNSET


class Delivery(msgspec.Struct, omit_defaults=True):
    """One event for one subscription, and how its attempts went."""

    id: Annotated[int, Meta(ge=1, extra_json_schema={"format": "int64"})]
    webhook_id: Annotated[str, Meta(description="The webhook-id header: the same on every attempt")]
    type: EventName
    plant_id: Annotated[int, Meta(extra_json_schema={"format": "int64"})]
    timestamp: Annotated[str, Meta(description="When the plant changed (RFC 3339)")]
    status: Literal["pending", "delivered", "failed"]
    attempts: Annotated[int, Meta(ge=0, extra_json_schema={"format": "int32"})]
    next_attempt_at: str | UnsetType = UNSET
    finished_at: str | UnsetType = UNSET
    last_status: int | UnsetType = UNSET
    last_error: str | UnsetType = UNSET


class RedeliverSince(msgspec.Struct, forbid_unknown_fields=True):
    """The body of ``POST /webhooks/{id}/redeliver``."""

    since: Annotated[
        str,
        Meta(
            description="Redeliver failed deliveries of events from this time on (RFC 3339)",
            extra_json_schema={"format": "date-time"},
        ),
    ]


class Redelivered(msgspec.Struct):
    redelivered: Annotated[int, Meta(ge=0, description="How many deliveries were made due again")]


new_webhook_decoder = msgspec.json.Decoder(NewWebhook)
redeliver_since_decoder = msgspec.json.Decoder(RedeliverSince)
