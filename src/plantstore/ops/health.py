"""``/healthz`` (the process is alive) and ``/readyz`` (the database answers), no token needed,
and their part of the OpenAPI document."""

from __future__ import annotations

import logging
from typing import Any, Protocol

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..db import describe_failure
from ..errors import StoreUnavailable
from ..http.responses import encoder, json_response
from ..openapi.parts import JSON, DocumentPart, ref, schemas_of

log = logging.getLogger(__name__)


class Status(msgspec.Struct):
    """The body of the health and readiness routes."""

    status: str


_OK = encoder.encode(Status("ok"))


class Pingable(Protocol):
    async def ping(self) -> None:
        """Raise if the database cannot serve requests."""


class HealthRoutes:
    """The probes; ``start`` hands them the database once it is open."""

    def start(self, database: Pingable) -> None:
        self._database = database

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/readyz", self.readyz, methods=["GET"]),
        ]

    async def healthz(self, request: Request) -> Response:
        return json_response(_OK)

    async def readyz(self, request: Request) -> Response:
        try:
            await self._database.ping()
        except StoreUnavailable:
            raise  # the store has logged the outage already
        except Exception as exc:
            log.warning("readiness check failed: %s", describe_failure(exc))
            raise StoreUnavailable("the database cannot be reached") from None
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
            "/readyz": {"get": _probe("readyz", "The store is reachable", needs_store=True)},
        },
        schemas=schemas_of([Status]),
        tags=[
            {
                "name": "operations",
                "description": "Probes for load balancers and orchestrators; no token needed.",
            }
        ],
    )
