"""``/healthz`` (the process is alive) and ``/readyz`` (the database takes writes now), no
token needed, and their part of the OpenAPI document."""

from __future__ import annotations

from typing import Any, Protocol

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from ..http.responses import encoder, json_response
from ..http.routing import Route
from ..openapi.parts import JSON, DocumentPart, ref, schemas_of


class Status(msgspec.Struct):
    """The body of the health and readiness routes."""

    status: str


_OK = encoder.encode(Status("ok"))


class Ready(Protocol):
    async def ready(self) -> None:
        """Raise ``StoreUnavailable`` if a write cannot be taken now."""


class HealthRoutes:
    """The probes; ``start`` hands them the database once it is open."""

    def start(self, database: Ready) -> None:
        self._database = database

    def routes(self) -> list[Route]:
        return [Route("GET", "/healthz", self.healthz), Route("GET", "/readyz", self.readyz)]

    async def healthz(self, request: Request) -> Response:
        return json_response(_OK)

    async def readyz(self, request: Request) -> Response:
        await self._database.ready()  # a 503 that names the trouble while writes cannot succeed
        return json_response(_OK)


def _probe(operation_id: str, summary: str, *, needs_store: bool) -> dict[str, Any]:
    responses: dict[str, Any] = {
        "200": {"description": "OK", "content": {JSON: {"schema": ref("Status")}}}
    }
    if needs_store:
        responses["503"] = {"$ref": "#/components/responses/Unavailable"}
    return {
        "operationId": operation_id,
        "summary": summary,
        "security": [],
        "tags": ["operations"],
        "responses": responses,
    }


def document_part() -> DocumentPart:
    return DocumentPart(
        paths={
            "/healthz": {"get": _probe("healthz", "The process is alive", needs_store=False)},
            "/readyz": {"get": _probe("readyz", "The database takes writes now", needs_store=True)},
        },
        schemas=schemas_of([Status]),
        tags=[
            {
                "name": "operations",
                "description": "Probes for load balancers and orchestrators; no token needed.",
            }
        ],
    )
