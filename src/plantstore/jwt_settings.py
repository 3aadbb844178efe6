"""The checks behind the ``PLANTSTORE_JWT_*`` settings, apart from ``settings.py``.

A service that would accept an HMAC or an unsigned token, or that has half a provider
configured, must not start: each check raises ``ValueError`` with the line to show.
"""

from __future__ import annotations

from urllib.parse import urlsplit

# Asymmetric signatures only: an HMAC "keyed" with a provider's public key, or `none`, would
# let anyone who can read the JWKS sign tokens.
ALLOWED_ALGORITHMS = frozenset(
    {
        "RS256",
        "RS384",
        "RS512",
        "PS256",
        "PS384",
        "PS512",
        "ES256",
        "ES384",
        "ES512",
        "EdDSA",
        "Ed25519",
    }
)
_JWKS_SCHEMES = ("https", "http", "file")


def check_jwks_url(url: str) -> None:
    """An ``https:``/``http:`` URL with a host, or a ``file:`` path."""
    parts = urlsplit(url)
    if parts.scheme not in _JWKS_SCHEMES or not (parts.netloc or parts.scheme == "file"):
        raise ValueError(f"{url!r} is not an https:, http: or file: address of a JWKS")
    if parts.scheme == "file" and not parts.path:
        raise ValueError(f"{url!r} names no file")


def check_algorithms(names: list[str]) -> None:
    """At least one algorithm, each an asymmetric signature joserfc verifies."""
    if not names:
        raise ValueError("name at least one algorithm, e.g. 'RS256,ES256,EdDSA'")
    refused = [name for name in names if name not in ALLOWED_ALGORITHMS]
    if refused:
        allowed = ", ".join(sorted(ALLOWED_ALGORITHMS))
        raise ValueError(f"{refused[0]!r} is not accepted; choose from {allowed}")


def check_jwt_settings(jwks_url: str | None, issuer: str | None, audience: str | None) -> None:
    """JWTs are on when all three are set, off when none is; half a provider is a mistake."""
    given = {"JWKS_URL": jwks_url, "ISSUER": issuer, "AUDIENCE": audience}
    missing = [name for name, value in given.items() if not (value or "").strip()]
    if missing and len(missing) < len(given):
        names = ", ".join(f"PLANTSTORE_JWT_{name}" for name in missing)
        raise ValueError(
            f"{names}: set PLANTSTORE_JWT_JWKS_URL, PLANTSTORE_JWT_ISSUER and "
            "PLANTSTORE_JWT_AUDIENCE together, or none of them"
        )
