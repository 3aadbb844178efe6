"""Sending one webhook attempt with aiohttp, through a resolver that enforces the SSRF rule.

aiohttp connects to exactly the addresses its resolver returns, so ``GuardedResolver``
checking them is checking the connection itself: a name that answers differently now than
when the subscription was made (DNS rebinding) is refused all the same. A URL with a
literal address never reaches a resolver; it is checked here before sending.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from .addresses import RefusedAddress, is_public, literal_address
from .answer import CONNECT_TIMEOUT, TOTAL_TIMEOUT, Answer

_READ_AT_MOST = 65_536  # of a receiver's answer: enough to reuse the connection, no more
USER_AGENT = "plantstore-webhooks/1"


class GuardedResolver(AbstractResolver):
    """The default resolver, refusing any answer with a non-global address in it."""

    def __init__(self, allow_private: bool) -> None:
        self._inner = DefaultResolver()
        self._allow_private = allow_private

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        if not self._allow_private:
            for result in results:
                address = literal_address(result["host"])
                if address is None or not is_public(address):
                    raise RefusedAddress(f"{host} resolves to a non-global address")
        return results

    async def close(self) -> None:
        await self._inner.close()


def new_session(allow_private: bool) -> aiohttp.ClientSession:
    """Pooled connections (our own semaphores bound concurrency), timeouts, no cookies."""
    connector = aiohttp.TCPConnector(
        resolver=GuardedResolver(allow_private), limit=0, ttl_dns_cache=10
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=TOTAL_TIMEOUT, sock_connect=CONNECT_TIMEOUT),
        cookie_jar=aiohttp.DummyCookieJar(),
        headers={"User-Agent": USER_AGENT},
        auto_decompress=False,
    )


async def post(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    body: bytes,
    allow_private: bool,
) -> Answer:
    """POST once; never follows a redirect, never raises."""
    started = time.monotonic()
    try:
        host = urlsplit(url).hostname or ""
        literal = literal_address(host)
        if literal is not None and not allow_private and not is_public(literal):
            raise RefusedAddress(f"{host} is not a global address")
        async with session.post(url, data=body, headers=headers, allow_redirects=False) as response:
            await response.content.read(_READ_AT_MOST)
            return Answer(
                response.status,
                response.headers.get("Retry-After"),
                None,
                time.monotonic() - started,
            )
    except Exception as exc:
        return Answer(None, None, _describe(exc), time.monotonic() - started)


def _describe(exc: BaseException) -> str:
    """A short error without the URL's query or any header (no secrets in records or logs)."""
    refused = exc if isinstance(exc, RefusedAddress) else exc.__cause__
    if isinstance(refused, RefusedAddress):
        return f"refused: {refused}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect: {exc.os_error.strerror or type(exc.os_error).__name__}"
    return type(exc).__name__
