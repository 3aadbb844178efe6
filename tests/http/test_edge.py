"""The edge with no proxy in front, against a real ``plantstore serve`` over raw sockets:
connections that send nothing are closed at the header deadline and cannot take the service
down, and every layer answers in the contract's shape (a client that leaves mid-body is a
499, a body whose framing cannot be read a 400 with the Error body, a request without
exactly one Host a 400)."""

from __future__ import annotations

import json
import re
import resource
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.fixtures.calls import run_cli, token_from_output
from tests.fixtures.servers import LiveServer, start_server, stop_server

pytestmark = pytest.mark.server

DEADLINE = 2.0  # the header deadline here (10 s shipped)
IDLE_CONNECTIONS = 2_000  # twice the concurrency budget granian had by default (1,024)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    directory = tmp_path_factory.mktemp("edge")
    env = {
        "PLANTSTORE_HEADER_TIMEOUT": str(DEADLINE),
        "PLANTSTORE_WEBHOOK_ALLOW_PRIVATE": "true",
    }
    live = start_server(f"sqlite:///{directory / 'edge.db'}", directory / "serve.log", **env)
    yield live
    stop_server(live)


def connect(server: LiveServer) -> socket.socket:
    host, port = server.base_url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def seconds_until_closed(sock: socket.socket, limit: float) -> float | None:
    """How long until the server closes ``sock`` (None: not within ``limit``)."""
    started = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def exchange(server: LiveServer, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw``; return the answer's status, headers and body (read until closed)."""
    with connect(server) as sock:
        sock.sendall(raw)
        chunks = []
        sock.settimeout(10)
        while chunk := sock.recv(65536):
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks) and _complete(b"".join(chunks)):
                break
    answer = b"".join(chunks)
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


def _complete(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    found = re.search(rb"(?i)content-length:\s*(\d+)", head)
    return found is not None and len(body) >= int(found.group(1))


def access_line(server: LiveServer, request_id: object) -> dict[str, object]:
    """The one access-log line of ``request_id``, waited for: it is written within 50 ms of the
    answer, later on a stalled host."""
    deadline = time.monotonic() + 10
    while not _lines_of(server, request_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.1)  # a second line for the same request would be written by now
    [line] = _lines_of(server, request_id)
    return line


def _lines_of(server: LiveServer, request_id: object) -> list[dict[str, object]]:
    return [entry for entry in access_lines(server) if entry["request_id"] == request_id]


def access_lines(server: LiveServer) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for line in server.log_path.read_text().splitlines()
        if line.startswith("{") and '"plantstore.access"' in line
    ]


def test_a_connection_that_sends_nothing_is_closed_at_the_header_deadline(
    server: LiveServer,
) -> None:
    with connect(server) as sock:
        closed_after = seconds_until_closed(sock, DEADLINE + 5)
    assert closed_after is not None, "a connection that sent nothing was kept open"
    assert DEADLINE - 0.5 <= closed_after <= DEADLINE + 1.0


def test_an_idle_kept_alive_connection_is_closed_at_the_same_deadline(server: LiveServer) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.2)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        closed_after = seconds_until_closed(sock, DEADLINE + 5)
    assert closed_after is not None, "an idle keep-alive connection was kept open"
    assert closed_after <= DEADLINE + 1.0


def test_idle_connections_past_the_old_budget_leave_the_service_answering(
    server: LiveServer,
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 3 * IDLE_CONNECTIONS)), hard))
    host, port = server.base_url.removeprefix("http://").split(":")
    idle = [
        socket.create_connection((host, int(port)), timeout=10) for _ in range(IDLE_CONNECTIONS)
    ]
    took: list[float] = []
    try:
        time.sleep(0.3)
        with httpx.Client(timeout=DEADLINE / 2) as http:
            while len(took) < 3 and not any(seconds < 0.5 for seconds in took):
                started = time.monotonic()  # the best of three: a stalled host may slow one
                answer = http.get(f"{server.base_url}/healthz", headers={"Connection": "close"})
                took.append(time.monotonic() - started)
                assert answer.status_code == 200
    finally:
        for sock in idle:
            sock.close()
    assert min(took) < 0.5, f"/healthz took {took} s beside {IDLE_CONNECTIONS} idle connections"


def test_the_start_line_says_how_many_connections_a_worker_holds(server: LiveServer) -> None:
    start = next(
        json.loads(line)
        for line in server.log_path.read_text().splitlines()
        if line.startswith("{") and "serving http://" in line
    )
    assert start["connections_per_worker"] >= 1_024
    assert start["open_file_limit"] > start["connections_per_worker"]
    assert f"up to {start['connections_per_worker']:,} connections per worker" in start["event"]


@pytest.mark.parametrize("path", ["/plants", "/webhooks", "/webhooks/1/redeliver"])
def test_a_client_that_leaves_mid_body_is_a_499_without_a_traceback(
    server: LiveServer, path: str
) -> None:
    request_id = f"leaves-{path.replace('/', '-')}"
    with connect(server) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: 100\r\n"
            f'X-Request-ID: {request_id}\r\n\r\n{{"id"'.encode()
        )
        time.sleep(0.3)
    time.sleep(0.5)
    line = access_line(server, request_id)
    assert line["status"] == 499, line
    log = server.log_path.read_text()
    assert "Traceback" not in log
    assert "unexpected fault" not in log


MALFORMED_CHUNKS = {
    "overflowing size": b"FFFFFFFFFFFFFFFFFFFFFF\r\nabc\r\n0\r\n\r\n",
    "size not hex": b"zz\r\nabc\r\n0\r\n\r\n",
    "bare LF": b"3\nabc\n0\n\n",
}


@pytest.mark.parametrize("path", ["/plants", "/webhooks"])
@pytest.mark.parametrize("chunks", list(MALFORMED_CHUNKS), ids=list(MALFORMED_CHUNKS))
def test_a_malformed_chunked_body_is_a_400_with_the_error_body(
    server: LiveServer, path: str, chunks: str
) -> None:
    request_id = f"chunks-{path.strip('/')}-{chunks.replace(' ', '-')}"
    status, headers, body = exchange(
        server,
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
        f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
        f"X-Request-ID: {request_id}\r\n\r\n".encode()
        + MALFORMED_CHUNKS[chunks],
    )
    assert status == 400, body
    assert headers["content-type"] == "application/json"
    assert headers["x-request-id"] == request_id
    error = json.loads(body)
    assert error["error"] == 400
    assert "body" in error["message"]
    line = access_line(server, request_id)
    assert line["status"] == 400


def test_a_malformed_body_stores_nothing(server: LiveServer) -> None:
    with httpx.Client(base_url=server.base_url) as http:
        before = http.get("/plants", headers={"Authorization": f"Bearer {server.token}"}).json()
    exchange(
        server,
        f"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
        f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        + b'1b\r\n{"id": 77, "name": "Fern"}\r\nzz\r\n',
    )
    with httpx.Client(base_url=server.base_url) as http:
        after = http.get("/plants", headers={"Authorization": f"Bearer {server.token}"}).json()
    assert after == before


def test_a_whole_plant_in_a_body_that_broke_off_is_not_stored(server: LiveServer) -> None:
    """The body holds a complete plant, but its client left before the length it declared:
    the server sees the body end early, answers nobody (499) and stores nothing."""
    request_id = "broke-off-after-a-whole-plant"
    with connect(server) as sock:
        sock.sendall(
            f"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: 40\r\n"
            f"X-Request-ID: {request_id}\r\n\r\n".encode()
            + b'{"id": 78, "name": "Broken Fern"}'
        )
        time.sleep(0.3)
    time.sleep(0.5)
    line = access_line(server, request_id)
    assert line["status"] == 499, line
    with httpx.Client(base_url=server.base_url) as http:
        plants = http.get("/plants", headers={"Authorization": f"Bearer {server.token}"}).json()
    assert {"name": "Broken Fern"} not in plants


def test_a_chunked_body_with_trailers_is_refused_and_stores_nothing(server: LiveServer) -> None:
    """Trailers cannot be told from a broken body where the server reads it (docs/operating.md),
    so a request body that carries them is refused as unreadable."""
    status, _, body = exchange(
        server,
        f"POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
        f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        + b'22\r\n{"id": 79, "name": "Trailer Fern"}\r\n0\r\nX-Checksum: 1\r\n\r\n',
    )
    assert status == 400, body
    assert "body" in json.loads(body)["message"]
    with httpx.Client(base_url=server.base_url) as http:
        plants = http.get("/plants", headers={"Authorization": f"Bearer {server.token}"}).json()
    assert {"name": "Trailer Fern"} not in plants


@pytest.mark.parametrize(
    "head",
    [
        b"GET /healthz HTTP/1.1\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: \r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET /healthz HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n",
    ],
    ids=["none", "empty", "two", "two on HTTP/1.0"],
)
def test_a_request_without_exactly_one_host_is_a_400(server: LiveServer, head: bytes) -> None:
    status, headers, body = exchange(server, head)
    assert status == 400, body
    assert headers["content-type"] == "application/json"
    assert headers["x-request-id"]
    assert json.loads(body) == {
        "error": 400,
        "message": "the request must carry exactly one Host header, with a value "
        "(RFC 9112 section 3.2)",
    }


def test_an_http_1_0_request_needs_no_host(server: LiveServer) -> None:
    status, _, body = exchange(server, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert status == 200, body
    assert json.loads(body) == {"status": "ok"}


@pytest.mark.parametrize(
    "head",
    [
        b"GET /a\tb HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
    ],
    ids=["tab in the target", "absurd Content-Length", "obs-fold"],
)
def test_a_head_the_server_cannot_parse_gets_its_own_empty_400(
    server: LiveServer, head: bytes
) -> None:
    """docs/api.md lists these: the server answers before the app can, with no body."""
    status, headers, body = exchange(server, head)
    assert status == 400
    assert headers.get("connection") == "close"
    assert body == b""


def test_a_refused_token_is_not_marked_used(server: LiveServer) -> None:
    revoked = token_from_output(run_cli(server.db_url, "token", "create", "mallory"))
    [record] = [r for r in _tokens(server) if r["user"] == "mallory"]
    run_cli(server.db_url, "token", "revoke", str(record["id"]))
    expired = token_from_output(
        run_cli(server.db_url, "token", "create", "eve", "--expires-in", "1s")
    )
    time.sleep(1.5)
    for token in (revoked, expired):
        for _ in range(3):
            answer = httpx.get(
                f"{server.base_url}/plants", headers={"Authorization": f"Bearer {token}"}
            )
            assert answer.status_code == 401
    time.sleep(1.5)  # "last used" is written in the background
    used = {r["user"]: r["last_used"] for r in _tokens(server) if r["user"] in ("mallory", "eve")}
    assert used == {"mallory": None, "eve": None}


def _tokens(server: LiveServer) -> list[dict[str, object]]:
    output = run_cli(server.db_url, "token", "list", "--json")
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]
