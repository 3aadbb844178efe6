"""Operational routes, no token needed: health, readiness, the OpenAPI document, the docs."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.staticfiles import NotModifiedResponse, StaticFiles
from starlette.types import Receive, Scope, Send

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
    return WholeFileResponse(DOCS_DIR / "index.html", media_type="text/html; charset=utf-8")


class WholeFileResponse(FileResponse):
    """A file sent whole. ``Range`` is neither advertised nor read: Starlette answers a malformed
    one with a plain-text 400 or a bare 416, not the Error body, and the docs assets are small
    enough that partial downloads buy nothing."""

    def __init__(self, path: str | os.PathLike[str], **options: object) -> None:
        super().__init__(path, **options)  # type: ignore[arg-type]
        del self.headers["accept-ranges"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(name, value) for name, value in scope["headers"] if name != b"range"]
        await super().__call__({**scope, "headers": headers}, receive, send)


class DocsAssets(StaticFiles):
    """The docs page's scripts and styles, each sent whole (see ``WholeFileResponse``)."""

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = WholeFileResponse(full_path, status_code=status_code, stat_result=stat_result)
        if self.is_not_modified(response.headers, Headers(scope=scope)):
            return NotModifiedResponse(response.headers)
        return response
