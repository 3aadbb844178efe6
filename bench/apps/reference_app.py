"""The ceiling: a bare ASGI app answering every request with a fixed 10-plant list.

Served by the same granian, on the same core, as the service, so the service's rates can be
reported as a fraction of what the server and the machine allow at that moment.

    granian --interface asgi --factory bench.apps.reference_app:create_app
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

BODY = json.dumps([{"name": f"bench plant {i}", "tag": "b"} for i in range(10)]).encode()
START_HEADERS = [
    (b"content-type", b"application/json"),
    (b"content-length", str(len(BODY)).encode()),
]
START = {"type": "http.response.start", "status": 200, "headers": START_HEADERS}
END = {"type": "http.response.body", "body": BODY}


def create_app() -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The app factory granian imports."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        await send(START)
        await send(END)

    return app


def create_echo_app() -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The same answer, carrying back the request's ``X-Request-ID``: what ``scheduled.lua``
    needs to time a paced request from its due time. The floor of the paced list's tail: the
    p99 that granian and this machine allow at that rate (not the ceiling's app: the look at
    the headers costs a request a little)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        echoed = [(name, value) for name, value in scope["headers"] if name == b"x-request-id"]
        await send({**START, "headers": [*START_HEADERS, *echoed]})
        await send(END)

    return app
