"""Fuzz routing and the path id: ``FastRoutes`` with the plant routes on any method and path,
and ``parse_path_id``.

``FastRoutes._handler_for`` must never raise, and must claim only the three exact plant
routes (a DELETE of ``/plants/{id}`` with ``{id}`` one non-empty segment), leaving everything
else to Starlette. ``parse_path_id`` may raise only the 400 (``BadRequest``), and accepts
exactly a decimal int64 with an optional leading ``-``.

    .venv/bin/python -m trials.fuzz.harnesses.fuzz_path -runs=100000
"""

from __future__ import annotations

from typing import Any

from .fuzzlib import fuzz, instrumented_imports

with instrumented_imports():
    from plantstore.errors import BadRequest
    from plantstore.http.dispatch import FastRoute, FastRoutes
    from plantstore.http.parsing import parse_path_id

METHODS = ["GET", "POST", "DELETE", "HEAD", "PUT", "PATCH", "OPTIONS", "get", "delete", ""]
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


async def list_plants(request: Any) -> Any: ...
async def create_plant(request: Any) -> Any: ...
async def delete_plant(request: Any) -> Any: ...


ROUTES = FastRoutes(
    None,  # type: ignore[arg-type]  # never called: only the matching is fuzzed
    [
        FastRoute("GET", "/plants", list_plants),
        FastRoute("POST", "/plants", create_plant),
        FastRoute("DELETE", "/plants/{id}", delete_plant),
    ],
)


def expected_id(raw: str) -> int | None:
    """The contract: an optional '-', then ASCII digits, within int64; None if refused."""
    digits = raw.removeprefix("-")
    if not digits or not all("0" <= char <= "9" for char in digits):
        return None
    significant = digits.lstrip("0") or "0"
    if len(significant) > 19:
        return None
    value = -int(significant) if raw.startswith("-") else int(significant)
    return value if INT64_MIN <= value <= INT64_MAX else None


def expected_handler(method: str, path: str) -> Any:
    if path == "/plants":
        return {"GET": list_plants, "POST": create_plant}.get(method)
    segment = path.removeprefix("/plants/")
    if method == "DELETE" and path.startswith("/plants/") and segment and "/" not in segment:
        return delete_plant
    return None


def test_one_input(data: bytes) -> None:
    """Byte 0 picks the method (past the list: the next 8 bytes are one), byte 1 holds
    flags (bit 0: put ``/plants/`` in front of the path; bits 1-3 all set: mounted under a
    root path), the rest is the path, invalid UTF-8 kept as lone surrogates."""
    choice, flags, rest = (data[0] if data else 0), (data[1] if len(data) > 1 else 0), data[2:]
    if choice < len(METHODS):
        method = METHODS[choice]
    else:
        method, rest = rest[:8].decode("latin-1"), rest[8:]
    path = rest.decode("utf-8", "surrogateescape")
    if flags & 1:
        path = "/plants/" + path
    root_path = "/api" if flags & 0b1110 == 0b1110 else ""
    scope: dict[str, Any] = {"type": "http", "method": method, "path": path}
    if root_path:
        scope["root_path"] = root_path
    handler = ROUTES._handler_for(scope)
    assert handler is (None if root_path else expected_handler(method, path)), (method, path)
    if handler is delete_plant:
        assert scope["path_params"] == {"id": path.removeprefix("/plants/")}, scope
    raw = scope.get("path_params", {}).get("id", path.rpartition("/")[2])
    try:
        plant_id = parse_path_id(raw)
    except BadRequest as exc:
        refusal = exc
    else:
        assert type(plant_id) is int, plant_id
        assert INT64_MIN <= plant_id <= INT64_MAX, plant_id
        assert plant_id == expected_id(raw), f"{raw!r} read as {plant_id}"
        return
    assert refusal.status == 400, refusal
    assert "'id'" in refusal.message, refusal
    assert expected_id(raw) is None, f"refused {raw!r}"


SEEDS = [
    b"\x02\x01" + b"1",
    b"\x02\x01" + b"-9223372036854775808",
    b"\x02\x01" + b"9223372036854775808",
    b"\x02\x01" + b"0000000000000000000000000000042",
    b"\x02\x00" + b"/plants",
    b"\x00\x00" + b"/plants",
    b"\x01\x0e" + b"/plants",
    b"\x02\x00" + b"/plants/",
    b"\x02\x01" + b"1/2",
    b"\x02\x01" + b"-",
    b"\x02\x01" + b"+1",
    b"\x02\x01" + b"\xef\xbc\x91",
    b"\x02\x01" + b"\xff",
    b"\xff\x00" + b"PURGE\x00\x00\x00/plants",
    # Python's int() refuses strings over 4,300 digits (CVE-2020-10735): numbers at the limit.
    b"\x02\x01" + b"0" * 4299 + b"7",
]

if __name__ == "__main__":
    fuzz(test_one_input, SEEDS, max_len=8192)
