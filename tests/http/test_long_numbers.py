"""Numbers of any length in the query, the path and Content-Length: never a 500.

Python's ``int()`` refuses strings of over 4,300 digits; atheris found that a limit, a path id
or a Content-Length padded with zeros past that length was answered 500."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from plantstore.http.keepalive import _declared_body_length
from plantstore.http.parsing import whole_number
from tests.fixtures.calls import assert_error

# HTTP to the service alone (no in-process app, settings or logs): on the two-worker server too.
pytestmark = pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")

Headers = dict[str, str]
PADDED_ONE = "0" * 5_000 + "1"


def test_a_zero_padded_limit_of_any_length_is_its_value(client: TestClient, alice: Headers) -> None:
    for plant_id in (1, 2):
        client.post("/plants", headers=alice, json={"id": plant_id, "name": f"p{plant_id}"})
    page = client.get("/plants", headers=alice, params={"limit": PADDED_ONE})
    assert page.status_code == 200, page.text
    assert page.json() == [{"name": "p1"}]
    assert_error(client.get("/plants", headers=alice, params={"limit": "9" * 5_000}), 400, "limit")


def test_a_zero_padded_path_id_of_any_length_is_its_value(
    client: TestClient, alice: Headers
) -> None:
    client.post("/plants", headers=alice, json={"id": 1, "name": "p1"})
    assert client.delete(f"/plants/{PADDED_ONE}", headers=alice).status_code == 204
    assert_error(client.delete(f"/plants/-{PADDED_ONE}", headers=alice), 404)
    assert_error(client.delete(f"/plants/{'9' * 5_000}", headers=alice), 400, "id")


def test_a_content_length_of_any_length_is_read_without_error() -> None:
    def declared(value: bytes) -> int | None:
        return _declared_body_length({"headers": [(b"content-length", value)]})

    assert declared(b"0" * 5_000 + b"5") == 5
    assert declared(b"9" * 5_000) == whole_number("9" * 5_000)
    assert whole_number("9" * 5_000) > 2**63
