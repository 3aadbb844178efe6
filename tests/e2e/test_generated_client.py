"""An SDK generated from the served document works against the real service.

The OpenAPI document is a promise to SDK users, not only to schemathesis: this test fetches
``/openapi.json`` from a running server, feeds it to openapi-python-client (a widely used
generator, pinned in the dev dependencies), requires it to accept the document without a
single warning (each warning is a construct it skipped, i.e. a degraded client), then drives
create, list (with paging), delete and the error answers through the generated, typed API.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.fixtures.servers import LiveServer, start_server, stop_server

pytestmark = pytest.mark.server

PACKAGE = "plant_store_client"
GENERATOR = Path(sys.executable).with_name("openapi-python-client")
# The generator's default post-hooks run ruff from PATH; the client must not depend on them.
CONFIG = "post_hooks: []\n"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    live = start_server(f"sqlite:///{tmp_path / 'plantstore.db'}", tmp_path / "server.log")
    try:
        assert live.token, "the first start should issue and print a token"
        yield live
    finally:
        stop_server(live)


def generate_client(server: LiveServer, directory: Path) -> Path:
    """Fetch the served document, run the generator on it; return the package's parent."""
    with server.client() as http:
        response = http.get("/openapi.json")
    assert response.status_code == 200, response.text
    document = directory / "openapi.json"
    document.write_bytes(response.content)
    config = directory / "config.yaml"
    config.write_text(CONFIG)
    parent = directory / "generated"
    parent.mkdir()
    assert GENERATOR.exists(), f"{GENERATOR} is missing: install the dev dependencies"
    result = subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            str(document),
            "--output-path",
            str(parent / PACKAGE),
            "--meta",
            "none",
            "--config",
            str(config),
            "--fail-on-warning",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # It says "Generating <path>" and nothing else: any warning is a degraded client.
    said = [line for line in output.splitlines() if line.strip()]
    assert said == [f"Generating {parent / PACKAGE}"], output
    assert (parent / PACKAGE / "__init__.py").exists(), output
    return parent


@contextlib.contextmanager
def imported(parent: Path) -> Iterator[dict[str, Any]]:
    """Import the generated package's modules; forget them (and the path) afterwards."""

    def forget() -> None:
        for name in [name for name in sys.modules if name.split(".")[0] == PACKAGE]:
            del sys.modules[name]

    forget()
    sys.path.insert(0, str(parent))
    importlib.invalidate_caches()
    try:
        names = [
            "",
            ".types",
            ".errors",
            ".models",
            ".api.plants.create_plant",
            ".api.plants.list_plants",
            ".api.plants.delete_plant",
        ]
        yield {
            name.rpartition(".")[2] or PACKAGE: importlib.import_module(PACKAGE + name)
            for name in names
        }
    finally:
        sys.path.remove(str(parent))
        forget()
        importlib.invalidate_caches()


def next_cursor(headers: Any) -> str | None:
    """The ``cursor`` of the ``Link: <...>; rel="next"`` header, if there is one."""
    link: str | None = headers.get("link")
    if link is None:
        return None
    assert 'rel="next"' in link, link
    [cursor] = parse_qs(urlsplit(link[link.index("<") + 1 : link.index(">")]).query)["cursor"]
    return cursor


def test_generated_client_drives_the_service(server: LiveServer, tmp_path: Path) -> None:
    parent = generate_client(server, tmp_path)
    with imported(parent) as modules:
        package = modules[PACKAGE]
        types = modules["types"]
        models = modules["models"]
        create_plant = modules["create_plant"]
        list_plants = modules["list_plants"]
        delete_plant = modules["delete_plant"]
        Plant, NewPlant, Error = models.Plant, models.NewPlant, models.Error
        unset_type = types.Unset

        # The generated API is typed from the document, not a bag of Any.
        list_hints = typing.get_type_hints(list_plants.sync_detailed)
        assert list_hints["limit"] == int | unset_type
        assert list_hints["cursor"] == str | unset_type
        returned = list_hints["return"]  # Response[Error | list[Plant]]
        assert typing.get_origin(returned) is types.Response
        [answers] = typing.get_args(returned)
        error_type, page_type = typing.get_args(answers)
        assert error_type is Error
        assert typing.get_origin(page_type) is list
        assert typing.get_args(page_type) == (Plant,)
        assert typing.get_type_hints(create_plant.sync_detailed)["body"] is NewPlant
        assert typing.get_type_hints(delete_plant.sync_detailed)["id"] is int
        assert typing.get_type_hints(NewPlant)["id"] is int
        assert "id" not in typing.get_type_hints(Plant)

        client = package.AuthenticatedClient(
            base_url=server.base_url, token=server.token, raise_on_unexpected_status=True
        )
        with client:
            # Create: one plant with a tag, one without.
            created = create_plant.sync_detailed(
                client=client, body=NewPlant(id=1, name="Monstera", tag="tropical")
            )
            assert created.status_code == 200, created.content
            assert isinstance(created.parsed, Plant)
            assert (created.parsed.name, created.parsed.tag) == ("Monstera", "tropical")
            bare = create_plant.sync(client=client, body=NewPlant(id=2, name="Fern"))
            assert isinstance(bare, Plant)
            assert bare.name == "Fern"
            assert isinstance(bare.tag, unset_type)
            assert bare.to_dict() == {"name": "Fern"}

            # A different plant under an existing id: 409, parsed as the Error model.
            conflict = create_plant.sync_detailed(client=client, body=NewPlant(id=2, name="Cactus"))
            assert conflict.status_code == 409
            assert isinstance(conflict.parsed, Error)
            assert conflict.parsed.error == 409

            # List: both, as Plant models, the untagged one with tag UNSET.
            plants = list_plants.sync(client=client)
            assert isinstance(plants, list)
            assert all(isinstance(plant, Plant) for plant in plants)
            assert [plant.to_dict() for plant in plants] == [
                {"name": "Monstera", "tag": "tropical"},
                {"name": "Fern"},
            ]
            assert isinstance(plants[1].tag, unset_type)
            assert all(plant.additional_properties == {} for plant in plants)

            # Paging: limit=1, then the cursor from the Link header.
            first = list_plants.sync_detailed(client=client, limit=1)
            assert first.status_code == 200
            assert [plant.name for plant in first.parsed] == ["Monstera"]
            cursor = next_cursor(first.headers)
            assert cursor is not None, first.headers
            second = list_plants.sync_detailed(client=client, limit=1, cursor=cursor)
            assert second.status_code == 200
            assert [plant.name for plant in second.parsed] == ["Fern"]
            assert next_cursor(second.headers) is None

            # A damaged cursor: 400 as the Error model, naming the parameter.
            damaged = list_plants.sync_detailed(client=client, cursor="A" * 32)
            assert damaged.status_code == 400
            assert isinstance(damaged.parsed, Error)
            assert "cursor" in damaged.parsed.message

            # Delete: 204, then 404 parsed as the Error model.
            deleted = delete_plant.sync_detailed(1, client=client)
            assert deleted.status_code == 204
            assert deleted.content == b""
            again = delete_plant.sync_detailed(1, client=client)
            assert again.status_code == 404
            assert isinstance(again.parsed, Error)
            assert again.parsed.error == 404
            assert [plant.name for plant in list_plants.sync(client=client)] == ["Fern"]

        # No token, and a wrong token: 401 parsed as the Error model.
        anonymous = package.Client(base_url=server.base_url, raise_on_unexpected_status=True)
        with anonymous:
            refused = list_plants.sync_detailed(client=anonymous)
            assert refused.status_code == 401
            assert isinstance(refused.parsed, Error)
            assert refused.parsed.error == 401
            assert refused.headers["www-authenticate"] == 'Bearer realm="plantstore"'
        impostor = package.AuthenticatedClient(
            base_url=server.base_url, token="pst_" + "x" * 43, raise_on_unexpected_status=True
        )
        with impostor:
            refused = delete_plant.sync_detailed(2, client=impostor)
            assert refused.status_code == 401
            assert isinstance(refused.parsed, Error)
            assert refused.parsed.error == 401
            assert 'error="invalid_token"' in refused.headers["www-authenticate"]
