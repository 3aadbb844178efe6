"""Operational routes, no token needed: health, readiness, the OpenAPI document, the docs."""

from __future__ import annotations

import logging
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response

from ..errors import StoreUnavailable
from ..schemas import Status, encoder
from ..store.base import describe_failure
from .responses import json_response
from .services import services_of

log = logging.getLogger(__name__)

DOCS_DIR = Path(__file__).parent.parent / "static" / "docs"
_OK = encoder.encode(Status("ok"))


async def healthz(request: Request) -> Response:
    return json_response(_OK)


async def readyz(request: Request) -> Response:
    try:
        await services_of(request).store.ping()
    except StoreUnavailable:
        raise  # the store has logged the outage already
    except Exception as exc:
        log.warning("readiness check failed: %s", describe_failure(exc))
        raise StoreUnavailable("the database cannot be reached") from None
    return json_response(_OK)


async def openapi_json(request: Request) -> Response:
    document: bytes = request.app.state.openapi
    return Response(document, media_type="application/json")


async def docs(request: Request) -> Response:
    return FileResponse(DOCS_DIR / "index.html", media_type="text/html; charset=utf-8")
