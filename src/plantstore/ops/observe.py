"""The outermost layer: a request id, the request metrics, one access-log line, the last
resort for a fault no layer answered (``http/boundary.py`` says how), and the 400 for a request
that does not carry exactly one Host. ``Observe.native`` gives a route served straight from
granian's RSGI call (``http/rsgi.py``) the same.

The request id is the caller's ``X-Request-ID`` when it is a short token of safe characters
(so a proxy's id follows the request through), or else a fresh one; it is returned on the
answer either way. The route is the template (``/plants/{id}``), never the raw path, so
neither metrics nor logs grow with the ids callers send. The user is the caller's user id
once the token is known; the token itself is never logged.

It wraps the whole service, Starlette included, so it is also where a fault that escaped
every other layer before any answer started is answered. Starlette's own outer layer answers
faults of the routes it serves (and re-raises them) through the same boundary.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from typing import Any

from starlette.datastructures import State
from starlette.requests import Request, empty_send
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..http.boundary import answer_for
from ..http.dispatch import Handler
from ..http.responses import NO_ANSWER, JSONBytes, error_response, rsgi_headers
from ..http.rsgi import (
    NativeRoute,
    RSGIProtocol,
    RSGIScope,
    address,
    asgi_headers,
    declared_length,
)
from ..http.scope import REQUEST_ID_KEY, ROUTE_KEY, USER_KEY
from . import metrics
from .logs import AccessLine, AccessLog

CLIENT_CLOSED = 499
_SAFE_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:/+=-]{1,128}")


class Observe:
    """ASGI app around the whole service; ``access_log`` None turns the log lines off.

    ``state`` is the Starlette app's, so that the service keeps Starlette's ``app.state``.
    """

    def __init__(self, app: ASGIApp, access_log: AccessLog | None, state: State) -> None:
        self.app = app
        self.state = state
        self._access_log = access_log
        self._metrics = metrics.RequestMetrics()
        self._tally = metrics.TALLY
        _new_id_prefix()  # made in each worker, after its fork: ids no other worker makes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id, hosts, empty_host = _request_id_and_hosts(scope["headers"])
        scope[REQUEST_ID_KEY] = request_id
        id_header = (b"x-request-id", request_id)
        status = 0  # until the answer starts

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), id_header]
            await send(message)

        # HTTP/1.0 needs no Host (RFC 9112 section 3.2); granian's ASGI hands it an empty one
        http_1_0 = scope.get("http_version") in _HTTP_1_0
        good_host = (hosts == 1 and (not empty_host or http_1_0)) or (hosts == 0 and http_1_0)
        app = self.app if good_host else _BAD_HOST
        self._tally.started()
        try:
            await app(scope, receive, send_with_id)
        except Exception as exc:
            if status:
                raise  # answered already (by Starlette's outer layer, which re-raises)
            await answer_for(exc, scope)(scope, receive, send_with_id)
        except BaseException:
            status = status or 500
            raise
        finally:
            self._tally.finished()
            # 499, as nginx logs it: the client left before an answer could start.
            self._record(scope, status or CLIENT_CLOSED, time.perf_counter() - started)

    def native(self, handler: Handler, route: str) -> NativeRoute:
        """``handler`` (for a request without a body) served from granian's RSGI call as it
        comes: the same request id, metrics, access line and error answers as through
        ``__call__``, with no ASGI messages, and a request whose scope is filled in only as
        far as the handler reads it. A request with a body, or without exactly one Host, is
        left to the ASGI layers (the native route answers False)."""

        async def serve(rsgi: RSGIScope, protocol: RSGIProtocol) -> bool:
            headers = rsgi.headers
            hosts = headers.get_all("host")
            if len(hosts) != 1 or not hosts[0] or declared_length(headers) != 0:
                return False
            started = time.perf_counter()
            scope = _NativeScope(rsgi, _native_request_id(headers.get("x-request-id")), route)
            status = CLIENT_CLOSED  # until there is an answer
            self._tally.started()
            try:
                try:
                    response = await handler(_NativeRequest(scope, headers))
                except Exception as exc:
                    response = answer_for(exc, scope)
                if response is NO_ANSWER:
                    return True
                status = response.status_code
                if isinstance(response, JSONBytes):
                    answer = response.text_headers()
                else:
                    answer = rsgi_headers(response.raw_headers)
                answer.append(("x-request-id", scope[REQUEST_ID_KEY].decode("ascii")))
                protocol.response_bytes(status, answer, bytes(response.body))
            finally:
                self._tally.finished()
                self._note(
                    scope[REQUEST_ID_KEY],
                    rsgi.method,
                    route,
                    status,
                    time.perf_counter() - started,
                    scope.get(USER_KEY),
                )
            return True

        return serve

    def _record(self, scope: Scope, status: int, seconds: float) -> None:
        self._note(
            scope[REQUEST_ID_KEY],
            scope["method"],
            _route_of(scope),
            status,
            seconds,
            scope.get(USER_KEY),
        )

    def _note(
        self,
        request_id: bytes,
        method: str,
        route: str,
        status: int,
        seconds: float,
        user: int | None,
    ) -> None:
        """The request's metrics and access line."""
        self._metrics.observe(method, route, status, seconds)
        if self._access_log is not None:
            self._access_log.write(
                AccessLine(
                    request_id.decode("ascii"),
                    method,
                    route,
                    status,
                    round(seconds * 1e6) / 1000,  # ms to the µs, without round(x, 3)'s dtoa
                    user,
                )
            )


# A fresh id is this process's random prefix and a count: unique without a system call each.
_ID_PREFIX = b""
_ID_COUNT = itertools.count()


def _new_id_prefix() -> None:
    """A prefix of this process's own (forked workers must not repeat their parent's ids)."""
    global _ID_PREFIX, _ID_COUNT
    _ID_PREFIX = os.urandom(6).hex().encode("ascii")
    _ID_COUNT = itertools.count(int.from_bytes(os.urandom(3), "big"))


_new_id_prefix()


def _request_id_and_hosts(headers: list[tuple[bytes, bytes]]) -> tuple[bytes, int, bool]:
    """The request's id; how many ``Host`` lines it carries, and whether one is empty.

    granian hands a request that has no Host an empty one, so both read as empty here: a
    400 for HTTP/1.1, fine for HTTP/1.0, which needs no Host (RFC 9112 section 3.2).
    """
    request_id = None
    hosts = 0
    empty_host = False
    for name, value in headers:
        if name == b"host":
            hosts += 1
            empty_host = empty_host or not value
        elif name == b"x-request-id" and request_id is None and _SAFE_REQUEST_ID.fullmatch(value):
            request_id = value
    if request_id is None:
        request_id = _fresh_id()
    return request_id, hosts, empty_host


def _native_request_id(sent: str | None) -> bytes:
    if sent is not None:
        value = sent.encode("latin-1", "replace")
        if _SAFE_REQUEST_ID.fullmatch(value):
            return value
    return _fresh_id()


def _fresh_id() -> bytes:
    return b"%s%012x" % (_ID_PREFIX, next(_ID_COUNT))


class _NativeScope(dict[str, Any]):
    """The ASGI scope of a native route's request, built from the RSGI one: its query string
    at once (every native route reads it), the rest as far as it is read (a caller the token
    cache does not know reads its address, and behind a trusted proxy its header list)."""

    __slots__ = ("_rsgi",)

    def __init__(self, rsgi: RSGIScope, request_id: bytes, route: str) -> None:
        # Item by item, not dict's keyword call: half the cost, on every native request.
        self["type"] = "http"
        self[REQUEST_ID_KEY] = request_id
        self[ROUTE_KEY] = route
        self["query_string"] = rsgi.query_string.encode()  # every native route reads it
        self._rsgi = rsgi

    def __missing__(self, key: str) -> Any:
        rsgi = self._rsgi
        if key == "client":
            value: Any = address(rsgi.client)
        elif key == "headers":
            value = asgi_headers(rsgi.headers)
        elif key in _RSGI_FIELDS:
            value = getattr(rsgi, key)
        elif key == "root_path":
            value = ""
        elif key == "server":
            value = None
        else:
            raise KeyError(key)
        self[key] = value
        return value

    def get(self, key: str, default: Any = None) -> Any:  # dict.get skips __missing__
        # No KeyError raised and caught for a key that is not there: a request asks for
        # several such (the RSGI header map, the user before one is known), and each raise
        # cost it more than building the scope.
        if key in self or key in _LAZY:
            return self[key]
        return default


_RSGI_FIELDS = frozenset({"http_version", "method", "scheme", "path"})
_LAZY = frozenset({"client", "headers", "root_path", "server", *_RSGI_FIELDS})


class _NativeRequest(Request):
    """A Starlette request whose headers are read from granian's own map, unconverted, made
    with no more than its scope (it has no body to receive)."""

    def __init__(self, scope: _NativeScope, headers: Any) -> None:
        self.scope = scope
        self._rsgi_headers = headers
        self._receive = _no_body
        self._send = empty_send
        self._stream_consumed = False
        self._is_disconnected = False
        self._form = None

    @property
    def headers(self) -> Any:
        return self._rsgi_headers


async def _no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


_HTTP_1_0 = ("1.0", "1")  # granian writes HTTP/1.0 as "1"
_BAD_HOST = error_response(
    400,
    "the request must carry exactly one Host header, with a value (RFC 9112 section 3.2)",
    {"Connection": "close"},
)


def _route_of(scope: Scope) -> str:
    route = scope.get(ROUTE_KEY)
    if route is not None:
        return str(route)
    matched = scope.get("route")  # Starlette's router puts the matched route here
    path = getattr(matched, "path", None)
    return metrics.UNMATCHED_ROUTE if path is None else str(path)
