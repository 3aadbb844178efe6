"""CORS for docs sites and browser apps on other origins, answered in the contract's shapes.

Starlette's middleware does the work; only its preflight answers change: an allowed one is a
204 with no body (not a text/plain "OK"), a refused one a 400 with the Error body.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp

from .responses import error_response

ALLOWED_METHODS = ("GET", "POST", "DELETE")
ALLOWED_HEADERS = ("Authorization", "Content-Type", "X-Request-ID")
# Answer headers a browser script may read: paging, back-off, auth challenges, request ids.
EXPOSED_HEADERS = ("Link", "Retry-After", "WWW-Authenticate", "X-Request-ID")
PREFLIGHT_CACHE_SECONDS = 600


class ContractCORS(CORSMiddleware):
    """``CORSMiddleware`` with the service's methods and headers, and contract-shaped preflights."""

    def __init__(self, app: ASGIApp, allow_origins: Sequence[str]) -> None:
        super().__init__(
            app,
            allow_origins=allow_origins,
            allow_methods=ALLOWED_METHODS,
            allow_headers=ALLOWED_HEADERS,
            expose_headers=EXPOSED_HEADERS,
            max_age=PREFLIGHT_CACHE_SECONDS,
        )

    def preflight_response(self, request_headers: Headers) -> Response:
        answer = super().preflight_response(request_headers)
        headers = {
            name: value
            for name, value in answer.headers.items()
            if name not in ("content-length", "content-type")
        }
        if answer.status_code == 200:
            return Response(status_code=204, headers=headers)
        refused = bytes(answer.body).decode().removeprefix("Disallowed CORS ")
        return error_response(400, f"CORS preflight refused: {refused} not allowed", headers)
