"""Routes as features declare them, each once: a method, a path and a handler.

``http`` builds from one table every way a request is dispatched: Starlette's router (which
answers each wrong method's 405 with its ``Allow``, and serves the app mounted under a
prefix), the exact-match table in front of it for the hot routes (``dispatch.FastRoutes``),
and the routes served straight from granian's own call (``native``). A feature names a
route hot or native; it never sees which server or layer serves it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.routing import Mount as StarletteMount
from starlette.routing import Route as StarletteRoute
from starlette.types import ASGIApp

from .dispatch import FastRoute, Handler


@dataclass(frozen=True, slots=True)
class Route:
    """``method path`` served by ``handler``. ``hot``: dispatched by exact match in front of
    Starlette (a fixed path, or one ending in one parameter); ``native``: a GET of a fixed path
    also served from the server's own call, for a request without a body."""

    method: str
    path: str
    handler: Handler
    hot: bool = False
    native: bool = False


@dataclass(frozen=True, slots=True)
class Mount:
    """An ASGI app (static files) under a path prefix."""

    path: str
    app: ASGIApp
    name: str


Table = Iterable[Route | Mount]


def starlette_routes(table: Table) -> list[BaseRoute]:
    """One Starlette route per path, in the table's order, taking every method declared for
    it, so that a wrong method is a 405 whose ``Allow`` names them all."""
    by_path: dict[str, dict[str, Handler]] = {}
    mounts: list[BaseRoute] = []
    for entry in table:
        if isinstance(entry, Mount):
            mounts.append(StarletteMount(entry.path, app=entry.app, name=entry.name))
        else:
            by_path.setdefault(entry.path, {})[entry.method] = entry.handler
    routes: list[BaseRoute] = [
        StarletteRoute(path, _by_method(handlers), methods=list(handlers))
        for path, handlers in by_path.items()
    ]
    return routes + mounts


def hot_routes(table: Table) -> list[FastRoute]:
    return [
        FastRoute(entry.method, entry.path, entry.handler)
        for entry in table
        if isinstance(entry, Route) and entry.hot
    ]


def native_routes(table: Table) -> list[Route]:
    """The routes to serve from the server's own call: native GETs of a fixed path."""
    native = [entry for entry in table if isinstance(entry, Route) and entry.native]
    for route in native:
        if route.method != "GET" or "{" in route.path:
            raise ValueError(f"only a GET of a fixed path can be native: {route}")
    return native


def _by_method(handlers: dict[str, Handler]) -> Handler:
    """The path's endpoint: its one handler, or the one for the request's method (HEAD is a
    GET, as Starlette adds it to every GET route)."""
    if len(handlers) == 1:
        return next(iter(handlers.values()))
    get = handlers.get("GET")

    async def endpoint(request: Request) -> Response:
        handler = handlers.get(request.method) or get
        assert handler is not None, request.method  # Starlette routes only the methods given
        return await handler(request)

    return endpoint
