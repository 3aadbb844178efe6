"""JWT access tokens from the identity provider: what makes one acceptable, and whose it is.

The JOSE library is **joserfc** (by the Authlib maintainer), chosen over PyJWT + cryptography:
- strict about algorithms: ``decode`` takes an explicit allow-list and refuses ``none``
  outright, and every algorithm demands its own key type, so an HS256 token "keyed" with an
  RSA or EC public key fails on the key type (joserfc will not even turn a public key into
  an HMAC secret); PyJWT guards the same confusion by sniffing PEM/SSH prefixes of the key;
- typed JWK and key-set objects to look keys up by ``kid`` ourselves, while PyJWT's
  ``PyJWKClient`` fetches the JWKS with blocking ``urllib`` (a long-standing upstream limit)
  and would stall the event loop;
- EdDSA (and RFC 9864's fully specified ``Ed25519``), ES*, RS*, PS* over ``cryptography``;
- a claims registry that checks ``iss``, ``aud``, ``exp``, ``nbf`` and ``iat`` (a token issued
  in the future is refused) with one leeway; typed (``py.typed``) and actively released.

Verification runs only on a cache miss (``auth/bearer.py`` keeps a verified token until its
``exp``), so its cost per token, not per request, is what matters.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

from joserfc import jws, jwt
from joserfc.errors import JoseError, SecurityWarning
from joserfc.jwt import JWTClaimsRegistry

from ...errors import InvalidToken
from .jwks import JwksCache

LEEWAY_SECONDS = 30  # the contract's allowance for clocks that disagree
_USER_NAME = re.compile(r"[^\x00-\x1f\x7f-\x9f]{1,256}")


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    """Who a valid token names, and until when it may be believed."""

    user: str
    issued_at: float
    usable_until: float  # ``exp`` plus the leeway


class JwtVerifier:
    """Checks a token's signature against the provider's keys, then its claims."""

    def __init__(
        self,
        keys: JwksCache,
        *,
        issuer: str,
        audience: str,
        algorithms: list[str],
        user_claim: str,
    ) -> None:
        self._keys = keys
        self._algorithms = frozenset(algorithms)
        self._user_claim = user_claim
        self._claims = JWTClaimsRegistry(
            leeway=LEEWAY_SECONDS,
            iss={"essential": True, "value": issuer},
            aud={"essential": True, "value": audience},
            exp={"essential": True},
        )

    async def verify(self, token: str) -> VerifiedToken:
        """The token's user; a 401 for anything short of valid, a 503 if no key can be had."""
        header = _header_of(token)
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in self._algorithms:
            raise InvalidToken()
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise InvalidToken()
        key = await self._keys.key_for(kid)
        try:
            with warnings.catch_warnings():
                # joserfc warns on each use of "EdDSA", which RFC 9864 deprecates in favour
                # of "Ed25519"; the contract names EdDSA, and providers still issue it.
                warnings.simplefilter("ignore", SecurityWarning)
                claims = jwt.decode(token, key, algorithms=[algorithm]).claims
            self._claims.validate(claims)
            issued_at = float(claims.get("iat") or 0)
            usable_until = float(claims["exp"]) + LEEWAY_SECONDS
        except (JoseError, ValueError, TypeError, KeyError):
            raise InvalidToken() from None
        return VerifiedToken(_user_of(claims.get(self._user_claim)), issued_at, usable_until)


def _header_of(token: str) -> dict[str, object]:
    """The protected header, read before any key is chosen (nothing in it is trusted yet)."""
    try:
        header = jws.extract_compact(token.encode("ascii")).protected
    except (JoseError, ValueError, TypeError):
        raise InvalidToken() from None
    if not isinstance(header, dict):
        raise InvalidToken()
    return header


def _user_of(claim: object) -> str:
    """The user claim must be a short string without control characters."""
    if not isinstance(claim, str) or not _USER_NAME.fullmatch(claim):
        raise InvalidToken("the bearer token names no usable user")
    return claim
