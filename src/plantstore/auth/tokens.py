"""Bearer tokens: how they look, how they are hashed, and how a request's header is read.

A token is ``pst_`` plus 256 random bits; only its SHA-256 is ever stored, and lookups go
by that hash, so a stolen database file yields no usable token.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from ..errors import InvalidToken, Unauthenticated

TOKEN_PREFIX = "pst_"
# A JWS in compact form: three base64url segments (an empty signature is not one).
JWT_SHAPE = re.compile(r"[A-Za-z0-9_-]{2,8192}\.[A-Za-z0-9_-]{2,8192}\.[A-Za-z0-9_-]{2,2048}")
# Our tokens, and JWTs (three base64url segments), are strict subsets of RFC 6750's b64token,
# so one shape check covers all three; the shape alone says which kind a token is.
_TOKEN_SHAPE = re.compile(rf"pst_[A-Za-z0-9_-]{{43}}|{JWT_SHAPE.pattern}")


def new_token() -> str:
    """Return a fresh token: the prefix plus 32 bytes from ``secrets`` (43 base64url chars)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """Return the hex SHA-256 under which a token is stored and looked up."""
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def is_jwt(token: str) -> bool:
    """Whether a well-formed token (``bearer_token``'s result) is a JWT, not one of ours."""
    return not token.startswith(TOKEN_PREFIX)


def bearer_token(authorization: str | None) -> str:
    """Return the well-formed token an Authorization header carries, or raise a 401."""
    if authorization is None:
        raise Unauthenticated("the Authorization header is missing; send 'Bearer <token>'")
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() != "bearer":
        raise Unauthenticated("the Authorization scheme must be Bearer")
    credentials = credentials.lstrip(" ")
    if not _TOKEN_SHAPE.fullmatch(credentials):
        raise InvalidToken()
    return credentials
