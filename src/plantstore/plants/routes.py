"""The three plant operations over HTTP: thin handlers over the rules in ``rules.py``.

Checks run in the contract's order of precedence: authentication (401), media type (415),
size (413), validation (400), then the outcome (404, 409). The three routes are hot
(dispatched by exact match in front of the framework) and the list is native (served from the
server's own call): ``http.routing`` builds whatever serves them from ``routes``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..auth.bearer import Authenticator
from ..errors import NotFound
from ..http.parsing import (
    check_content_type,
    parse_limit,
    parse_path_id,
    query_params,
    read_body,
    single_param,
    whole_number,
)
from ..http.responses import API_HEADERS, encoder, json_response
from ..http.routing import Route
from ..settings import Settings
from . import rules
from .cursors import CursorCodec
from .schemas import decode_new_plant
from .store import PlantStore


class PlantRoutes:
    """The plant handlers; ``start`` hands them the store once the database is open."""

    def __init__(self, settings: Settings) -> None:
        self._page_cap = settings.page_cap
        self._max_body_bytes = settings.max_body_bytes
        self._quota = settings.max_plants_per_user
        self._body_timeout = settings.body_timeout

    def start(self, store: PlantStore, authenticator: Authenticator, cursors: CursorCodec) -> None:
        self._store = store
        self._authenticate = authenticator.authenticate
        self._cursors = cursors

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/plants", self.list, hot=True, native=True),
            Route("POST", "/plants", self.create, hot=True),
            Route("DELETE", "/plants/{id}", self.delete, hot=True),
        ]

    async def create(self, request: Request) -> Response:
        caller = await self._authenticate(request)
        check_content_type(request.headers.getlist("content-type"))
        body = await read_body(request, self._max_body_bytes, self._body_timeout)
        new_plant = decode_new_plant(body)
        quota = self._quota if caller.own_quota is None else caller.own_quota
        plant = await rules.create_plant(self._store, caller.user_id, new_plant, quota)
        return json_response(encoder.encode(plant))

    async def list(self, request: Request) -> Response:
        caller = await self._authenticate(request)
        return await self._page(caller.user_id, request.scope["query_string"])

    async def _page(self, user_id: int, query_string: bytes) -> Response:
        query = query_params(query_string)
        raw_limit = single_param(query, "limit")
        limit = parse_limit(raw_limit, self._page_cap)
        cursor = single_param(query, "cursor")
        page = await rules.list_page(self._store, self._cursors, user_id, limit, cursor)
        headers = None
        if page.next_cursor is not None:
            headers = {"Link": _next_link(raw_limit, page.next_cursor)}
        return json_response(encoder.encode(page.plants), headers=headers)

    async def delete(self, request: Request) -> Response:
        caller = await self._authenticate(request)
        plant_id = parse_path_id(request.path_params["id"])
        if not await self._store.delete_plant(caller.user_id, plant_id):
            raise NotFound(f"you have no plant with id {plant_id}")
        return Response(status_code=204, headers=API_HEADERS)


def _next_link(raw_limit: str | None, cursor: str) -> str:
    """A relative RFC 8288 link to the next page, repeating the request's own limit.

    Both values need no escaping: the limit is digits, the cursor base64url.
    """
    if raw_limit is None:
        return f'</plants?cursor={cursor}>; rel="next"'
    return f'</plants?limit={whole_number(raw_limit)}&cursor={cursor}>; rel="next"'
