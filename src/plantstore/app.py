"""``create_app(settings)``: the ASGI app. Nothing happens at import time.

The lifespan migrates and opens the store; errors of every layer are turned into the
Error body here, and only here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route

from . import metrics
from .api import ops
from .api import plants as plant_routes
from .api.auth import Authenticator
from .api.cors import ContractCORS
from .api.dispatch import PlantRoutes
from .api.keepalive import DrainUnreadBody
from .api.observe import REQUEST_ID_KEY, Observe
from .api.ratelimit import RateLimits
from .api.responses import error_response, unexpected_error_response
from .api.services import Services
from .errors import PlantstoreError
from .logs import access_logger, configure_logging
from .openapi import build_document
from .plants import CursorCodec
from .schemas import encoder
from .settings import Settings, load_settings
from .store import open_store
from .store.migrate import upgrade

_ROUTING_MESSAGES = {404: "no such path", 405: "method not allowed on this path"}


def create_app(settings: Settings) -> Starlette:
    """Build the service for ``settings``; the store opens when the server starts it."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await asyncio.to_thread(upgrade, settings.database_url)
        store = open_store(settings, on_commit=metrics.observe_commit)
        metrics.time_store_operations(store)
        await store.open()
        try:
            app.state.services = Services(
                settings=settings,
                store=store,
                authenticator=Authenticator(
                    store,
                    settings.token_cache_seconds,
                    RateLimits(
                        settings.rate_limit, settings.auth_failure_limit, settings.redis_url
                    ),
                    settings.trusted_proxy_addresses,
                ),
                cursors=CursorCodec(await store.cursor_key()),
            )
            yield
        finally:
            await store.close()

    app = Starlette(
        routes=_routes(),
        lifespan=lifespan,
        middleware=[
            Middleware(Observe, access_log=access_logger() if settings.access_log else None),
            *_cors(settings),
            Middleware(
                DrainUnreadBody,
                max_body_bytes=settings.max_body_bytes,
                body_timeout=settings.body_timeout,
            ),
            Middleware(PlantRoutes),
        ],
        exception_handlers={
            PlantstoreError: _on_plantstore_error,
            HTTPException: _on_routing_error,
            Exception: _on_unexpected_error,
        },
    )
    app.router.redirect_slashes = False
    app.state.openapi = encoder.encode(build_document())
    return app


def create_app_from_env() -> Starlette:
    """Factory for servers started by import string (granian workers, uvicorn --factory)."""
    settings = load_settings()
    configure_logging(settings.log_level)
    return create_app(settings)


def _cors(settings: Settings) -> list[Middleware]:
    """CORS only when origins are configured: by default browsers keep their same-origin rule."""
    if not settings.cors_origin_list:
        return []
    return [Middleware(ContractCORS, allow_origins=settings.cors_origin_list)]


def _routes() -> list[Route | Mount]:
    return [
        Route("/plants", plant_routes.plants_collection, methods=["GET", "POST"]),
        Route("/plants/{id}", plant_routes.delete_plant, methods=["DELETE"]),
        Route("/healthz", ops.healthz, methods=["GET"]),
        Route("/readyz", ops.readyz, methods=["GET"]),
        Route("/openapi.json", ops.openapi_json, methods=["GET"]),
        Route("/docs", ops.docs, methods=["GET"]),
        Mount("/docs/assets", ops.DocsAssets(directory=ops.DOCS_DIR), name="docs-assets"),
    ]


async def _on_plantstore_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, PlantstoreError)
    return error_response(exc.status, exc.message, exc.headers)


async def _on_routing_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = _ROUTING_MESSAGES.get(exc.status_code, exc.detail)
    return error_response(exc.status_code, message, exc.headers)


async def _on_unexpected_error(request: Request, exc: Exception) -> Response:
    response = unexpected_error_response(request, exc)
    # Starlette sends this from outside every middleware, so Observe cannot add the id.
    response.headers["X-Request-ID"] = request.scope.get(REQUEST_ID_KEY, b"-").decode("ascii")
    return response
