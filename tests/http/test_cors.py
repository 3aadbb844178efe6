"""CORS for docs sites and browser apps: off unless origins are configured; when they are,
preflights for the API's methods and headers pass, and answers (errors too) are readable by
the allowed origins alone. Preflight answers keep the contract's shapes."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest
from starlette.testclient import TestClient

from plantstore.app import create_app
from plantstore.settings import Settings, SettingsError, load_settings
from tests.fixtures.calls import assert_error

Headers = dict[str, str]
DOCS = "https://docs.example.com"
OTHER = "https://evil.example.net"


@pytest.fixture
def cors(settings: Settings) -> Iterator[TestClient]:
    allowed = settings.model_copy(update={"cors_origins": f"{DOCS}, http://localhost:3000"})
    with TestClient(create_app(allowed), raise_server_exceptions=False) as client:
        yield client


def preflight(
    client: TestClient, origin: str, method: str, headers: str, path: str = "/plants"
) -> httpx2.Response:
    return client.options(
        path,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": headers,
        },
    )


@pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")
def test_no_cors_by_default(client: TestClient, alice: Headers) -> None:
    answer = preflight(client, DOCS, "DELETE", "authorization")
    assert_error(answer, 405)  # no preflight handling: OPTIONS is just another method
    assert "access-control-allow-origin" not in answer.headers
    listed = client.get("/plants", headers={**alice, "Origin": DOCS})
    assert listed.status_code == 200
    assert "access-control-allow-origin" not in listed.headers


@pytest.mark.parametrize(
    ("method", "path", "requested"),
    [
        ("DELETE", "/plants/1", "authorization"),
        ("POST", "/plants", "authorization, content-type"),
        ("GET", "/plants", "authorization,x-request-id"),
    ],
)
def test_preflight_for_the_api_passes(
    cors: TestClient, method: str, path: str, requested: str
) -> None:
    answer = preflight(cors, DOCS, method, requested, path)
    assert answer.status_code == 204
    assert answer.content == b""
    assert answer.headers["access-control-allow-origin"] == DOCS
    assert set(answer.headers["access-control-allow-methods"].split(", ")) == {
        "GET",
        "POST",
        "DELETE",
    }
    allowed_headers = {
        h.strip().lower() for h in answer.headers["access-control-allow-headers"].split(",")
    }
    assert {"authorization", "content-type"} <= allowed_headers
    assert answer.headers["access-control-max-age"] == "600"
    assert "origin" in answer.headers["vary"].lower()


@pytest.mark.parametrize(
    ("origin", "method", "requested", "refused"),
    [
        (OTHER, "GET", "authorization", "origin"),
        (DOCS, "PUT", "authorization", "method"),
        (DOCS, "GET", "x-secret-header", "headers"),
    ],
)
def test_refused_preflight_is_an_error_body(
    cors: TestClient, origin: str, method: str, requested: str, refused: str
) -> None:
    answer = preflight(cors, origin, method, requested)
    message = assert_error(answer, 400)
    assert "CORS" in message
    assert refused in message
    if refused == "origin":
        assert "access-control-allow-origin" not in answer.headers


def test_allowed_origin_reads_answers_and_errors(cors: TestClient, alice: Headers) -> None:
    created = cors.post(
        "/plants", json={"id": 1, "name": "Fern"}, headers={**alice, "Origin": DOCS}
    )
    assert created.status_code == 200
    assert created.headers["access-control-allow-origin"] == DOCS
    exposed = {
        h.strip().lower() for h in created.headers["access-control-expose-headers"].split(",")
    }
    assert {"link", "retry-after", "www-authenticate", "x-request-id"} <= exposed
    refused = cors.get("/plants", headers={"Origin": DOCS})
    assert_error(refused, 401)
    assert refused.headers["access-control-allow-origin"] == DOCS  # the page can show why


def test_other_origins_get_no_cors_headers(cors: TestClient, alice: Headers) -> None:
    listed = cors.get("/plants", headers={**alice, "Origin": OTHER})
    assert listed.status_code == 200  # the server answers; the browser withholds it from OTHER
    assert "access-control-allow-origin" not in listed.headers


def test_origins_setting_is_validated() -> None:
    with pytest.raises(SettingsError, match="PLANTSTORE_CORS_ORIGINS"):
        load_settings(cors_origins="docs.example.com")
