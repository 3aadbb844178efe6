"""The service as granian's RSGI app: each call handed to the ASGI layers, or to a native route.

granian's ASGI glue builds every request's scope, and carries every body chunk and answer, as
awaited messages through its Rust futures; its own interface (RSGI) hands the request over in
one call and takes the answer in one. ``RSGIBridge`` makes each RSGI call an ASGI one, with
a scope, ``receive`` and ``send`` of plain Python, so every layer and route of the service
runs unchanged; a route given as native (``NativeRoute``) is served straight from the RSGI
call instead, with no ASGI messages at all. The bridge also runs the app's lifespan.

What granian's RSGI hands over differs from its ASGI scope:

- a request without ``Host`` has none (ASGI: an empty one); the observing layer accepts
  either for HTTP/1.0;
- only header values of visible ASCII are there (ASGI: any bytes); a value that is left out
  reads as missing, so it is refused as it would be when malformed (401, 415, 400);
- a body that breaks off (its framing fails, its client leaves) ends like a whole one, but
  for an empty chunk: ``_Body`` tells the two apart and says ``http.disconnect``, as ASGI
  does, so nothing is made of a broken body.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from granian._granian import RSGIProtocolClosed as ProtocolClosed
from granian._granian import RSGIProtocolError as ProtocolError
from granian.asgi import LifespanProtocol
from starlette.types import ASGIApp, Message, Scope

from .parsing import body_length
from .responses import rsgi_headers
from .scope import RSGI_HEADERS_KEY

log = logging.getLogger("plantstore.app")

_START = "http.response.start"
_BODY = "http.response.body"
_DISCONNECT: Message = {"type": "http.disconnect"}
_NO_BODY: Message = {"type": "http.request", "body": b"", "more_body": False}


class RSGIHeaders(Protocol):
    def get(self, key: str, default: Any = None) -> Any: ...

    def get_all(self, key: str) -> list[str]: ...

    def items(self) -> list[tuple[str, str]]: ...

    def __contains__(self, key: str) -> bool: ...


class RSGIScope(Protocol):
    """What granian's RSGI hands an HTTP request over as (``granian.rsgi.Scope``)."""

    proto: str
    http_version: str
    client: str
    server: str
    scheme: str
    method: str
    path: str
    query_string: str

    @property
    def headers(self) -> RSGIHeaders: ...


class RSGIStream(Protocol):
    async def send_bytes(self, data: bytes) -> None: ...


class RSGIProtocol(Protocol):
    """The answering side of an RSGI call (``granian.rsgi.HTTPProtocol``)."""

    def __aiter__(self) -> Any: ...

    async def client_disconnect(self) -> None: ...

    def response_bytes(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None: ...

    def response_stream(self, status: int, headers: list[tuple[str, str]]) -> RSGIStream: ...


# A native route: True once it has answered; False to leave the request to the ASGI layers
# (decided before it reads anything: an unusual request goes the general way).
NativeRoute = Callable[[RSGIScope, RSGIProtocol], Awaitable[bool]]


class RSGIBridge:
    """RSGI app: ``native`` routes (by method and path) served directly, the rest by ``app``."""

    def __init__(
        self, app: ASGIApp, native: Mapping[tuple[str, str], NativeRoute] | None = None
    ) -> None:
        self._app = app
        self._native = dict(native or {})
        self._lifespan = LifespanProtocol(app)  # type: ignore[no-untyped-call]  # granian's own

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the app's lifespan startup before the first request, as granian's ASGI does."""
        loop.run_until_complete(self._lifespan.startup())  # type: ignore[no-untyped-call]
        if self._lifespan.interrupt:
            log.error("the service did not start", exc_info=self._lifespan.exc)
            sys.exit(1)

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.run_until_complete(self._lifespan.shutdown())  # type: ignore[no-untyped-call]

    async def __rsgi__(self, scope: RSGIScope, protocol: RSGIProtocol) -> None:
        native = self._native.get((scope.method, scope.path))
        if native is not None and await native(scope, protocol):
            return
        await self._bridge(scope, protocol)

    async def _bridge(self, rsgi: RSGIScope, protocol: RSGIProtocol) -> None:
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": rsgi.http_version,
            "server": address(rsgi.server),
            "client": address(rsgi.client),
            "scheme": rsgi.scheme,
            "method": rsgi.method,
            "root_path": "",
            "path": rsgi.path,
            "raw_path": rsgi.path.encode(),
            "query_string": rsgi.query_string.encode(),
            "headers": asgi_headers(rsgi.headers),
            "state": self._lifespan.state.copy(),
            RSGI_HEADERS_KEY: rsgi.headers,
        }
        body = _Body(protocol, declared_length(rsgi.headers))
        answer = _Answer(protocol)
        await self._app(scope, body.receive, answer.send)


def asgi_headers(headers: RSGIHeaders) -> list[tuple[bytes, bytes]]:
    """The headers as ASGI lists them (their values are visible ASCII under RSGI)."""
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


def address(text: str) -> tuple[str, int] | None:
    """``host:port`` (``[v6]:port``) as ASGI's pair; None for what is neither."""
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit():
        return None
    return host.removeprefix("[").removesuffix("]"), int(port)


def declared_length(headers: RSGIHeaders) -> int | None:
    """The body's Content-Length; 0 when there is no body, None when it is chunked or unclear."""
    return body_length(headers.get("content-length"), "transfer-encoding" in headers)


class _Body:
    """ASGI ``receive`` over the RSGI body: its chunks, then ``http.disconnect`` once the
    client has gone; a body that broke off is ``http.disconnect`` at once.

    granian's RSGI body iterator yields an empty chunk where the body stream ends, and also
    where it fails (framing that breaks, a client that leaves mid-body) or carries trailers,
    and then ends as if whole. So an empty chunk is a clean end only when the iterator stops
    right after it; otherwise the body is taken as broken (trailers, which request bodies all
    but never carry, with it).
    """

    def __init__(self, protocol: RSGIProtocol, declared: int | None) -> None:
        self._protocol = protocol
        self._declared = declared
        self._chunks: Any = None
        self._read = 0
        self._done = declared == 0
        self._said_empty = False  # a bodiless request's one empty message
        self._broken = False

    async def receive(self) -> Message:
        if not self._done:
            return await self._next_chunk()
        if self._declared == 0 and not self._said_empty:
            self._said_empty = True
            return _NO_BODY
        if not self._broken:
            await self._protocol.client_disconnect()
        return _DISCONNECT

    async def _next_chunk(self) -> Message:
        if self._chunks is None:
            self._chunks = self._protocol.__aiter__()
        try:
            chunk = await self._pull()
            whole = chunk is None or (chunk == b"" and await self._pull() is None)
        except (ProtocolClosed, ProtocolError):
            chunk, whole = None, False
        if chunk:
            self._read += len(chunk)
            if self._declared is not None and self._read >= self._declared:
                self._done = True
                return {"type": "http.request", "body": chunk, "more_body": False}
            return {"type": "http.request", "body": chunk, "more_body": True}
        self._done = True
        if whole and (self._declared is None or self._read == self._declared):
            return _NO_BODY
        self._broken = True
        return _DISCONNECT

    async def _pull(self) -> bytes | None:
        """The next chunk; None once the iterator has stopped."""
        try:
            chunk: bytes = await self._chunks.__anext__()
        except StopAsyncIteration:
            return None
        return chunk


class _Answer:
    """ASGI ``send`` over the RSGI answer: whole in one call, or streamed when it comes in
    parts. A client that has gone cannot be answered, and is not an error."""

    def __init__(self, protocol: RSGIProtocol) -> None:
        self._protocol = protocol
        self._status = 500
        self._headers: list[tuple[str, str]] = []
        self._stream: RSGIStream | None = None

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == _START:
            self._status = message["status"]
            self._headers = rsgi_headers(message.get("headers", ()))
            return
        if kind != _BODY:
            return
        body: bytes = message.get("body", b"")
        try:
            if self._stream is None:
                if not message.get("more_body", False):
                    self._protocol.response_bytes(self._status, self._headers, body)
                    return
                self._stream = self._protocol.response_stream(self._status, self._headers)
            if body:
                await self._stream.send_bytes(body)
        except (ProtocolClosed, ProtocolError):
            return
