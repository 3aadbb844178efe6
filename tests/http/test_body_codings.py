"""A body is read as sent, against a real server on each backend: one in a content coding is a
415 with ``Accept-Encoding: identity``, one in a transfer coding besides chunked a 501, each
with the Error body, after 401 and before 413, and nothing of either is stored."""

from __future__ import annotations

import gzip
import json
import random
import socket

import httpx
import pytest

from tests.fixtures.calls import assert_error, bearer
from tests.fixtures.servers import LiveServer

# HTTP to the service alone (no in-process app, settings or logs): on the two-worker server too.
pytestmark = pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")

LIMIT = 65_536


def plant(name: str) -> bytes:
    return json.dumps({"id": random.randrange(1, 2**62), "name": name}).encode()


def names(server: LiveServer) -> set[str]:
    with server.client() as http:
        response = http.get("/plants", headers=bearer(server.token), params={"limit": 1000})
    assert response.status_code == 200, response.text
    return {found["name"] for found in response.json()}


def post(
    server: LiveServer, body: bytes, coding: str, path: str = "/plants", **headers: str
) -> httpx.Response:
    with server.client() as http:
        return http.post(
            path,
            content=body,
            headers={
                **bearer(server.token),
                "Content-Type": "application/json",
                "Content-Encoding": coding,
                **headers,
            },
        )


def test_a_gzipped_plant_is_a_415_naming_the_coding(live_server: LiveServer) -> None:
    response = post(live_server, gzip.compress(plant("Gzipped Fern")), "gzip")
    assert_error(response, 415)
    assert response.json()["message"] == (
        "Content-Encoding gzip is not supported: send the body uncompressed"
    )
    assert response.headers["accept-encoding"] == "identity"
    assert "Gzipped Fern" not in names(live_server)


@pytest.mark.parametrize("coding", ["GZIP", "br", "deflate, gzip", "identity, zstd"])
def test_a_plain_plant_that_claims_a_coding_is_not_stored(
    live_server: LiveServer, coding: str
) -> None:
    name = f"Claimed {coding} Fern"
    response = post(live_server, plant(name), coding)
    assert_error(response, 415)
    assert "Content-Encoding" in response.json()["message"]
    assert name not in names(live_server)


def test_identity_is_no_coding_at_all(live_server: LiveServer) -> None:
    response = post(live_server, plant("Identity Fern"), "identity")
    assert response.status_code == 200, response.text
    assert "Identity Fern" in names(live_server)


def test_a_compressed_subscription_is_a_415(live_server: LiveServer) -> None:
    body = json.dumps({"url": "https://example.com/hook"}).encode()
    response = post(live_server, gzip.compress(body), "gzip", path="/webhooks")
    assert_error(response, 415)
    with live_server.client() as http:
        listed = http.get("/webhooks", headers=bearer(live_server.token)).json()
    assert all(found["url"] != "https://example.com/hook" for found in listed)


def test_a_401_comes_before_the_coding(live_server: LiveServer) -> None:
    with live_server.client() as http:
        response = http.post(
            "/plants",
            content=gzip.compress(plant("Anonymous Fern")),
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        )
    assert_error(response, 401)


def test_the_coding_415_comes_before_the_413(live_server: LiveServer) -> None:
    response = post(live_server, b" " * (LIMIT + 1), "gzip")
    assert_error(response, 415)


def raw_post(server: LiveServer, path: str, transfer_encoding: str, body: bytes) -> bytes:
    """POST ``body`` in one chunk under ``transfer_encoding``; the whole answer."""
    host, port = server.base_url.removeprefix("http://").split(":")
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
        f"Content-Type: application/json\r\nTransfer-Encoding: {transfer_encoding}\r\n"
        "Connection: close\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode() + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("path", ["/plants", "/webhooks"])
def test_a_body_in_another_transfer_coding_is_a_501(live_server: LiveServer, path: str) -> None:
    name = f"Transfer-coded Fern {path}"
    answer = raw_post(live_server, path, "gzip, chunked", gzip.compress(plant(name)))
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 501 "), answer
    assert b"\r\ncontent-type: application/json" in head.lower()
    assert json.loads(body) == {
        "error": 501,
        "message": "Transfer-Encoding gzip is not supported: "
        "send the body with Content-Length or chunked alone",
    }
    assert name not in names(live_server)


def test_a_plain_body_that_claims_a_transfer_coding_is_not_stored(
    live_server: LiveServer,
) -> None:
    answer = raw_post(live_server, "/plants", "gzip, chunked", plant("Claimed Gzip Fern"))
    assert answer.startswith(b"HTTP/1.1 501 "), answer
    assert "Claimed Gzip Fern" not in names(live_server)


def test_chunked_alone_is_read(live_server: LiveServer) -> None:
    answer = raw_post(live_server, "/plants", "chunked", plant("Chunked Fern"))
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert "Chunked Fern" in names(live_server)
