"""One schema history for both backends: a database written by the previous schema version
is upgraded in place, and its users, tokens and plants come through intact."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from plantstore.app import create_app
from plantstore.auth.tokens import hash_token, new_token
from plantstore.cli import main
from plantstore.db.migrate import SCHEMA_HEAD, current_revision, head_revision, upgrade
from plantstore.settings import Settings
from tests.cli.test_cli import list_json
from tests.fixtures.backends import new_database_url, run_sql
from tests.fixtures.calls import bearer, run_cli, token_from_output

PREVIOUS = "0001"


def write_as_previous_version(db_url: str, token: str) -> None:
    """Rows exactly as the 0001 schema's code wrote them (it had no token labels)."""
    now = time.time()
    statements = [
        f"INSERT INTO users (name, created_at) VALUES ('olduser', {now})",
        "INSERT INTO tokens (user_id, token_hash, created_at, expires_at) "
        f"VALUES (1, '{hash_token(token)}', {now}, NULL)",
        "INSERT INTO plants (user_id, id, name, tag) VALUES (1, -5, 'Aloe', NULL)",
        "INSERT INTO plants (user_id, id, name, tag) VALUES (1, 7, 'Fern 🌿', 'shade')",
        f"INSERT INTO plants (user_id, id, name, tag) VALUES (1, {2**63 - 1}, 'Max', 'big')",
    ]
    for statement in statements:
        run_sql(db_url, statement)


@pytest.fixture
def fresh_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return new_database_url(backend, tmp_path, request, migrated=False)


def test_the_history_has_a_previous_version_to_upgrade_from() -> None:
    assert head_revision() not in (None, PREVIOUS)


def test_the_fast_path_knows_the_newest_revision() -> None:
    """``upgrade`` skips Alembic when a database is at SCHEMA_HEAD: it must be Alembic's head."""
    assert head_revision() == SCHEMA_HEAD


def test_a_fresh_database_has_no_revision_until_upgraded(fresh_url: str) -> None:
    assert current_revision(fresh_url) is None
    upgrade(fresh_url)
    assert current_revision(fresh_url) == head_revision()


def test_db_upgrade_keeps_the_previous_versions_plants_and_tokens(fresh_url: str) -> None:
    upgrade(fresh_url, PREVIOUS)
    assert current_revision(fresh_url) == PREVIOUS
    token = new_token()
    write_as_previous_version(fresh_url, token)

    run_cli(fresh_url, "db", "upgrade")

    assert current_revision(fresh_url) == head_revision()
    [record] = list_json(fresh_url)
    assert (record["id"], record["user"], record["revoked"], record["label"]) == (
        1,
        "olduser",
        None,
        None,
    )
    with TestClient(create_app(Settings(database_url=fresh_url))) as client:
        response = client.get("/plants", headers=bearer(token))
        assert response.status_code == 200, response.text
        assert response.json() == [
            {"name": "Aloe"},
            {"name": "Fern 🌿", "tag": "shade"},
            {"name": "Max", "tag": "big"},
        ]
        assert client.delete("/plants/7", headers=bearer(token)).status_code == 204


def test_the_upgraded_database_takes_new_tokens_with_labels(fresh_url: str) -> None:
    upgrade(fresh_url, PREVIOUS)
    old_token = new_token()
    write_as_previous_version(fresh_url, old_token)
    new = token_from_output(run_cli(fresh_url, "token", "create", "olduser", "--label", "ci"))
    records = list_json(fresh_url)
    assert [(record["user"], record["label"]) for record in records] == [
        ("olduser", None),
        ("olduser", "ci"),
    ]
    with TestClient(create_app(Settings(database_url=fresh_url))) as client:
        for token in (old_token, new):
            assert len(client.get("/plants", headers=bearer(token)).json()) == 3


def test_a_schema_newer_than_this_release_stops_with_one_line(fresh_url: str) -> None:
    """An older release started on a database a newer one migrated says so in one line."""
    upgrade(fresh_url)
    run_sql(fresh_url, "UPDATE alembic_version SET version_num = '9999'")
    result = CliRunner().invoke(main, ["--database", fresh_url, "token", "list"])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Can't locate revision" in result.output
    assert "newer plantstore" in result.output
    assert "Traceback" not in result.output
