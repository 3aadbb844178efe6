"""The one place an exception becomes an answer.

Every way a request is served ends here when it raises: the exact-match table in front of
Starlette (``dispatch``), Starlette's own handlers (``STARLETTE_HANDLERS``), a route served
from the server's native call and the observing layer's last resort (``ops/observe.py``).

- ``PlantstoreError`` (``errors.py``'s tree, the 503s of a failing environment included): its
  status, headers and message in the Error body;
- a client that left mid-body: no answer at all (the access log says 499);
- Starlette's routing misses: 404 and 405, with a stable ``Allow``;
- anything else is a fault of ours: a 500 whose details go to the log, never to the client.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from ..errors import PlantstoreError
from .responses import NO_ANSWER, error_response
from .scope import REQUEST_ID_KEY

log = logging.getLogger("plantstore.app")

_ROUTING_MESSAGES = {404: "no such path", 405: "method not allowed on this path"}


def answer_for(exc: BaseException, scope: Mapping[str, Any]) -> Response:
    """The answer to a request (``scope``) whose serving raised ``exc``."""
    if isinstance(exc, PlantstoreError):
        return error_response(exc.status, exc.message, exc.headers)
    if isinstance(exc, ClientDisconnect):
        return NO_ANSWER
    if isinstance(exc, HTTPException):
        return _routing_error(exc)
    request_id = scope.get(REQUEST_ID_KEY, b"-").decode("ascii")
    log.error(
        "unexpected fault on %s %s (request %s)",
        scope.get("method"),
        scope.get("path"),
        request_id,
        exc_info=exc,
    )
    return error_response(500, "internal server error")


async def _starlette_handler(request: Request, exc: Exception) -> Response:
    return answer_for(exc, request.scope)


# Starlette looks a handler up by the exception's class (``Exception``: its outermost layer).
STARLETTE_HANDLERS = {
    kind: _starlette_handler
    for kind in (ClientDisconnect, PlantstoreError, HTTPException, Exception)
}


def _routing_error(exc: HTTPException) -> Response:
    message = _ROUTING_MESSAGES.get(exc.status_code, exc.detail)
    headers = exc.headers
    if headers and "Allow" in headers:  # Starlette's is a set's order: it varies by process
        methods = sorted(method.strip() for method in headers["Allow"].split(","))
        headers = {**headers, "Allow": ", ".join(methods)}
    return error_response(exc.status_code, message, headers)
