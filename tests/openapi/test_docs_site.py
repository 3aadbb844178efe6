"""The served /openapi.json as docs platforms take it: clean under Redocly's recommended rules
(with the committed tools/docs-lint/redocly.yaml), accepted by Mintlify's CLI, and scraped by
Mintlify into one page per operation; ``servers`` and tag descriptions as the contract says.

The checkers are the platforms' own, from npm, pinned in tools/docs-lint/package-lock.json
(`make test` installs them with `npm ci --prefix tools/docs-lint`). They lint the document a real
server serves, once with sandbox mode on and once with it off.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from plantstore.app import openapi_document as build_document
from plantstore.http.responses import encoder
from plantstore.settings import Settings
from tests.fixtures.servers import start_server, stop_server

ROOT = Path(__file__).parents[2]
TOOLS = ROOT / "tools" / "docs-lint"
BIN = TOOLS / "node_modules" / ".bin"
DOCS_PAGE = ROOT / "docs" / "docs-sites.md"
PUBLIC_URL = "https://plants.plantstore.dev/api"
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
# No telemetry and no update checks: CI runs these offline.
QUIET_NODE = {"REDOCLY_TELEMETRY": "off", "REDOCLY_SUPPRESS_UPDATE_NOTICE": "true"}


@dataclass
class Served:
    """A document as a real server served it, and the file the checkers read."""

    document: dict[str, Any]
    path: Path
    sandbox: bool


@pytest.fixture(scope="module", params=["sandbox", "no-sandbox"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Served:
    sandbox = request.param == "sandbox"
    directory = tmp_path_factory.mktemp(f"docs-site-{request.param}")
    env = {"PLANTSTORE_SANDBOX": "true"} if sandbox else {"PLANTSTORE_PUBLIC_URL": PUBLIC_URL}
    server = start_server(
        f"sqlite:///{directory / 'plantstore.db'}", directory / "server.log", **env
    )
    try:
        body = httpx.get(f"{server.base_url}/openapi.json", timeout=10).content
    finally:
        stop_server(server)
    path = directory / "openapi.json"
    path.write_bytes(body)
    return Served(json.loads(body), path, sandbox)


def tool(name: str) -> Path:
    """A checker from tools/docs-lint; skipped with the reason where npm is missing (a
    failure in CI, whose PLANTSTORE_TEST_NO_SKIPS=1 turns every skip into one)."""
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{path} is missing: `make node-tools` installs it (needs npm)")
    return path


def run(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **QUIET_NODE},
        timeout=300,
        check=False,
    )


def operations(document: dict[str, Any]) -> set[str]:
    """Each operation as Mintlify's pages name it: ``get /plants``, ``webhook plantChanged``."""
    return {
        f"{method} {path}"
        for path, item in document["paths"].items()
        for method in item
        if method in HTTP_METHODS
    } | {f"webhook {name}" for name in document.get("webhooks", {})}


@pytest.mark.server
def test_servers_name_the_public_address_or_the_server_itself(served: Served) -> None:
    expected = "/" if served.sandbox else PUBLIC_URL
    assert [server["url"] for server in served.document["servers"]] == [expected]


@pytest.mark.server
def test_every_tag_is_described_and_used(served: Served) -> None:
    tags = {tag["name"]: tag.get("description", "") for tag in served.document["tags"]}
    assert all(len(description) > 20 for description in tags.values()), tags
    used = {
        tag
        for item in served.document["paths"].values()
        for method, operation in item.items()
        if method in HTTP_METHODS
        for tag in operation["tags"]
    }
    assert used == set(tags)
    assert ("sandbox" in tags) is served.sandbox


@pytest.mark.server
def test_redocly_recommended_rules_find_nothing(served: Served) -> None:
    result = run(
        tool("redocly"),
        "lint",
        "--config",
        TOOLS / "redocly.yaml",
        "--format=json",
        served.path,
        cwd=served.path.parent,
    )
    report = json.loads(result.stdout)
    assert report["problems"] == [], result.stdout
    assert report["totals"] == {"errors": 0, "warnings": 0, "ignored": 0}
    assert result.returncode == 0, result.stderr


def test_redocly_config_switches_off_only_what_it_explains() -> None:
    config = (TOOLS / "redocly.yaml").read_text()
    switched_off = re.findall(r"^  ([\w.-]+): off$", config, re.M)
    assert switched_off == ["operation-4xx-response"]
    assert "# /healthz and /readyz take no token" in config


@pytest.mark.server
def test_mintlify_accepts_the_document(served: Served) -> None:
    result = run(tool("mint"), "openapi-check", served.path.name, cwd=served.path.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OpenAPI definition is valid" in result.stdout + result.stderr


@pytest.mark.server
def test_mintlify_makes_a_page_per_operation(served: Served) -> None:
    out = served.path.parent / "mintlify-pages"
    result = run(
        tool("mintlify-scrape"),
        "openapi-file",
        served.path.name,
        "--outDir",
        out.name,
        "--overwrite",
        cwd=served.path.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    pages = {
        match.group(1)
        for page in out.rglob("*.mdx")
        if (match := re.search(r"^openapi: (.+)$", page.read_text(), re.M))
    }
    assert pages == operations(served.document)
    assert ("post /sandbox/tokens" in pages) is served.sandbox


@pytest.mark.server
def test_the_docs_page_status_table_matches_the_served_document(served: Served) -> None:
    """docs/docs-sites.md lists each operation it documents with the statuses it answers."""
    if not served.sandbox:  # the sandbox operation is in the document only in sandbox mode
        assert "/sandbox/tokens" not in served.document["paths"]
        return
    table = DOCS_PAGE.read_text().split("## Status codes", 1)[1]
    listed = dict(re.findall(r"^\| `(\w+ /[^`]*)` \| ([\d, ]+) \|$", table, re.M))
    assert listed, "docs/docs-sites.md has no status table"
    for operation, statuses in listed.items():
        method, path = operation.split(" ", 1)
        documented = served.document["paths"][path][method.lower()]["responses"]
        assert statuses.split(", ") == sorted(documented), operation


def test_a_sandbox_document_leaves_the_next_document_as_it_was(tmp_path: Path) -> None:
    """Building the sandbox-mode document must not change the shared operations it adds to."""
    url = f"sqlite:///{tmp_path / 'doc.db'}"
    plain = encoder.encode(build_document(Settings(database_url=url)))
    sandbox = Settings(database_url=url, sandbox=True)
    once = build_document(sandbox)
    twice = build_document(sandbox)
    assert encoder.encode(build_document(Settings(database_url=url))) == plain
    assert once == twice
    assert (
        "A sandbox user may hold"
        in once["paths"]["/plants"]["post"]["responses"]["403"]["description"]
    )
