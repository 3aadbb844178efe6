"""The identity provider's signing keys (its JWKS), fetched without blocking and kept fresh.

Fetched once at start (a failure is logged, not fatal), then again in the background before
the cache lifetime ends, and at once when a token names a ``kid`` we do not hold: at most one
such fetch per ``REFETCH_SECONDS``, so a flood of made-up ``kid``s cannot flood the provider.
Keys a later fetch cannot confirm are kept while the provider is unreachable: an outage of
the provider should not lock out every caller whose token it signed before.

Only asymmetric signing keys are taken from the set (RSA, EC, OKP, ``use`` absent or
``sig``); a symmetric ``oct`` key in a public document would let anyone sign.

HTTP goes through an ``aiohttp`` session (pooled, with timeouts; webhook delivery's client too) and a ``file:`` JWKS is read
in a thread, so the event loop never waits for either.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, OKPKey, RSAKey

from ...errors import InvalidToken, KeysUnavailable

log = logging.getLogger(__name__)

REFETCH_SECONDS = 10.0  # the least time between two fetches asked for by unknown kids
FETCH_TIMEOUT_SECONDS = 5.0
MAX_JWKS_BYTES = 1024 * 1024
PublicKey = RSAKey | ECKey | OKPKey
_KEY_TYPES: dict[str, type[PublicKey]] = {"RSA": RSAKey, "EC": ECKey, "OKP": OKPKey}


class JwksError(Exception):
    """The JWKS could not be fetched or read."""


class JwksCache:
    """The provider's public keys by ``kid``, as of the latest successful fetch."""

    def __init__(self, url: str, cache_seconds: float) -> None:
        self._url = url
        self._cache_seconds = cache_seconds
        self._keys: dict[str | None, PublicKey] = {}
        self._last_attempt = -math.inf  # monotonic time of the latest fetch, good or bad
        self._last_failed = False
        self._fetching: asyncio.Task[None] | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Fetch once (logging a failure) and keep the keys fresh in the background."""
        if urlsplit(self._url).scheme != "file":
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT_SECONDS), trust_env=False
            )
        await self.refresh()
        self._refresher = asyncio.get_running_loop().create_task(self._keep_fresh())

    async def close(self) -> None:
        for task in (self._refresher, self._fetching):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._http is not None:
            await self._http.close()

    async def key_for(self, kid: str | None) -> PublicKey:
        """The key a token's header names; a 401 if the provider has none such, a 503 if
        none can be had because the JWKS cannot be fetched."""
        key = self._find(kid)
        if key is None:
            await self._refetch_for_unknown_kid()
            key = self._find(kid)
        if key is not None:
            return key
        if self._last_failed:
            wait = self._last_attempt + REFETCH_SECONDS - time.monotonic()
            raise KeysUnavailable(math.ceil(wait))
        raise InvalidToken()

    async def _refetch_for_unknown_kid(self) -> None:
        """Wait for a fetch under way (a rotation's first tokens arrive together), or start
        one unless the last began less than REFETCH_SECONDS ago."""
        if self._fetching is not None and not self._fetching.done():
            await asyncio.shield(self._fetching)
        elif time.monotonic() - self._last_attempt >= REFETCH_SECONDS:
            await self.refresh()

    def _find(self, kid: str | None) -> PublicKey | None:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))  # a provider with one key may omit kids
        return self._keys.get(kid)

    async def refresh(self) -> None:
        """Fetch the JWKS now; requests arriving meanwhile share this one fetch."""
        if self._fetching is None or self._fetching.done():
            self._fetching = asyncio.get_running_loop().create_task(self._fetch())
        await asyncio.shield(self._fetching)

    async def _fetch(self) -> None:
        self._last_attempt = time.monotonic()
        try:
            keys = _keys_of(await self._read())
        except JwksError as exc:
            self._last_failed = True
            log.warning("cannot fetch the JWKS from %s: %s", self._url, exc)
            return
        self._last_failed = False
        self._keys = keys

    async def _read(self) -> bytes:
        parts = urlsplit(self._url)
        if parts.scheme == "file":
            try:
                return await asyncio.to_thread(_read_file, Path(unquote(parts.path)))
            except OSError as exc:
                raise JwksError(exc.strerror or str(exc)) from None
        assert self._http is not None
        headers = {"Accept": "application/json"}
        try:
            async with self._http.get(self._url, headers=headers, allow_redirects=False) as reply:
                if reply.status != 200:
                    raise JwksError(f"the provider answered {reply.status}")
                body = bytearray()
                async for chunk in reply.content.iter_chunked(65_536):
                    body += chunk
                    if len(body) > MAX_JWKS_BYTES:  # stop reading, whatever the length says
                        raise JwksError("the JWKS is larger than 1 MiB")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise JwksError(f"{type(exc).__name__}: {exc}") from None
        return bytes(body)

    async def _keep_fresh(self) -> None:
        """Refetch at 80 % of the cache lifetime; after a failure, every REFETCH_SECONDS."""
        while True:
            pause = REFETCH_SECONDS if self._last_failed else self._cache_seconds * 0.8
            await asyncio.sleep(pause)
            await self.refresh()


def _read_file(path: Path) -> bytes:
    with path.open("rb") as file:
        return file.read(MAX_JWKS_BYTES + 1)


def _keys_of(document: bytes) -> dict[str | None, PublicKey]:
    """The usable signing keys of a JWKS document, by ``kid``."""
    try:
        parsed: Any = json.loads(document)
    except ValueError:
        raise JwksError("the JWKS is not JSON") from None
    entries = parsed.get("keys") if isinstance(parsed, dict) else None
    if not isinstance(entries, list):
        raise JwksError("the JWKS has no 'keys' list")
    keys: dict[str | None, PublicKey] = {}
    for entry in entries:
        key = _public_key(entry)
        if key is not None:
            keys[key.kid] = key
    if not keys:
        raise JwksError("the JWKS holds no public signing key")
    return keys


def _public_key(entry: object) -> PublicKey | None:
    """An RSA, EC or OKP public key meant for signatures; None for anything else."""
    if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
        return None
    key_type = _KEY_TYPES.get(str(entry.get("kty")))
    if key_type is None:
        return None
    public = {name: value for name, value in entry.items() if name not in _PRIVATE_MEMBERS}
    try:
        return key_type.import_key(public)
    except (JoseError, ValueError, TypeError, KeyError) as exc:
        log.warning("skipping a JWKS key that cannot be read (kid %r): %s", entry.get("kid"), exc)
        return None


# A provider should publish none of these; if it does, we use the public half only.
_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth"})
