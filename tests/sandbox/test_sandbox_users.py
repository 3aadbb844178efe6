"""``plantstore user list`` tells the users a sandbox made from the operator's own."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from tests.fixtures.calls import run_cli
from tests.fixtures.servers import start_server, stop_server

pytestmark = pytest.mark.server


def test_user_list_marks_sandbox_users(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'sandbox.db'}"
    server = start_server(
        db_url,
        tmp_path / "server.log",
        PLANTSTORE_SANDBOX="true",
        PLANTSTORE_SANDBOX_ISSUE_LIMIT="off",
    )
    try:
        with server.client() as http:
            issued = http.post("/sandbox/tokens")
    finally:
        stop_server(server)
    assert issued.status_code == 200, issued.text
    listed = [json.loads(line) for line in run_cli(db_url, "user", "list", "--json").splitlines()]
    assert [(user["user"], user["sandbox_expires"]) for user in listed[:1]] == [("default", None)]
    [visitor] = listed[1:]
    assert visitor["user"].startswith("sandbox-")
    assert visitor["issuer"] is None  # the operator's namespace, whatever made it
    assert datetime.fromisoformat(visitor["sandbox_expires"]) == datetime.fromisoformat(
        issued.json()["expires_at"]
    )
    table = dict(line.split()[1:3] for line in run_cli(db_url, "user", "list").splitlines()[1:])
    assert table == {"default": "(operator)", visitor["user"]: "(sandbox)"}
