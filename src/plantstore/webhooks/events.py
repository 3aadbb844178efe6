"""The event a delivery carries, fixed when the plant changed, and what a subscription holds."""

from __future__ import annotations

import datetime
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

EventType = Literal["plant.created", "plant.deleted"]
EVENT_TYPES: tuple[EventType, ...] = ("plant.created", "plant.deleted")
EVENT_BITS: dict[EventType, int] = {"plant.created": 1, "plant.deleted": 2}  # as the triggers


class EventPlant(msgspec.Struct, omit_defaults=True):
    """The plant as it was after a create, or before a delete; no ``tag`` when it has none."""

    id: Annotated[int, Meta(extra_json_schema={"format": "int64"})]
    name: str
    tag: str | None = None


class Event(msgspec.Struct):
    """The body of every webhook POST."""

    type: EventType
    timestamp: Annotated[
        str, Meta(description="When the plant changed", extra_json_schema={"format": "date-time"})
    ]
    data: EventPlant


_encoder = msgspec.json.Encoder()


def event_body(
    event_type: EventType, occurred_at: float, plant_id: int, name: str, tag: str | None
) -> bytes:
    """The JSON body, the same bytes on every attempt."""
    return _encoder.encode(
        Event(
            event_type,
            rfc3339(occurred_at),
            EventPlant(plant_id, name, tag),
        )
    )


def rfc3339(timestamp: float) -> str:
    """UTC, to the millisecond, with ``Z``."""
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def events_bits(events: list[EventType]) -> int:
    bits = 0
    for event in events:
        bits |= EVENT_BITS[event]
    return bits


def events_of(bits: int) -> list[EventType]:
    return [event for event in EVENT_TYPES if bits & EVENT_BITS[event]]
