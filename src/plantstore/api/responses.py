"""JSON responses with the headers every API answer carries."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import Response

from ..schemas import Error, encoder

API_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def json_response(
    body: bytes, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    merged = dict(API_HEADERS)
    if headers:
        merged.update(headers)
    return Response(body, status_code=status, headers=merged, media_type="application/json")


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    return json_response(encoder.encode(Error(error=status, message=message)), status, headers)
