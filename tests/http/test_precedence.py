"""docs/api.md, "Which error wins": unknown path 404 / wrong method 405 first, then 401, then
415, then 413, then validation 400, then the outcome (404, 409).

Each test sends a request that is wrong in several ways at once and expects the earliest.
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from starlette.testclient import TestClient

from tests.fixtures.calls import assert_error, bearer
from tests.fixtures.servers import LiveServer

# HTTP to the service alone (no in-process app, settings or logs): on the two-worker server too.
pytestmark = pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")

JSON = "application/json"
LIMIT = 65_536
CHALLENGE = 'Bearer realm="plantstore"'

Headers = dict[str, str]
# starlette's TestClient answers with httpx2 responses, the live server with httpx ones
Response = httpx.Response | httpx2.Response

OVERSIZED_INVALID = b'{"id":"not an int","name":' + b'"' + b"x" * LIMIT + b'"}'
OVERSIZED_VALID = b'{"id":1,"name":"big"}' + b" " * LIMIT
INVALID = b'{"id":"1","name":"","color":"green"}'

NO_AUTH: dict[str, Headers] = {
    "no header": {},
    "basic scheme": {"Authorization": "Basic YWxpY2U6cGFzcw=="},
    "malformed bearer": {"Authorization": "Bearer not a token"},
    "unknown bearer": {"Authorization": "Bearer pst_" + "Q" * 43},
}


def assert_401(response: Response) -> None:
    assert_error(response, 401)
    assert response.headers["www-authenticate"].startswith(CHALLENGE)


def listing(client: TestClient | httpx.Client, headers: Headers) -> list[dict[str, Any]]:
    response = client.get("/plants", headers=headers)
    assert response.status_code == 200, response.text
    plants = response.json()
    assert isinstance(plants, list)
    return plants


def allowed(response: Response) -> set[str]:
    return {method.strip().upper() for method in response.headers["allow"].split(",")}


@pytest.fixture
def fern(client: TestClient, alice: Headers) -> list[dict[str, Any]]:
    """Alice's plant 5, so a different plant 5 would be a 409."""
    response = client.post("/plants", json={"id": 5, "name": "Fern", "tag": "shade"}, headers=alice)
    assert response.status_code == 200, response.text
    plants = listing(client, alice)
    assert plants == [{"name": "Fern", "tag": "shade"}]
    return plants


# --- 404 / 405 come first -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/nope"),
        ("POST", "/plantz"),
        ("POST", "/plants/"),
        ("GET", "/plants/5/extra"),
        ("DELETE", "/"),
    ],
)
@pytest.mark.parametrize("auth", list(NO_AUTH.values()), ids=list(NO_AUTH))
def test_unknown_path_is_404_before_authentication(
    client: TestClient, method: str, path: str, auth: Headers
) -> None:
    response = client.request(
        method, path, content=OVERSIZED_INVALID, headers={**auth, "Content-Type": "text/plain"}
    )
    assert_error(response, 404)
    assert "www-authenticate" not in response.headers


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/plants", {"GET", "POST"}),
        ("PATCH", "/plants", {"GET", "POST"}),
        ("DELETE", "/plants", {"GET", "POST"}),
        ("POST", "/plants/5", {"DELETE"}),
        ("PUT", "/plants/5", {"DELETE"}),
        ("GET", "/plants/5", {"DELETE"}),
    ],
)
@pytest.mark.parametrize("auth", list(NO_AUTH.values()), ids=list(NO_AUTH))
def test_wrong_method_is_405_with_allow_before_authentication(
    client: TestClient, method: str, path: str, allow: set[str], auth: Headers
) -> None:
    response = client.request(
        method, path, content=OVERSIZED_INVALID, headers={**auth, "Content-Type": "text/plain"}
    )
    assert_error(response, 405)
    assert allowed(response) >= allow
    assert "www-authenticate" not in response.headers


def test_wrong_method_is_405_even_with_valid_auth(
    client: TestClient, alice: Headers, fern: list[dict[str, Any]]
) -> None:
    response = client.put("/plants", json={"id": 5, "name": "Fern", "tag": "shade"}, headers=alice)
    assert_error(response, 405)
    assert allowed(response) >= {"GET", "POST"}
    assert listing(client, alice) == fern


# --- 401 before 415, 413, 400, 409 ----------------------------------------------------------


BEATEN_BY_401 = {
    "wrong type + oversized + invalid": ("text/plain", OVERSIZED_INVALID),
    "wrong type + invalid": ("text/plain", INVALID),
    "no type + invalid": (None, INVALID),
    "oversized + invalid": (JSON, OVERSIZED_INVALID),
    "oversized valid": (JSON, OVERSIZED_VALID),
    "invalid": (JSON, INVALID),
    "conflicts with alice's plant 5": (JSON, b'{"id":5,"name":"Other"}'),
    "valid": (JSON, b'{"id":6,"name":"Fine"}'),
}


@pytest.mark.parametrize(
    ("content_type", "body"), list(BEATEN_BY_401.values()), ids=list(BEATEN_BY_401)
)
@pytest.mark.parametrize("auth", list(NO_AUTH.values()), ids=list(NO_AUTH))
def test_authentication_is_checked_before_everything_else(
    client: TestClient,
    alice: Headers,
    fern: list[dict[str, Any]],
    auth: Headers,
    content_type: str | None,
    body: bytes,
) -> None:
    headers = dict(auth)
    if content_type is not None:
        headers["Content-Type"] = content_type
    assert_401(client.post("/plants", content=body, headers=headers))
    assert listing(client, alice) == fern


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/plants/not-a-number"),  # would be 400
        ("DELETE", "/plants/99999"),  # would be 404
        ("DELETE", "/plants/5"),  # alice's plant: would be 204
        ("GET", "/plants?limit=-1"),  # would be 400
        ("GET", "/plants?cursor=forged"),  # would be 400
    ],
)
@pytest.mark.parametrize("auth", list(NO_AUTH.values()), ids=list(NO_AUTH))
def test_authentication_is_checked_before_parameters_and_outcome(
    client: TestClient,
    alice: Headers,
    fern: list[dict[str, Any]],
    method: str,
    path: str,
    auth: Headers,
) -> None:
    assert_401(client.request(method, path, headers=auth))
    assert listing(client, alice) == fern


# --- 415 before 413, 400, 409 ---------------------------------------------------------------


BEATEN_BY_415 = {
    "oversized + invalid": OVERSIZED_INVALID,
    "oversized valid": OVERSIZED_VALID,
    "invalid": INVALID,
    "conflict": b'{"id":5,"name":"Other"}',
}


@pytest.mark.parametrize("body", list(BEATEN_BY_415.values()), ids=list(BEATEN_BY_415))
@pytest.mark.parametrize("content_type", [None, "text/plain", "application/json; charset=latin-1"])
def test_media_type_is_checked_before_size_validation_and_outcome(
    client: TestClient,
    alice: Headers,
    fern: list[dict[str, Any]],
    content_type: str | None,
    body: bytes,
) -> None:
    headers = dict(alice)
    if content_type is not None:
        headers["Content-Type"] = content_type
    assert_error(client.post("/plants", content=body, headers=headers), 415)
    assert listing(client, alice) == fern


# --- 413 before 400, 409 --------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        OVERSIZED_INVALID,
        b"[" + b"1," * LIMIT + b"1]",
        b"\xff" * (LIMIT + 1),
        b'{"id":5,"name":"Other"}' + b" " * LIMIT,  # would conflict with alice's plant 5
        b'{"id":5,"name":"Fern","tag":"shade"}' + b" " * LIMIT,  # would be an idempotent repeat
    ],
    ids=["invalid json object", "array", "not utf-8", "conflict", "repeat"],
)
def test_size_is_checked_before_validation_and_outcome(
    client: TestClient, alice: Headers, fern: list[dict[str, Any]], body: bytes
) -> None:
    assert len(body) > LIMIT
    response = client.post("/plants", content=body, headers={**alice, "Content-Type": JSON})
    assert_error(response, 413)
    assert listing(client, alice) == fern


# --- 400 before 409 -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b'{"id":5,"name":"Other","color":"green"}',
        b'{"id":5,"name":""}',
        b'{"id":5,"name":"Other","tag":null}',
        b'{"id":5,"name":"Fern","tag":"shade","color":"green"}',  # else an idempotent repeat
        b'{"id":5,"name":"Fern","name":"Other","tag":"shade"}',
        b'{"id":5,"name":"Fern","tag":"shade"} trailing',
        b'{"id":5,"name":"Fern","tag":"sh\\u0000ade"}',
    ],
    ids=[
        "unknown member",
        "empty name",
        "null tag",
        "repeat plus unknown member",
        "duplicate member",
        "trailing garbage",
        "control character",
    ],
)
def test_validation_is_checked_before_the_conflict(
    client: TestClient, alice: Headers, fern: list[dict[str, Any]], body: bytes
) -> None:
    response = client.post("/plants", content=body, headers={**alice, "Content-Type": JSON})
    assert_error(response, 400)
    assert listing(client, alice) == fern


def test_delete_validation_is_checked_before_the_outcome(
    client: TestClient, alice: Headers, fern: list[dict[str, Any]]
) -> None:
    assert_error(client.delete("/plants/9223372036854775808", headers=alice), 400)
    assert_error(client.delete("/plants/99999", headers=alice), 404)
    assert listing(client, alice) == fern


def test_another_users_plant_is_404_on_delete_and_no_conflict_on_create(
    client: TestClient, alice: Headers, bob: Headers, fern: list[dict[str, Any]]
) -> None:
    assert_error(client.delete("/plants/5", headers=bob), 404)
    response = client.post("/plants", json={"id": 5, "name": "Bob's"}, headers=bob)
    assert response.status_code == 200, response.text
    assert listing(client, alice) == fern
    assert listing(client, bob) == [{"name": "Bob's"}]


# --- over the wire: the real server (granian) -----------------------------------------------


def unique_id() -> int:
    return random.getrandbits(60)


def test_live_no_auth_wrong_type_oversized_is_401(live_server: LiveServer) -> None:
    with live_server.client() as http:
        response = http.post(
            "/plants", content=OVERSIZED_INVALID, headers={"Content-Type": "text/plain"}
        )
        assert_401(response)


def test_live_wrong_type_oversized_is_415(live_server: LiveServer) -> None:
    with live_server.client() as http:
        response = http.post(
            "/plants",
            content=OVERSIZED_INVALID,
            headers={**bearer(live_server.token), "Content-Type": "text/plain"},
        )
        assert_error(response, 415)


@pytest.mark.parametrize("size", [LIMIT + 1, 1024 * 1024, 8 * 1024 * 1024])
def test_live_oversized_invalid_body_with_content_length_is_413(
    live_server: LiveServer, size: int
) -> None:
    headers = bearer(live_server.token)
    plant_id = unique_id()
    body = f'{{"id":{plant_id},"name":"oversized","x":"'.encode()
    body += b"x" * (size - len(body) - 2) + b'"}'
    assert len(body) == size
    with live_server.client() as http:
        before = listing(http, headers)
        response = http.post("/plants", content=body, headers={**headers, "Content-Type": JSON})
        assert "content-length" in response.request.headers
        assert_error(response, 413)
    with live_server.client() as http:  # a fresh connection: the server is still serving
        assert listing(http, headers) == before


def test_live_oversized_chunked_body_is_413(live_server: LiveServer) -> None:
    headers = bearer(live_server.token)
    body = OVERSIZED_INVALID

    def stream() -> Iterator[bytes]:
        for start in range(0, len(body), 4096):
            yield body[start : start + 4096]

    with live_server.client() as http:
        before = listing(http, headers)
        response = http.post("/plants", content=stream(), headers={**headers, "Content-Type": JSON})
        assert "content-length" not in response.request.headers
        assert_error(response, 413)
    with live_server.client() as http:
        assert listing(http, headers) == before


def test_live_body_of_exactly_the_limit_is_accepted(live_server: LiveServer) -> None:
    headers = bearer(live_server.token)
    plant_id = unique_id()
    name = f"exact-{plant_id}"
    body = f'{{"id":{plant_id},"name":"{name}"}}'.encode()
    body += b" " * (LIMIT - len(body))
    assert len(body) == LIMIT
    with live_server.client() as http:
        response = http.post("/plants", content=body, headers={**headers, "Content-Type": JSON})
        assert response.status_code == 200, response.text
        assert response.json() == {"name": name}
        assert {"name": name} in listing(http, headers)
        assert http.delete(f"/plants/{plant_id}", headers=headers).status_code == 204


def test_live_invalid_body_for_existing_id_is_400_not_409(live_server: LiveServer) -> None:
    headers = bearer(live_server.token)
    plant_id = unique_id()
    with live_server.client() as http:
        created = http.post("/plants", json={"id": plant_id, "name": "Live"}, headers=headers)
        assert created.status_code == 200, created.text
        before = listing(http, headers)
        response = http.post(
            "/plants",
            content=f'{{"id":{plant_id},"name":"Other","color":"x"}}'.encode(),
            headers={**headers, "Content-Type": JSON},
        )
        assert_error(response, 400)
        assert listing(http, headers) == before
        conflict = http.post("/plants", json={"id": plant_id, "name": "Other"}, headers=headers)
        assert_error(conflict, 409)
        assert listing(http, headers) == before
        assert http.delete(f"/plants/{plant_id}", headers=headers).status_code == 204


def test_live_unknown_path_and_wrong_method_without_auth(live_server: LiveServer) -> None:
    with live_server.client() as http:
        assert_error(http.get("/nope"), 404)
        response = http.put("/plants", content=b"x", headers={"Content-Type": "text/plain"})
        assert_error(response, 405)
        assert allowed(response) >= {"GET", "POST"}


# --- an early answer leaves the connection usable -----------------------------------------------


def raw_exchange(server: LiveServer, head: bytes, body: bytes) -> tuple[bytes, socket.socket]:
    """Send the head, then the body a moment later (after the server may have answered)."""
    host, port = server.base_url.removeprefix("http://").split(":")
    connection = socket.create_connection((host, int(port)), timeout=5)
    connection.sendall(head)
    time.sleep(0.02)
    connection.sendall(body)
    return connection.recv(65536).split(b"\r\n\r\n", 1)[0].lower(), connection


@pytest.mark.parametrize(
    "path", ["/plants", "/nope"], ids=["401 before reading the body", "404 unknown path"]
)
def test_live_early_answer_keeps_the_connection_usable(live_server: LiveServer, path: str) -> None:
    """Answered from the headers alone, the request's body is still read, so the next request
    on the same keep-alive connection is answered (granian used to drop it silently)."""
    body = b'{"id": 1, "name": "Fern"}'
    head = (
        f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    for _ in range(20):
        answer, connection = raw_exchange(live_server, head, body)
        with connection:
            assert answer.startswith((b"http/1.1 401", b"http/1.1 404")), answer
            assert b"connection: close" not in answer
            connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            assert connection.recv(65536).startswith(b"HTTP/1.1 200")


def test_live_oversized_body_is_not_read_and_the_connection_closes(
    live_server: LiveServer,
) -> None:
    head = (
        b"POST /plants HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {live_server.token}\r\nContent-Length: 10000000\r\n\r\n".encode()
    )
    answer, connection = raw_exchange(live_server, head, b"x" * 1000)
    with connection:
        assert answer.startswith(b"http/1.1 413"), answer
        assert b"connection: close" in answer
        assert connection.recv(100) == b""  # closed, not waiting for ten megabytes
