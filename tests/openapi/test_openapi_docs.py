"""The served OpenAPI document says what the contract says; /docs works with no internet."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.testclient import TestClient

# HTTP to the service alone (no in-process app, settings or logs): on the two-worker server too.
pytestmark = pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")


@pytest.fixture
def document(client: TestClient) -> dict[str, Any]:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body: dict[str, Any] = response.json()
    return body


def test_document_carries_the_seed_identity(document: dict[str, Any]) -> None:
    assert document["openapi"] == "3.1.0"
    assert document["info"]["title"] == "Plant Store"
    assert document["info"]["version"] == "1.0.0"
    assert document["info"]["license"]["name"] == "MIT"
    assert all("/v1" not in path for path in document["paths"])


def test_bearer_scheme_applies_to_plants_but_not_operational_routes(
    document: dict[str, Any],
) -> None:
    assert document["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": document["components"]["securitySchemes"]["bearerAuth"]["description"],
    }
    assert document["security"] == [{"bearerAuth": []}]
    for path in ("/healthz", "/readyz"):
        assert document["paths"][path]["get"]["security"] == []


@pytest.mark.parametrize(
    ("path", "method", "statuses"),
    [
        (
            "/plants",
            "post",
            {"200", "400", "401", "403", "408", "409", "413", "415", "429", "500", "501", "503"},
        ),
        ("/plants", "get", {"200", "400", "401", "429", "500", "503"}),
        ("/plants/{id}", "delete", {"204", "400", "401", "404", "429", "500", "503"}),
    ],
)
def test_every_contract_status_is_documented(
    document: dict[str, Any], path: str, method: str, statuses: set[str]
) -> None:
    responses = document["paths"][path][method]["responses"]
    assert set(responses) == statuses
    for status in statuses - {"200", "204"}:
        response = responses[status]
        if "$ref" in response:
            response = document["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
        assert response["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/Error"
        }


def test_list_documents_limit_cursor_and_link(document: dict[str, Any]) -> None:
    operation = document["paths"]["/plants"]["get"]
    parameters = {parameter["name"]: parameter for parameter in operation["parameters"]}
    assert parameters["limit"]["schema"] == {
        "type": "integer",
        "format": "int32",
        "minimum": 0,
        "maximum": 2147483647,
    }
    assert parameters["cursor"]["in"] == "query"
    assert "Link" in operation["responses"]["200"]["headers"]


def test_schemas_match_the_wire_shapes(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert schemas["Plant"]["required"] == ["name"]
    assert "id" not in schemas["Plant"]["properties"]
    assert schemas["NewPlant"]["required"] == ["id", "name"]
    assert schemas["NewPlant"]["additionalProperties"] is False
    assert schemas["NewPlant"]["properties"]["id"]["format"] == "int64"
    assert schemas["NewPlant"]["properties"]["name"]["maxLength"] == 256
    assert schemas["NewPlant"]["properties"]["tag"]["maxLength"] == 64
    assert schemas["Error"]["required"] == ["error", "message"]
    assert schemas["Error"]["properties"]["error"]["format"] == "int32"
    unauthorized = document["components"]["responses"]["Unauthorized"]
    assert "WWW-Authenticate" in unauthorized["headers"]


def test_docs_page_loads_only_assets_the_service_serves(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    references = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert references, "the page should load its script and styles"
    for reference in references:
        assert reference.startswith("/docs/assets/"), f"{reference} is not served locally"
        asset = client.get(reference)
        assert asset.status_code == 200, reference
        assert len(asset.content) > 0
    initializer = client.get("/docs/assets/init.js").text
    assert '"/openapi.json"' in initializer
    assert "validatorUrl: null" in initializer  # the badge would call an outside service


@pytest.mark.parametrize("path", ["/docs", "/docs/assets/init.js"])
@pytest.mark.parametrize(
    "range_header", ["bytes=0-10", "bytes=9-2", "items=0-1", "bytes=99999999-"]
)
def test_docs_files_are_sent_whole_whatever_the_range(
    client: TestClient, path: str, range_header: str
) -> None:
    """Starlette answers a bad Range with plain text or a bare 416; these files ignore Range."""
    whole = client.get(path)
    answer = client.get(path, headers={"Range": range_header})
    assert answer.status_code == 200
    assert answer.content == whole.content
    assert "accept-ranges" not in answer.headers
    assert "content-range" not in answer.headers


def test_unavailable_is_documented_with_retry_after(document: dict[str, Any]) -> None:
    unavailable = document["components"]["responses"]["Unavailable"]
    assert unavailable["headers"]["Retry-After"]["required"] is True
    assert unavailable["headers"]["Retry-After"]["schema"]["type"] == "integer"
    assert document["paths"]["/readyz"]["get"]["responses"]["503"] == {
        "$ref": "#/components/responses/Unavailable"
    }
