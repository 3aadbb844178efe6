"""``/openapi.json`` and the interactive docs page ``/docs``: Swagger UI, vendored in
``static/docs`` (Apache-2.0), so the page works offline and fetches nothing from elsewhere."""

from __future__ import annotations

import os
from pathlib import Path

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.staticfiles import NotModifiedResponse, StaticFiles
from starlette.types import Receive, Scope, Send

from ..http.routing import Mount, Route

DOCS_DIR = Path(__file__).parent / "static" / "docs"


class DocsPage:
    """The document, encoded once, and the page that shows it."""

    def __init__(self, document: bytes) -> None:
        self.document = document

    def routes(self) -> list[Route | Mount]:
        return [
            Route("GET", "/openapi.json", self.openapi_json),
            Route("GET", "/docs", self.docs),
            Mount("/docs/assets", DocsAssets(directory=DOCS_DIR), name="docs-assets"),
        ]

    async def openapi_json(self, request: Request) -> Response:
        return Response(self.document, media_type="application/json")

    async def docs(self, request: Request) -> Response:
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
