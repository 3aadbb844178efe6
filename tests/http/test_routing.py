"""Everything else: unknown paths, wrong methods, faults, operational routes, common headers."""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
from starlette.testclient import TestClient

from tests.fixtures.backends import run_sql
from tests.fixtures.calls import assert_error, bearer

# HTTP to the service alone (no in-process app, settings or logs): on the two-worker server too.
pytestmark = pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")

Headers = dict[str, str]

WRONG_TOKEN = "pst_" + secrets.token_urlsafe(32)  # well-formed, but never issued
MALFORMED_TOKEN = "not-a-plantstore-token-SECRET-XYZZY"


def media_type(response: httpx2.Response) -> str:
    return response.headers.get("content-type", "").split(";")[0].strip().lower()


def allowed(response: httpx2.Response) -> set[str]:
    assert "allow" in response.headers, dict(response.headers)
    return {method.strip().upper() for method in response.headers["allow"].split(",")}


# --- unknown paths and wrong methods ---------------------------------------------------------

UNKNOWN = [
    ("GET", "/nope"),
    ("POST", "/nope"),
    ("DELETE", "/nope"),
    ("GET", "/plants/1/extra"),
    ("DELETE", "/plants/1/extra"),
    ("GET", "/PLANTS"),
    ("POST", "/PLANTS"),
    ("GET", "/Plants"),
    ("DELETE", "/PLANTS/1"),
    ("GET", "/plants/"),
    ("DELETE", "/plants/"),
    ("DELETE", "/plants/1/"),
    ("GET", "/healthz/"),
    ("GET", "/"),
    ("GET", "/v1/plants"),
    ("GET", "/docs/assets/no-such-file.js"),
]


@pytest.mark.parametrize("authenticated", [True, False], ids=["token", "no-token"])
@pytest.mark.parametrize(("method", "path"), UNKNOWN)
def test_unknown_path_is_404_with_error_body(
    client: TestClient, alice: Headers, method: str, path: str, authenticated: bool
) -> None:
    headers = alice if authenticated else {}
    response = client.request(method, path, headers=headers)
    assert_error(response, 404)
    assert "www-authenticate" not in response.headers


def test_unknown_path_does_not_touch_plants(client: TestClient, alice: Headers) -> None:
    client.post("/plants", json={"id": 1, "name": "Fern"}, headers=alice)
    assert_error(client.delete("/plants/1/extra", headers=alice), 404)
    assert_error(client.delete("/PLANTS/1", headers=alice), 404)
    assert client.get("/plants", headers=alice).json() == [{"name": "Fern"}]


WRONG_METHOD = [
    ("PUT", "/plants", {"GET", "POST"}),
    ("PATCH", "/plants", {"GET", "POST"}),
    ("DELETE", "/plants", {"GET", "POST"}),
    ("GET", "/plants/1", {"DELETE"}),
    ("POST", "/plants/1", {"DELETE"}),
    ("PUT", "/plants/1", {"DELETE"}),
    ("PATCH", "/plants/1", {"DELETE"}),
    ("POST", "/healthz", {"GET"}),
    ("DELETE", "/healthz", {"GET"}),
    ("POST", "/readyz", {"GET"}),
    ("POST", "/openapi.json", {"GET"}),
    ("PUT", "/docs", {"GET"}),
]


@pytest.mark.parametrize("authenticated", [True, False], ids=["token", "no-token"])
@pytest.mark.parametrize(("method", "path", "allow"), WRONG_METHOD)
def test_wrong_method_is_405_with_allow_and_error_body(
    client: TestClient,
    alice: Headers,
    method: str,
    path: str,
    allow: set[str],
    authenticated: bool,
) -> None:
    headers = alice if authenticated else {}
    response = client.request(method, path, headers=headers)
    assert_error(response, 405)
    methods = allowed(response)
    assert allow <= methods
    assert method not in methods
    assert "www-authenticate" not in response.headers


def test_wrong_method_does_not_touch_plants(client: TestClient, alice: Headers) -> None:
    client.post("/plants", json={"id": 1, "name": "Fern"}, headers=alice)
    assert_error(client.put("/plants/1", json={"name": "Cactus"}, headers=alice), 405)
    assert_error(client.post("/plants/1", json={"name": "Cactus"}, headers=alice), 405)
    assert_error(client.request("DELETE", "/plants", headers=alice), 405)
    assert client.get("/plants", headers=alice).json() == [{"name": "Fern"}]


# --- unexpected faults -----------------------------------------------------------------------


@pytest.mark.backends("sqlite", "postgres")  # reads the app's log records
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/plants", None),
        ("GET", "/plants?limit=5", None),
        ("POST", "/plants", b'{"id": 1, "name": "Fern"}'),
        ("DELETE", "/plants/1", None),
    ],
)
@pytest.mark.own_database
def test_fault_is_500_with_nothing_internal(
    client: TestClient,
    alice: Headers,
    db_url: str,
    caplog: pytest.LogCaptureFixture,
    method: str,
    path: str,
    body: bytes | None,
) -> None:
    assert client.get("/plants", headers=alice).status_code == 200  # store and token warm
    run_sql(db_url, "DROP TABLE plants")
    headers = {**alice, "Content-Type": "application/json"}
    with caplog.at_level(logging.ERROR):
        response = client.request(method, path, headers=headers, content=body)
    message = assert_error(response, 500)
    assert response.json() == {"error": 500, "message": message}
    lowered = response.text.lower()
    leaks = ["traceback", "sqlite", "postgres", "asyncpg", "plants", "no such table", "relation"]
    for leak in [*leaks, "operationalerror", 'file "']:
        assert leak not in lowered, response.text
    assert db_url.rpartition("/")[2] not in response.text
    assert alice["Authorization"].removeprefix("Bearer ") not in response.text
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["x-content-type-options"] == "nosniff"
    # the details go to the log instead
    logged = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert logged
    assert any(record.exc_info is not None for record in logged)


@pytest.mark.backends("sqlite", "postgres")
@pytest.mark.own_database
def test_fault_does_not_stop_the_process(client: TestClient, alice: Headers, db_url: str) -> None:
    run_sql(db_url, "DROP TABLE plants")
    assert_error(client.get("/plants", headers=alice), 500)
    assert client.get("/healthz").status_code == 200
    assert_error(client.get("/plants", headers=alice), 500)


# --- operational routes ----------------------------------------------------------------------

NO_TOKEN_HEADERS = [
    {},
    {"Authorization": f"Bearer {WRONG_TOKEN}"},
    {"Authorization": "Basic dXNlcjpwYXNz"},
]


@pytest.mark.parametrize("headers", NO_TOKEN_HEADERS, ids=["none", "wrong-token", "basic"])
@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_health_routes_need_no_token(client: TestClient, path: str, headers: Headers) -> None:
    response = client.get(path, headers=headers)
    assert response.status_code == 200, response.text
    assert media_type(response) == "application/json"
    response.json()


@pytest.mark.parametrize("headers", NO_TOKEN_HEADERS, ids=["none", "wrong-token", "basic"])
def test_openapi_document_needs_no_token(client: TestClient, headers: Headers) -> None:
    response = client.get("/openapi.json", headers=headers)
    assert response.status_code == 200, response.text
    assert media_type(response) == "application/json"
    document = response.json()
    assert isinstance(document, dict)
    assert "openapi" in document
    assert {"/plants", "/plants/{id}"} <= set(document["paths"])


@pytest.mark.parametrize("headers", NO_TOKEN_HEADERS, ids=["none", "wrong-token", "basic"])
def test_docs_page_needs_no_token_and_is_html(client: TestClient, headers: Headers) -> None:
    response = client.get("/docs", headers=headers)
    assert response.status_code == 200, response.text
    assert media_type(response) == "text/html"
    assert "<html" in response.text.lower()


@pytest.mark.backends("sqlite", "postgres")
@pytest.mark.own_database
def test_readyz_is_503_with_error_body_when_store_unusable(client: TestClient, db_url: str) -> None:
    assert client.get("/readyz").status_code == 200
    run_sql(db_url, "DROP TABLE secrets")
    deadline = time.monotonic() + 3  # /readyz may answer from a write of the last second
    response = client.get("/readyz")
    while response.status_code == 200 and time.monotonic() < deadline:
        time.sleep(0.1)
        response = client.get("/readyz")
    message = assert_error(response, 503)
    assert response.headers["retry-after"] == "1"
    lowered = message.lower()
    assert "traceback" not in lowered
    assert "sqlite" not in lowered
    assert "postgres" not in lowered
    assert db_url.rpartition("/")[2] not in response.text
    # the process itself is still alive
    assert client.get("/healthz").status_code == 200


# --- headers on every /plants answer, error bodies, and tokens never echoed -----------------


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    auth: str  # "alice", "none", "wrong", "malformed"
    status: int
    body: bytes | None = None
    content_type: str | None = "application/json"

    def __str__(self) -> str:
        return f"{self.method} {self.path} [{self.auth}] -> {self.status}"


CALLS = [
    Call("GET", "/plants", "alice", 200),
    Call("GET", "/plants?limit=0", "alice", 200),
    Call("GET", "/plants?limit=abc", "alice", 400),
    Call("GET", "/plants?limit=1&limit=1", "alice", 400),
    Call("GET", "/plants?cursor=forged", "alice", 400),
    Call("GET", "/plants", "none", 401),
    Call("GET", "/plants", "wrong", 401),
    Call("GET", "/plants", "malformed", 401),
    Call("POST", "/plants", "alice", 200, b'{"id": 2, "name": "Cactus"}'),
    Call("POST", "/plants", "alice", 200, b'{"id": 1, "name": "Fern"}'),
    Call("POST", "/plants", "alice", 409, b'{"id": 1, "name": "Not a fern"}'),
    Call("POST", "/plants", "alice", 400, b'{"id": "1", "name": "Fern"}'),
    Call("POST", "/plants", "alice", 400, b"not json"),
    Call("POST", "/plants", "alice", 415, b'{"id": 2, "name": "Cactus"}', "text/plain"),
    Call("POST", "/plants", "alice", 413, b'{"id": 2, "name": "' + b"x" * 70_000 + b'"}'),
    Call("POST", "/plants", "none", 401, b'{"id": 2, "name": "Cactus"}'),
    Call("POST", "/plants", "wrong", 401, b'{"id": 2, "name": "Cactus"}'),
    Call("DELETE", "/plants/1", "alice", 204),
    Call("DELETE", "/plants/2", "alice", 404),
    Call("DELETE", "/plants/abc", "alice", 400),
    Call("DELETE", "/plants/1", "none", 401),
    Call("DELETE", "/plants/1", "wrong", 401),
    Call("DELETE", "/plants/1", "malformed", 401),
    Call("PUT", "/plants", "alice", 405),
    Call("PATCH", "/plants", "wrong", 405),
    Call("GET", "/plants/1", "alice", 405),
    Call("POST", "/plants/1", "wrong", 405),
    Call("GET", "/plants/1/extra", "alice", 404),
    Call("GET", "/plants/", "wrong", 404),
]


def _send(client: TestClient, alice: Headers, call: Call) -> tuple[httpx2.Response, str]:
    """Create alice's plant 1, then make ``call``; return the response and the token sent."""
    created = client.post("/plants", json={"id": 1, "name": "Fern"}, headers=alice)
    assert created.status_code == 200
    token = {
        "alice": alice["Authorization"].removeprefix("Bearer "),
        "none": "",
        "wrong": WRONG_TOKEN,
        "malformed": MALFORMED_TOKEN,
    }[call.auth]
    headers = bearer(token) if token else {}
    if call.body is not None and call.content_type is not None:
        headers["Content-Type"] = call.content_type
    response = client.request(call.method, call.path, headers=headers, content=call.body)
    assert response.status_code == call.status, response.text
    return response, token


@pytest.mark.parametrize("call", CALLS, ids=str)
def test_every_plants_answer_has_no_store_and_nosniff(
    client: TestClient, alice: Headers, call: Call
) -> None:
    response, _ = _send(client, alice, call)
    assert response.headers.get("cache-control") == "no-store"
    assert response.headers.get("x-content-type-options") == "nosniff"


@pytest.mark.parametrize("call", [call for call in CALLS if call.status >= 400], ids=str)
def test_every_error_has_the_error_body(client: TestClient, alice: Headers, call: Call) -> None:
    response, _ = _send(client, alice, call)
    assert_error(response, call.status)


@pytest.mark.parametrize("call", [call for call in CALLS if call.status >= 400], ids=str)
def test_errors_never_echo_the_token(client: TestClient, alice: Headers, call: Call) -> None:
    response, token = _send(client, alice, call)
    if token:
        assert token not in response.text
        assert token.removeprefix("pst_") not in response.text
        assert token[-16:] not in response.text
    assert "XYZZY" not in response.text
    for name, value in response.headers.items():
        if token:
            assert token not in value, name


@pytest.mark.parametrize(
    "authorization",
    [
        f"Bearer {WRONG_TOKEN}",
        f"bearer {WRONG_TOKEN}",
        f"Bearer {MALFORMED_TOKEN}",
        "Bearer pst_SECRET-XYZZY",
        "Bearer pst_" + "XYZZY" * 20,
        f"Token {WRONG_TOKEN}",
    ],
    # fixed ids: the wrong tokens are made afresh at each collection
    ids=["wrong", "lowercase-scheme", "malformed", "short", "long", "other-scheme"],
)
def test_auth_errors_never_echo_the_credentials(client: TestClient, authorization: str) -> None:
    response = client.get("/plants", headers={"Authorization": authorization})
    message = assert_error(response, 401)
    credentials = authorization.split(" ", 1)[1]
    assert credentials not in response.text
    assert credentials not in message
    assert "XYZZY" not in response.text
    assert credentials[-12:] not in response.text


_ALLOW_PROBE = """
import sys
from starlette.testclient import TestClient
from plantstore.app import create_app
from plantstore.settings import Settings
app = create_app(Settings(database_url=sys.argv[1]))
with TestClient(app) as client:
    print(client.put("/plants").headers["allow"], "|", client.put("/webhooks").headers["allow"])
"""


@pytest.mark.server
def test_allow_lists_the_methods_in_one_order_in_every_process(tmp_path: Path) -> None:
    """Instances behind one address answer alike: the order of ``Allow`` does not follow
    the process's string hashing (each process of Python seeds it anew)."""
    answers = set()
    for seed in range(6):
        ran = subprocess.run(
            [sys.executable, "-c", _ALLOW_PROBE, f"sqlite:///{tmp_path / f'{seed}.db'}"],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        )
        answers.add(ran.stdout.splitlines()[0])  # the access log follows
    assert answers == {"GET, HEAD, POST | GET, HEAD, POST"}
