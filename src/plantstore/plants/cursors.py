"""Paging cursors: the last id of a page plus a MAC over (user, id) with a key kept in the
database, so a cursor is opaque, survives restarts, and is useless to any other user.

The MAC is keyed BLAKE2b (RFC 7693's keyed mode is a MAC in itself). Cursors issued before it,
whose MAC was HMAC-SHA256, are still honoured, so a client paging through an upgrade goes on.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import struct

from ..errors import BadRequest

_CURSOR = struct.Struct(">q")
_SIGNED = struct.Struct(">qq")  # (user, last id): what the MAC covers
_MAC_BYTES = 16
_CURSOR_CHARS = 32  # base64url of 8 + 16 bytes, unpadded
# Exactly what ``encode`` writes: base64 decoding would also take "+" for "-" and "/" for "_".
_CURSOR_TEXT = re.compile(rf"[A-Za-z0-9_-]{{{_CURSOR_CHARS}}}")
_URLSAFE = bytes.maketrans(b"+/", b"-_")


class CursorCodec:
    """Sign and check paging cursors bound to one user."""

    def __init__(self, key: bytes) -> None:
        # Keyed once; each MAC copies the keyed state rather than keying again. BLAKE2b's keyed
        # mode is a MAC in one pass, where HMAC-SHA256 hashes twice.
        self._keyed = hashlib.blake2b(key=key, digest_size=_MAC_BYTES, person=b"plantstore-cur2")
        self._keyed_hmac = hmac.new(key, digestmod=hashlib.sha256)

    def encode(self, user_id: int, last_id: int) -> str:
        raw = _CURSOR.pack(last_id) + self._mac(user_id, last_id)
        # 24 bytes: base64 without padding, in the URL-safe alphabet
        return binascii.b2a_base64(raw, newline=False).translate(_URLSAFE).decode("ascii")

    def decode(self, user_id: int, cursor: str) -> int:
        """Return the last id the cursor carries, or raise a 400 if it is not this user's."""
        try:
            raw = base64.urlsafe_b64decode(cursor + "==") if _CURSOR_TEXT.fullmatch(cursor) else b""
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != _CURSOR.size + _MAC_BYTES:
            raise _not_issued()
        body, mac = raw[: _CURSOR.size], raw[_CURSOR.size :]
        (last_id,) = _CURSOR.unpack(body)
        if not hmac.compare_digest(mac, self._mac(user_id, last_id)) and not hmac.compare_digest(
            mac, self._hmac(user_id, body)
        ):
            raise _not_issued()
        return int(last_id)

    def _mac(self, user_id: int, last_id: int) -> bytes:
        """The MAC of (user, last id) a cursor carries."""
        mac = self._keyed.copy()
        mac.update(_SIGNED.pack(user_id, last_id))
        return mac.digest()

    def _hmac(self, user_id: int, body: bytes) -> bytes:
        """The MAC of a cursor issued before keyed BLAKE2b."""
        message = b"plantstore-cursor-v1" + _CURSOR.pack(user_id) + body
        mac = self._keyed_hmac.copy()
        mac.update(message)
        return mac.digest()[:_MAC_BYTES]


def _not_issued() -> BadRequest:
    return BadRequest("query parameter 'cursor' is not a cursor this service issued")
