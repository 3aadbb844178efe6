"""The rules of the plant collection: idempotent creates, and keyset pages with signed cursors.

A cursor is the last id of a page plus an HMAC over (user, id) with a key kept in the
database, so it is opaque, survives restarts, and is useless to any other user.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import struct
from dataclasses import dataclass

from msgspec import UnsetType

from .errors import BadRequest, Conflict, QuotaExceeded
from .schemas import NewPlant, Plant
from .store import CreateOutcome, PlantRecord, Store

_CURSOR = struct.Struct(">q")
_MAC_BYTES = 16
_CURSOR_CHARS = 32  # base64url of 8 + 16 bytes, unpadded
# Exactly what ``encode`` writes: base64 decoding would also take "+" for "-" and "/" for "_".
_CURSOR_TEXT = re.compile(rf"[A-Za-z0-9_-]{{{_CURSOR_CHARS}}}")


class CursorCodec:
    """Sign and check paging cursors bound to one user."""

    def __init__(self, key: bytes) -> None:
        # Keyed once; each MAC copies this state. A fresh ``hmac.new`` or ``hmac.digest``
        # sets OpenSSL's context up again every time: 5 µs per cursor instead of 2.
        self._keyed = hmac.new(key, digestmod=hashlib.sha256)

    def encode(self, user_id: int, last_id: int) -> str:
        body = _CURSOR.pack(last_id)
        raw = body + self._mac(user_id, body)
        return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    def decode(self, user_id: int, cursor: str) -> int:
        """Return the last id the cursor carries, or raise a 400 if it is not this user's."""
        try:
            raw = base64.urlsafe_b64decode(cursor + "==") if _CURSOR_TEXT.fullmatch(cursor) else b""
        except (binascii.Error, ValueError):
            raw = b""
        body, mac = raw[: _CURSOR.size], raw[_CURSOR.size :]
        if len(raw) != _CURSOR.size + _MAC_BYTES or not hmac.compare_digest(
            mac, self._mac(user_id, body)
        ):
            raise BadRequest("query parameter 'cursor' is not a cursor this service issued")
        (last_id,) = _CURSOR.unpack(body)
        return int(last_id)

    def _mac(self, user_id: int, body: bytes) -> bytes:
        message = b"plantstore-cursor-v1" + _CURSOR.pack(user_id) + body
        mac = self._keyed.copy()
        mac.update(message)
        return mac.digest()[:_MAC_BYTES]


@dataclass(frozen=True, slots=True)
class Page:
    plants: list[Plant]
    next_cursor: str | None


def to_plant(record: PlantRecord) -> Plant:
    return Plant(record.name) if record.tag is None else Plant(record.name, record.tag)


async def create_plant(store: Store, user_id: int, new_plant: NewPlant) -> Plant:
    """Store the plant; a repeat of the very same plant is a no-op, a different one a 409."""
    tag = None if isinstance(new_plant.tag, UnsetType) else new_plant.tag
    record = PlantRecord(new_plant.id, new_plant.name, tag)
    outcome = await store.create_plant(user_id, record)
    if outcome is CreateOutcome.OVER_QUOTA:
        raise QuotaExceeded(
            "you already hold the most plants a user may (the per-user quota); delete some first"
        )
    if outcome is CreateOutcome.CONFLICT:
        raise Conflict(
            f"a plant with id {new_plant.id} already exists with a different name or tag"
        )
    return to_plant(record)


async def list_page(
    store: Store, codec: CursorCodec, user_id: int, limit: int, cursor: str | None
) -> Page:
    """Return up to ``limit`` plants after the cursor, and a cursor if more remain."""
    after_id = None if cursor is None else codec.decode(user_id, cursor)
    if limit == 0:
        return Page([], None)
    records = await store.list_plants(user_id, after_id, limit + 1)
    more = len(records) > limit
    records = records[:limit]
    next_cursor = codec.encode(user_id, records[-1].plant_id) if more else None
    return Page([to_plant(record) for record in records], next_cursor)
