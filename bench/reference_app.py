"""The ceiling: a bare ASGI app answering every request with a fixed 10-plant list.

Served by the same granian, on the same core, as the service, so the service's rates can be
reported as a fraction of what the server and the machine allow at that moment.

    granian --interface asgi --factory reference_app:create_app
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
START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(BODY)).encode()),
    ],
}
END = {"type": "http.response.body", "body": BODY}


def create_app() -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The app factory granian imports."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        await send(START)
        await send(END)

    return app
