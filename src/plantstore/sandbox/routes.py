"""``POST /sandbox/tokens``: a token for a fresh sandbox user, limited per client address.

The route exists only in sandbox mode (the app adds it then); without it the path is a 404
like any unknown one.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..http.responses import encoder, json_response
from ..http.routing import Route
from .issuer import SandboxIssuer


class SandboxRoutes:
    """The sandbox handler; ``start`` hands it the issuer once the database is open."""

    def start(self, issuer: SandboxIssuer) -> None:
        self._issuer = issuer

    def routes(self) -> list[Route]:
        return [Route("POST", "/sandbox/tokens", self.create_token)]

    async def create_token(self, request: Request) -> Response:
        return json_response(encoder.encode(await self._issuer.issue(request)))
