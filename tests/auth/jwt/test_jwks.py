"""The JWKS cache against a real HTTP server that counts its fetches: unknown kids refetch at
most once per interval, a burst of them shares one fetch, keys survive an outage of the
provider, and no key because of an outage is a 503, not a 401."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from joserfc.jwk import ECKey

from plantstore.auth.jwt import jwks
from plantstore.auth.jwt.jwks import JwksCache
from plantstore.errors import InvalidToken, KeysUnavailable


class Provider:
    """What the server answers, and how many fetches it has seen."""

    def __init__(self) -> None:
        self.status = 200
        self.keys: list[dict[str, Any]] = []
        self.fetches = 0
        self.document: Any = None  # served as it is, instead of the keys, when set

    def publish(self, *kids: str) -> None:
        self.keys = [
            ECKey.generate_key("P-256", parameters={"kid": kid}).as_dict(private=False)
            for kid in kids
        ]


@pytest.fixture
def provider() -> Iterator[tuple[Provider, str]]:
    state = Provider()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.fetches += 1
            document = state.document if state.document is not None else {"keys": state.keys}
            body = json.dumps(document).encode()
            self.send_response(state.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/jwks"
    finally:
        server.shutdown()
        server.server_close()


async def outcomes(cache: JwksCache, kid: str, count: int) -> set[str]:
    async def one() -> str:
        try:
            return str((await cache.key_for(kid)).kid)
        except InvalidToken:
            return "401"
        except KeysUnavailable:
            return "503"

    return set(await asyncio.gather(*(one() for _ in range(count))))


def test_unknown_kids_refetch_at_most_once_per_interval_and_share_a_fetch(
    provider: tuple[Provider, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state, url = provider
    state.publish("a")

    async def scenario() -> None:
        cache = JwksCache(url, cache_seconds=300)
        await cache.start()
        try:
            assert state.fetches == 1
            assert await outcomes(cache, "a", 5) == {"a"}
            assert await outcomes(cache, "made-up", 50) == {"401"}
            assert state.fetches == 1  # within the interval: no refetch, however many ask

            monkeypatch.setattr(jwks, "REFETCH_SECONDS", 0.2)
            await asyncio.sleep(0.3)
            state.publish("b")  # the provider rotated its key
            assert await outcomes(cache, "b", 20) == {"b"}
            assert state.fetches == 2  # the burst shared one fetch

            state.status = 503  # the provider goes away
            await asyncio.sleep(0.3)
            assert await outcomes(cache, "c", 5) == {"503"}
            assert await outcomes(cache, "b", 5) == {"b"}  # keys already fetched still serve
        finally:
            await cache.close()

    asyncio.run(scenario())


def test_a_provider_down_at_start_is_not_fatal(provider: tuple[Provider, str]) -> None:
    state, url = provider
    state.status = 500

    async def scenario() -> set[str]:
        cache = JwksCache(url, cache_seconds=300)
        await cache.start()
        try:
            return await outcomes(cache, "any", 3)
        finally:
            await cache.close()

    assert asyncio.run(scenario()) == {"503"}


@pytest.mark.parametrize(
    "document",
    [
        {"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}]},  # symmetric: never used
        {"keys": []},
        {"no": "keys"},
        ["not", "an", "object"],
    ],
)
def test_a_jwks_without_a_public_signing_key_is_a_failed_fetch(
    provider: tuple[Provider, str], document: Any
) -> None:
    state, url = provider
    state.document = document

    async def scenario() -> set[str]:
        cache = JwksCache(url, cache_seconds=300)
        await cache.start()
        try:
            return await outcomes(cache, "h", 1)
        finally:
            await cache.close()

    assert asyncio.run(scenario()) == {"503"}


def test_a_jwks_over_one_mebibyte_is_a_failed_fetch(provider: tuple[Provider, str]) -> None:
    """A key published beside 1 MiB of padding is never taken: the read stops at the limit."""
    state, url = provider
    state.publish("big")

    async def first_fetch() -> set[str]:
        cache = JwksCache(url, cache_seconds=300)
        await cache.start()
        try:
            return await outcomes(cache, "big", 1)
        finally:
            await cache.close()

    state.document = {"keys": state.keys, "padding": "x" * jwks.MAX_JWKS_BYTES}
    assert asyncio.run(first_fetch()) == {"503"}
    state.document = {"keys": state.keys}  # the same key, without the padding, is taken
    assert asyncio.run(first_fetch()) == {"big"}


def test_keys_are_refreshed_in_the_background_before_the_cache_lifetime_ends(
    provider: tuple[Provider, str],
) -> None:
    state, url = provider
    state.publish("a")

    async def scenario() -> set[str]:
        cache = JwksCache(url, cache_seconds=0.5)  # refetched every 0.4 s, unasked
        await cache.start()
        try:
            state.publish("b")  # rotated; nobody has asked for "b" yet
            await asyncio.sleep(1.0)
            fetched = state.fetches
            state.status = 503  # from now on only the earlier fetches count
            assert fetched >= 2
            return await outcomes(cache, "b", 3)
        finally:
            await cache.close()

    assert asyncio.run(scenario()) == {"b"}
