"""Slow and oversized clients against a real server: oversized heads are refused, and a client
that sends its head or body too slowly is cut off at the deadline the settings name."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.fixtures.servers import LiveServer, start_server, stop_server

pytestmark = pytest.mark.server

DEADLINE = 2.0  # seconds, for both deadlines here (the defaults are 10 s and 30 s)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One server for the module: no test here stores anything."""
    directory = tmp_path_factory.mktemp("slow-clients")
    env = {"PLANTSTORE_HEADER_TIMEOUT": str(DEADLINE), "PLANTSTORE_BODY_TIMEOUT": str(DEADLINE)}
    live = start_server(f"sqlite:///{directory / 'slow.db'}", directory / "serve.log", **env)
    yield live
    stop_server(live)


def connect(server: LiveServer) -> socket.socket:
    host, port = server.base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_head_over_16_kib_is_refused_with_431(server: LiveServer) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 17_000 + b"\r\n\r\n")
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]


def test_a_head_of_15_kib_is_served(server: LiveServer) -> None:
    with connect(server) as sock:
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: "
        sock.sendall(head + b"a" * 15_000 + b"\r\n\r\n")
        assert read_all(sock).startswith(b"HTTP/1.1 200 ")


def test_a_head_sent_too_slowly_is_cut_off_at_the_header_deadline(server: LiveServer) -> None:
    started = time.monotonic()
    with connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        closed_after = trickle_until_closed(sock, give_up_after=DEADLINE + 3)
    assert closed_after is not None, "the server kept a head that never ended"
    elapsed = closed_after - started
    # Both ends: a server that hung up at once (or at the first slow line) is as wrong as
    # one that waits past the deadline, and only the lower bound tells it apart.
    assert elapsed >= DEADLINE - 0.1, f"cut off after {elapsed:.2f} s, before the deadline"
    assert elapsed < DEADLINE + 1.5, f"cut off after {elapsed:.2f} s, well past the deadline"


def trickle_until_closed(sock: socket.socket, give_up_after: float) -> float | None:
    """Send a header line every 0.1 s; return when the server closed, or None when it has
    not after ``give_up_after`` seconds."""
    give_up = time.monotonic() + give_up_after
    while time.monotonic() < give_up:
        try:
            sock.sendall(b"X-Slow: y\r\n")
            time.sleep(0.1)
            if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                return time.monotonic()
        except BlockingIOError:
            continue  # nothing to read yet: still open
        except OSError:
            return time.monotonic()  # reset or broken pipe: closed
    return None


def test_a_body_sent_too_slowly_is_answered_408_and_the_connection_closed(
    server: LiveServer,
) -> None:
    body = json.dumps({"id": 1, "name": "slow"}).encode()
    head = (
        f"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    started = time.monotonic()
    with connect(server) as sock:
        sock.sendall(head + body[:5])  # and the rest never comes
        answer = read_all(sock)
    elapsed = time.monotonic() - started
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 408 "), answer[:200]
    headers, _, payload = rest.partition(b"\r\n\r\n")
    assert b"connection: close" in headers.lower()
    assert json.loads(payload)["error"] == 408
    assert DEADLINE - 0.1 < elapsed < 2 * DEADLINE - 0.5, "one deadline, not the deadline twice"


def test_a_declared_oversized_body_is_refused_without_being_read(server: LiveServer) -> None:
    head = (
        f"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 10000000\r\n\r\n"
    ).encode()
    with connect(server) as sock:
        sock.sendall(head + b"{" + b" " * 1000)  # 10 MB announced, 1 KB sent: waiting is a 408
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
