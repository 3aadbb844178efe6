"""Keep a connection usable after an early answer: read the rest of the request body first.

When a handler answers before reading the body (a 401, 404, 405 or 503 decided from the
headers), granian closes the keep-alive connection, and sometimes does so without a
``Connection: close`` header, so a client that sends its next request on it gets no answer.
This middleware reads what is left of the body, up to the body limit, before the response
starts; a body larger than that is not read, and the response says ``Connection: close``.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .parsing import body_length


class DrainUnreadBody:
    def __init__(self, app: ASGIApp, max_body_bytes: int, body_timeout: float) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = _declared_body_length(scope) if scope["type"] == "http" else 0
        if declared == 0:  # no body to leave unread (every GET): no wrapping at all
            await self.app(scope, receive, send)
            return
        oversized = declared is not None and declared > self.max_body_bytes  # never read it
        body_done = False

        async def tracked_receive() -> Message:
            nonlocal body_done
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def send_after_draining(message: Message) -> None:
            nonlocal body_done
            if message["type"] == "http.response.start" and not body_done:
                body_done = True
                # An answer that already closes the connection (a 408) needs no drain.
                closing = (b"connection", b"close") in message.get("headers", [])
                if not closing and (oversized or not await self._drain(receive)):
                    headers = list(message.get("headers", []))
                    headers.append((b"connection", b"close"))
                    message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, tracked_receive, send_after_draining)

    async def _drain(self, receive: Receive) -> bool:
        """Read the rest of the body; tell whether it ended within the limit and deadline."""
        try:
            async with asyncio.timeout(self.body_timeout):
                return await self._drain_within_limit(receive)
        except TimeoutError:
            return False  # a client that sends this slowly is not kept

    async def _drain_within_limit(self, receive: Receive) -> bool:
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return True  # the client went away; nothing left to read
            size += len(message.get("body", b""))
            if size > self.max_body_bytes:
                return False
            if not message.get("more_body", False):
                return True


def _declared_body_length(scope: Scope) -> int | None:
    """The Content-Length, 0 when the request has no body, None when chunked or unclear."""
    length = None
    for name, value in scope["headers"]:
        if name == b"content-length":
            length = value.decode("latin-1")
        elif name == b"transfer-encoding":
            return None
    return body_length(length, chunked=False)
