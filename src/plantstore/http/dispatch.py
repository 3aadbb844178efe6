"""Hot routes dispatched straight to their handlers, in front of Starlette.

Starlette itself (its outer error layer, exception middleware and router) costs a dozen
coroutine frames per request, a sizeable share of what a list request needs in all.
``FastRoutes`` stands in front of the Starlette app and takes only exact matches of the hot
routes (``routing.hot_routes``) (a fixed path, or a fixed prefix and one last path segment as the
route's one parameter); every other request, and each wrong method with its 404/405, goes on
to Starlette unchanged. The handlers and the errors they raise are the same either way, and
so are the answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .boundary import answer_for
from .scope import ROUTE_KEY

Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class FastRoute:
    """``method path`` served by ``handler``; ``path`` is fixed (``/plants``) or ends in one
    parameter that is a whole segment (``/plants/{id}``)."""

    method: str
    path: str
    handler: Handler


class FastRoutes:
    """ASGI app: the given routes handled here, anything else passed to ``app``."""

    def __init__(self, app: ASGIApp, routes: Iterable[FastRoute]) -> None:
        self.app = app
        self._exact: dict[tuple[str, str], Handler] = {}
        # (method, prefix) -> (handler, parameter name, template)
        self._prefixed: dict[tuple[str, str], tuple[Handler, str, str]] = {}
        for route in routes:
            prefix, brace, rest = route.path.partition("{")
            if not brace:
                self._exact[route.method, route.path] = route.handler
            else:
                parameter = rest.removesuffix("}")
                self._prefixed[route.method, prefix] = (route.handler, parameter, route.path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self._handler_for(scope) if scope["type"] == "http" else None
        if handler is None:
            await self.app(scope, receive, send)
            return
        try:
            response = await handler(Request(scope, receive))
        except Exception as exc:
            response = answer_for(exc, scope)
        await response(scope, receive, send)

    def _handler_for(self, scope: Scope) -> Handler | None:
        """The handler an exact route match names; None for anything Starlette should route."""
        if scope.get("root_path"):
            return None  # mounted under a prefix: leave path matching to Starlette
        path: str = scope["path"]
        method: str = scope["method"]
        handler = self._exact.get((method, path))
        if handler is not None:
            scope[ROUTE_KEY] = path
            return handler
        prefix, slash, last = path.rpartition("/")
        found = self._prefixed.get((method, prefix + slash)) if last else None
        if found is None:
            return None
        handler, parameter, template = found  # Starlette's ``{id}``: one non-empty segment
        scope["path_params"] = {parameter: last}
        scope[ROUTE_KEY] = template
        return handler
