"""Paging cursors: the last id of a page plus an HMAC over (user, id) with a key kept in the
database, so a cursor is opaque, survives restarts, and is useless to any other user."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import struct

from ..errors import BadRequest

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
