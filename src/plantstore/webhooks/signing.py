"""Standard Webhooks v1 signing: ``whsec_`` secrets and the three ``webhook-*`` headers."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """``whsec_`` and the base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,`` and the base64 HMAC-SHA256 of ``{id}.{timestamp}.{body}``."""
    signed = b"%s.%d.%s" % (msg_id.encode("ascii"), timestamp, body)
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signed_headers(
    secrets_in_use: tuple[str, ...], msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The headers of one attempt; during a rotation, one signature per secret."""
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(
            signature(secret, msg_id, timestamp, body) for secret in secrets_in_use
        ),
    }
