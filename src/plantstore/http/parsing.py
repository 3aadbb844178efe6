"""Reading a request's parts strictly: the body (415/501/413/400), the query and path ids.

Each feature decodes its own bodies with ``decode_strict`` and its msgspec decoder.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import msgspec
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request

from ..errors import (
    BadRequest,
    PayloadTooLarge,
    RequestTimeout,
    TransferCodingNotImplemented,
    UnsupportedMediaType,
)
from .peer import client_still_there

T = TypeVar("T")
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
_OWS = " \t"  # HTTP's optional whitespace (RFC 9110 §5.6.3); not str.strip()'s NBSP etc.
_BEYOND_ANY_LIMIT = 10**20  # larger than every limit here (int64, int32, body size)


def whole_number(digits: str) -> int:
    """The value of a string of ASCII digits, however many leading zeros it has.

    ``int()`` refuses strings of over 4,300 digits, so ``"000…01"`` would raise inside a
    request and become a 500. Zeros are dropped first; a number still longer than 20 digits
    is beyond every limit, and is answered as such.
    """
    significant = digits.lstrip("0")
    return int(significant or "0") if len(significant) <= 20 else _BEYOND_ANY_LIMIT


def body_length(content_length: str | None, chunked: bool) -> int | None:
    """The body length a request's headers declare: 0 when they declare no body, None when it
    is chunked or its Content-Length is not a number (granian's ASGI and RSGI headers alike)."""
    if chunked:
        return None
    if content_length is None:
        return 0
    if content_length.isascii() and content_length.isdigit():
        return whole_number(content_length)
    return None


def check_content_type(values: list[str]) -> None:
    """Accept one ``Content-Type: application/json``, optionally with ``charset=utf-8``;
    anything else is a 415, and so is a second Content-Type, whatever the first says."""
    value = values[0] if len(values) == 1 else ""
    media_type, *params = (part.strip(_OWS) for part in value.split(";"))
    ok = media_type.lower() == "application/json" and len(params) <= 1
    for param in params:
        key, _, charset = param.partition("=")
        ok = (
            ok
            and key.strip(_OWS).lower() == "charset"
            and charset.strip(_OWS).lower() in ("utf-8", '"utf-8"')
        )
    if not ok:
        raise UnsupportedMediaType(
            "Content-Type must be application/json (optionally with charset=utf-8)"
        )


_CODING_HEADERS = frozenset({b"content-encoding", b"transfer-encoding"})


def check_body_codings(headers: Headers) -> None:
    """Refuse a body the service would not read as sent: one in a content coding (415, with
    ``Accept-Encoding: identity``, RFC 9110 section 15.5.16) or in a transfer coding besides
    chunked (501, RFC 9112 section 6.1). granian undoes only the chunked framing, so such a
    body would be decoded as JSON in its coding: a gzipped plant refused as "not valid JSON",
    and a plain one that claims to be gzipped stored."""
    for name, _ in headers.raw:  # one pass over the names: nearly every request names neither
        if name in _CODING_HEADERS:
            break
    else:
        return
    content = _codings(headers.getlist("content-encoding")) - {"identity"}
    if content:
        raise UnsupportedMediaType(
            f"Content-Encoding {', '.join(sorted(content))} is not supported: "
            "send the body uncompressed",
            {"Accept-Encoding": "identity"},
        )
    transfer = _codings(headers.getlist("transfer-encoding")) - {"chunked"}
    if transfer:
        raise TransferCodingNotImplemented(
            f"Transfer-Encoding {', '.join(sorted(transfer))} is not supported: "
            "send the body with Content-Length or chunked alone"
        )


def _codings(values: list[str]) -> set[str]:
    """The codings named by a coding header's lines (comma-separated, any case)."""
    return {
        coding.strip(_OWS).lower()
        for value in values
        for coding in value.split(",")
        if coding.strip(_OWS)
    }


async def read_body(request: Request, max_bytes: int, timeout: float) -> bytes:
    """Return the body, refusing (415, 501) one in a coding it cannot read, (413) once it
    passes ``max_bytes`` without reading the rest, and (408) when it has not arrived whole
    within ``timeout`` seconds."""
    check_body_codings(request.headers)
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and whole_number(declared) > max_bytes:
        raise PayloadTooLarge(f"the request body is larger than {max_bytes} bytes")
    try:
        async with asyncio.timeout(timeout):
            return await _receive_body(request, max_bytes)
    except TimeoutError:
        raise RequestTimeout(f"the request body did not arrive within {timeout:g} s") from None


async def _receive_body(request: Request, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    more_body = True
    while more_body:  # receive() directly: ``request.stream()``'s async generator costs more
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise await _body_cut_short(request)
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(f"the request body is larger than {max_bytes} bytes")
        chunks.append(chunk)
        more_body = message.get("more_body", False)
    return b"".join(chunks)


async def _body_cut_short(request: Request) -> Exception:
    """A body that ended early: the server refused its framing if the client still waits for
    an answer (a 400), else the client left (nobody to answer; logged as 499)."""
    if await client_still_there(request.scope):
        return BadRequest(
            "the request body is malformed: its framing (chunked encoding or Content-Length) "
            "cannot be read"
        )
    return ClientDisconnect()


def decode_strict(
    body: bytes,
    decoder: msgspec.json.Decoder[T],
    what: str,
    may_repeat: Callable[[bytes], bool] | None = None,
) -> T:
    """Decode ``body`` as ``what`` strictly: every violation, a repeated member too, is a 400
    whose message names the member. ``may_repeat`` spares the second parse when it says no."""
    try:
        value = decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"invalid {what}: {exc}") from None
    except UnicodeDecodeError:
        raise BadRequest("the request body is not valid UTF-8") from None
    except msgspec.DecodeError:
        raise BadRequest("the request body is not valid JSON") from None
    if may_repeat is None or may_repeat(body):
        json.loads(body, object_pairs_hook=_duplicates_refused(what))
    return value


def _duplicates_refused(what: str) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    def reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                raise BadRequest(f"invalid {what}: member `{key}` appears more than once")
            seen[key] = value
        return seen

    return reject_duplicates


def query_params(query_string: bytes) -> dict[str, list[str]]:
    """Every value of every query parameter, as Starlette's ``QueryParams`` reads them.

    A plain query (no percent-escapes or '+') is split directly: ``parse_qsl`` and the
    multidict around it are a large share of a list request. Anything else goes through
    ``parse_qsl``.
    """
    text = query_string.decode("latin-1")
    if "%" in text or "+" in text:
        pairs = parse_qsl(text, keep_blank_values=True)
    else:
        pairs = [
            (name, value) for name, _, value in (f.partition("=") for f in text.split("&") if f)
        ]
    params: dict[str, list[str]] = {}
    for name, value in pairs:
        params.setdefault(name, []).append(value)
    return params


def single_param(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name, ())
    if len(values) > 1:
        raise BadRequest(f"query parameter '{name}' may be given only once")
    return values[0] if values else None


def parse_limit(raw: str | None, page_cap: int) -> int:
    """Return how many items to answer: ``min(limit, page_cap)``, the cap when absent."""
    if raw is None:
        return page_cap
    limit = whole_number(raw) if raw.isascii() and raw.isdigit() else -1
    if not 0 <= limit <= INT32_MAX:
        raise BadRequest(f"query parameter 'limit' must be a whole number from 0 to {INT32_MAX}")
    return min(limit, page_cap)


def parse_path_id(raw: str, name: str = "id") -> int:
    """Read the path id ``name``: a decimal int64 with an optional leading '-'."""
    digits = raw.removeprefix("-")
    valid = digits.isascii() and digits.isdigit() and len(digits.lstrip("0")) <= 19
    path_id = whole_number(digits) * (-1 if raw.startswith("-") else 1) if valid else 0
    if not valid or not INT64_MIN <= path_id <= INT64_MAX:
        raise BadRequest(f"path parameter '{name}' must be a decimal 64-bit integer")
    return path_id
