"""The outermost middleware: a request id, the request metrics and one access-log line.

The request id is the caller's ``X-Request-ID`` when it is a short token of safe characters
(so a proxy's id follows the request through), or else a fresh one; it is returned on the
answer either way. The route is the template (``/plants/{id}``), never the raw path, so
neither metrics nor logs grow with the ids callers send. The user is the caller's user id
once the token is known; the token itself is never logged.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import metrics

REQUEST_ID_KEY = "plantstore.request_id"
ROUTE_KEY = "plantstore.route"  # set by PlantRoutes, which routes without Starlette
USER_KEY = "plantstore.user_id"  # set by the Authenticator
CLIENT_CLOSED = 499
_SAFE_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:/+=-]{1,128}")


class Observe:
    """ASGI middleware around the whole app; ``access_log`` None turns the log lines off."""

    def __init__(self, app: ASGIApp, access_log: Any | None) -> None:
        self.app = app
        self._access_log = access_log
        self._metrics = metrics.RequestMetrics()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = _request_id(scope["headers"])
        scope[REQUEST_ID_KEY] = request_id
        id_header = (b"x-request-id", request_id)
        status = 0  # until the answer starts

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), id_header]
            await send(message)

        metrics.IN_FLIGHT.inc()
        try:
            await self.app(scope, receive, send_with_id)
        except BaseException:
            status = status or 500  # Starlette's outer layer answers it so
            raise
        finally:
            metrics.IN_FLIGHT.dec()
            # 499, as nginx logs it: the client left before an answer could start.
            self._record(scope, status or CLIENT_CLOSED, time.perf_counter() - started)

    def _record(self, scope: Scope, status: int, seconds: float) -> None:
        route = _route_of(scope)
        self._metrics.observe(scope["method"], route, status, seconds)
        if self._access_log is not None:
            self._access_log.info(
                "request",
                request_id=scope[REQUEST_ID_KEY].decode("ascii"),
                method=scope["method"],
                route=route,
                status=status,
                duration_ms=round(seconds * 1000, 3),
                user_id=scope.get(USER_KEY),
            )


def _request_id(headers: list[tuple[bytes, bytes]]) -> bytes:
    for name, value in headers:
        if name == b"x-request-id" and _SAFE_REQUEST_ID.fullmatch(value):
            return value
    return os.urandom(12).hex().encode("ascii")


def _route_of(scope: Scope) -> str:
    route = scope.get(ROUTE_KEY)
    if route is not None:
        return str(route)
    matched = scope.get("route")  # Starlette's router puts the matched route here
    path = getattr(matched, "path", None)
    return metrics.UNMATCHED_ROUTE if path is None else str(path)
