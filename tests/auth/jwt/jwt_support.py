"""An identity provider made in the test: signing keys, a JWKS file, and tokens signed with them.

The keys are generated here (RSA, EC P-256, Ed25519) and published as a JWKS file that the
service reads through a ``file:`` URL, so each refusal can be made exactly: a token signed by
a key the provider does not publish, an HS256 token keyed with the published public key, an
``alg: none`` token, a payload changed after signing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import warnings
from pathlib import Path
from typing import Any

from joserfc import jwt
from joserfc.errors import SecurityWarning
from joserfc.jwk import ECKey, OKPKey, RSAKey

ISSUER = "https://id.example.test/realms/garden"
AUDIENCE = "https://plantstore.example.test"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims(sub: str | None = "alice", **changes: Any) -> dict[str, Any]:
    """Claims of a token valid for ten minutes; ``changes`` override or (``None``) drop one."""
    now = int(time.time())
    values: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": sub,
        "iat": now,
        "nbf": now,
        "exp": now + 600,
    }
    values.update(changes)
    return {name: value for name, value in values.items() if value is not None}


class TestProvider:
    """Keys by algorithm, their JWKS file, and a signer."""

    __test__ = False  # not a test class, despite its name

    def __init__(self, directory: Path, *, kid_suffix: str = "1") -> None:
        self.keys: dict[str, RSAKey | ECKey | OKPKey] = {
            "RS256": RSAKey.generate_key(2048, parameters={"kid": f"rsa-{kid_suffix}"}),
            "ES256": ECKey.generate_key("P-256", parameters={"kid": f"ec-{kid_suffix}"}),
            "EdDSA": OKPKey.generate_key("Ed25519", parameters={"kid": f"ed-{kid_suffix}"}),
        }
        self.jwks_path = directory / f"jwks-{kid_suffix}.json"
        self.publish()

    @property
    def jwks_url(self) -> str:
        return f"file://{self.jwks_path}"

    def publish(self) -> None:
        public = [key.as_dict(private=False) | {"use": "sig"} for key in self.keys.values()]
        self.jwks_path.write_text(json.dumps({"keys": public}))

    def settings(self) -> dict[str, str]:
        """The service's settings pointing at this provider (as keyword arguments)."""
        return {"jwt_jwks_url": self.jwks_url, "jwt_issuer": ISSUER, "jwt_audience": AUDIENCE}

    def env(self) -> dict[str, str]:
        return {f"PLANTSTORE_{name.upper()}": value for name, value in self.settings().items()}

    def sign(
        self,
        payload: dict[str, Any],
        alg: str = "RS256",
        signing_alg: str | None = None,
        **header: Any,
    ) -> str:
        """Sign with this provider's key for ``alg`` (under ``signing_alg`` if given)."""
        key, signing_alg = self.keys[alg], signing_alg or alg
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SecurityWarning)  # EdDSA's RFC 9864 notice
            return jwt.encode(
                {"alg": signing_alg, "kid": key.kid, **header}, payload, key, [signing_alg]
            )

    def token(self, sub: str | None = "alice", alg: str = "RS256", **changes: Any) -> str:
        return self.sign(claims(sub, **changes), alg)

    def hs256_keyed_with_public_key(self, sub: str = "alice", form: str = "pem") -> str:
        """The algorithm-confusion attack: an HMAC whose secret is the published RSA key."""
        public = self.keys["RS256"]
        secret = (
            public.as_pem(private=False)
            if form == "pem"
            else json.dumps(public.as_dict(private=False)).encode()
        )
        header = {"alg": "HS256", "kid": public.kid, "typ": "JWT"}
        return hmac_token(header, claims(sub), secret)

    def alg_none(self, sub: str = "alice") -> str:
        header = b64url(json.dumps({"alg": "none", "kid": self.keys["RS256"].kid}).encode())
        return f"{header}.{b64url(json.dumps(claims(sub)).encode())}."


def hmac_token(header: dict[str, Any], payload: dict[str, Any], secret: bytes) -> str:
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(payload).encode())}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


def tampered(token: str, **changes: Any) -> str:
    """The token with its payload changed after signing (the signature left as it was)."""
    header, payload, signature = token.split(".")
    values = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    values.update(changes)
    return f"{header}.{b64url(json.dumps(values).encode())}.{signature}"
