"""The three plant operations over HTTP: thin handlers over the rules in ``plants.py``.

Checks run in the contract's order of precedence: authentication (401), media type (415),
size (413), validation (400), then the outcome (404, 409).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from .. import plants
from ..errors import NotFound
from ..schemas import encoder
from .parsing import (
    check_content_type,
    decode_new_plant,
    parse_limit,
    parse_plant_id,
    query_params,
    read_body,
    single_param,
    whole_number,
)
from .responses import API_HEADERS, json_response
from .services import Services, services_of


async def plants_collection(request: Request) -> Response:
    """``/plants`` for Starlette's router (``PlantRoutes`` calls the handlers directly); one
    route, so that a wrong method's ``Allow`` lists both GET and POST."""
    if request.method == "POST":
        return await create_plant(services_of(request), request)
    return await list_plants(services_of(request), request)


async def delete_plant_route(request: Request) -> Response:
    """``/plants/{id}`` for Starlette's router."""
    return await delete_plant(services_of(request), request)


async def create_plant(services: Services, request: Request) -> Response:
    caller = await services.authenticator.authenticate(request)
    check_content_type(request.headers.get("content-type"))
    settings = services.settings
    body = await read_body(request, settings.max_body_bytes, settings.body_timeout)
    new_plant = decode_new_plant(body)
    plant = await plants.create_plant(services.store, caller.user_id, new_plant)
    return json_response(encoder.encode(plant))


async def list_plants(services: Services, request: Request) -> Response:
    caller = await services.authenticator.authenticate(request)
    query = query_params(request.scope["query_string"])
    raw_limit = single_param(query, "limit")
    limit = parse_limit(raw_limit, services.settings.page_cap)
    cursor = single_param(query, "cursor")
    page = await plants.list_page(services.store, services.cursors, caller.user_id, limit, cursor)
    headers = {}
    if page.next_cursor is not None:
        headers["Link"] = _next_link(raw_limit, page.next_cursor)
    return json_response(encoder.encode(page.plants), headers=headers)


async def delete_plant(services: Services, request: Request) -> Response:
    caller = await services.authenticator.authenticate(request)
    plant_id = parse_plant_id(request.path_params["id"])
    if not await services.store.delete_plant(caller.user_id, plant_id):
        raise NotFound(f"you have no plant with id {plant_id}")
    return Response(status_code=204, headers=API_HEADERS)


def _next_link(raw_limit: str | None, cursor: str) -> str:
    """A relative RFC 8288 link to the next page, repeating the request's own limit.

    Both values need no escaping: the limit is digits, the cursor base64url.
    """
    if raw_limit is None:
        return f'</plants?cursor={cursor}>; rel="next"'
    return f'</plants?limit={whole_number(raw_limit)}&cursor={cursor}>; rel="next"'
