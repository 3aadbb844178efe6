"""Off a terminal the server's whole output is JSON lines: its own records, granian's start
and stop lines, and the first-start token."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.fixtures.calls import bearer
from tests.fixtures.servers import start_server, stop_server, wait_for_started_workers

pytestmark = pytest.mark.server


def test_every_line_of_a_first_start_and_a_stop_is_a_json_object(tmp_path: Path) -> None:
    server = start_server(
        f"sqlite:///{tmp_path / 'fresh.db'}", tmp_path / "server.log", "--workers", "2"
    )
    try:
        wait_for_started_workers(server, 2)
        served = httpx.get(f"{server.base_url}/plants", headers=bearer(server.token))
    finally:
        stop_server(server)
    assert server.process.returncode == 0
    assert served.status_code == 200  # the token in the log is the one issued
    lines = server.log_path.read_text().splitlines()  # stdout and stderr, together
    records = [json.loads(line) for line in lines]
    assert all(isinstance(record, dict) for record in records), lines
    events = [(record["logger"], record["event"]) for record in records]
    assert ("_granian", "Granian shutdown completed, see ya!") in events, events
    assert sum(event.startswith("Spawning worker-") for _, event in events) == 2, events
    issued = [record for record in records if record["logger"] == "plantstore.auth"]
    assert len(issued) == 1, issued
    assert issued[0]["user"] == "default"
    assert f" {server.token} " in issued[0]["event"]
    assert "\n".join(lines).count("pst_") == 1  # shown once


def test_a_second_start_logs_no_token(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'again.db'}"
    stop_server(start_server(db_url, tmp_path / "first.log"))
    again = start_server(db_url, tmp_path / "second.log")
    stop_server(again)
    text = again.log_path.read_text()
    assert again.token == ""
    assert "pst_" not in text
    assert all(isinstance(json.loads(line), dict) for line in text.splitlines())
