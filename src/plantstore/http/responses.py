"""JSON responses with the headers every API answer carries."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..errors import Error

encoder = msgspec.json.Encoder()  # one for every answer: an Encoder keeps its buffer

API_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
_JSON_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"content-type", b"application/json"),
]
_JSON_HEADERS_TEXT = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in _JSON_HEADERS]


class JSONBytes(Response):
    """An already-encoded JSON answer with the API headers.

    Starlette's ``Response`` rebuilds its header list from dicts on every call, a large share
    of a list request's budget, so this one starts from a prebuilt list.
    """

    media_type = "application/json"

    def __init__(
        self, body: bytes, status_code: int = 200, headers: Mapping[str, str] | None = None
    ) -> None:
        self.status_code = status_code
        self.background = None
        self.body = body
        self._extra = headers
        self._raw: list[tuple[bytes, bytes]] | None = None

    @property  # Starlette's is a plain attribute
    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        """Built when first asked for: an answer served over RSGI asks for text instead."""
        if self._raw is None:
            raw = [*_JSON_HEADERS, (b"content-length", b"%d" % len(self.body))]
            if self._extra:
                raw += [
                    (k.lower().encode("latin-1"), v.encode("latin-1"))
                    for k, v in self._extra.items()
                ]
            self._raw = raw
        return self._raw

    @raw_headers.setter
    def raw_headers(self, value: list[tuple[bytes, bytes]]) -> None:
        self._raw = value

    def text_headers(self) -> list[tuple[str, str]]:
        """The headers as text, as granian's RSGI answer takes them: made from text, unless
        the list of bytes was made (and perhaps changed) already."""
        if self._raw is not None:
            return rsgi_headers(self._raw)
        text = [*_JSON_HEADERS_TEXT, ("content-length", str(len(self.body)))]
        if self._extra:
            text += [(k.lower(), v) for k, v in self._extra.items()]
        return text


def rsgi_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """ASGI's header list as granian's RSGI answers take it."""
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]


class _NoAnswer(Response):
    """What a request whose client has gone is answered with: nothing at all."""

    def __init__(self) -> None:
        self.status_code = 499
        self.background = None
        self.raw_headers = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        return None


NO_ANSWER = _NoAnswer()


def json_response(
    body: bytes, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return JSONBytes(body, status, headers)


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    return JSONBytes(encoder.encode(Error(error=status, message=message)), status, headers)
