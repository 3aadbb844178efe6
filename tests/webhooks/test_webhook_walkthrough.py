"""docs/webhooks.md's walk-through, run as written against a real server and its own
receiver; and what a loopback receiver meets without PLANTSTORE_WEBHOOK_ALLOW_PRIVATE."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.fixtures.calls import bearer
from tests.fixtures.servers import free_port, start_server, stop_server
from tests.webhooks.webhook_receiver import receiver

pytestmark = pytest.mark.server

WEBHOOKS = Path(__file__).parents[2] / "docs" / "webhooks.md"
SWITCH = "PLANTSTORE_WEBHOOK_ALLOW_PRIVATE"


def block(name: str) -> str:
    """The shell block after ``<!-- walk-through NAME``, its ``# `` output lines left out."""
    found = re.search(
        rf"<!-- walk-through {name}\b.*?-->\n```sh\n(.*?)```", WEBHOOKS.read_text(), re.S
    )
    assert found is not None, f"docs/webhooks.md lost its walk-through {name} block"
    return "\n".join(line for line in found.group(1).splitlines() if not line.startswith("# "))


def test_the_walk_through_delivers_to_its_receiver_on_loopback(tmp_path: Path) -> None:
    started_with = dict(re.findall(r"(PLANTSTORE_\w+)=(\S+)", block("server")))
    assert started_with == {SWITCH: "true"}
    server = start_server(
        f"sqlite:///{tmp_path / 'walk.db'}", tmp_path / "server.log", **started_with
    )
    port = str(free_port())
    printed = tmp_path / "receiver.out"
    with printed.open("w") as out:
        hook = subprocess.Popen(
            ["bash", "-c", block("receiver").replace("9000", port)], stdout=out, text=True
        )
    try:
        wait_for_listener(int(port))
        client = block("client").replace("http://127.0.0.1:8000", server.base_url)
        done = subprocess.run(
            ["bash", "-c", client.replace("9000", port)],
            capture_output=True,
            text=True,
            env={**os.environ, "TOKEN": server.token},
            timeout=30,
            check=True,
        )
        subscribed = json.loads(done.stdout.split("}", 1)[0] + "}")
        assert subscribed["url"] == f"http://127.0.0.1:{port}/plants", done.stdout
        deadline = time.monotonic() + 10
        while "plant.created" not in printed.read_text():
            assert time.monotonic() < deadline, server.log_path.read_text()[-2000:]
            time.sleep(0.05)
    finally:
        hook.terminate()
        hook.wait()
        stop_server(server)
    webhook_id, body = printed.read_text().splitlines()[0].split(" ", 1)
    assert webhook_id.startswith("msg_")
    assert json.loads(body)["data"] == {"id": 7, "name": "Fern", "tag": "indoor"}


def wait_for_listener(port: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)  # GET: answered 501, and listening
            return
        except httpx.TransportError:
            assert time.monotonic() < deadline, "the walk-through's receiver did not listen"
            time.sleep(0.05)


def test_a_loopback_receiver_without_the_switch_is_named_and_warned_about_once(
    tmp_path: Path,
) -> None:
    """Refused at subscription with the switch named; a subscription made while the switch
    was on is, after a restart without it, one warning line, however many events it misses."""
    db_url = f"sqlite:///{tmp_path / 'switch.db'}"
    with receiver() as hook:
        lifted = start_server(db_url, tmp_path / "lifted.log", **{SWITCH: "true"})
        auth = bearer(lifted.token)
        try:
            with lifted.client() as http:
                made = http.post("/webhooks", json={"url": hook.url}, headers=auth)
        finally:
            stop_server(lifted)
        assert made.status_code == 200, made.text
        kept = start_server(db_url, tmp_path / "kept.log", PLANTSTORE_WEBHOOK_RETRY_SCHEDULE="0s")
        try:
            with kept.client() as http:
                refused = http.post("/webhooks", json={"url": hook.url}, headers=auth)
                for plant in (1, 2, 3):
                    created = http.post("/plants", json={"id": plant, "name": "F"}, headers=auth)
                    assert created.status_code == 200
                deliveries = f"/webhooks/{made.json()['id']}/deliveries"
                deadline = time.monotonic() + 15
                while not all_failed(http.get(deliveries, headers=auth).json(), 3):
                    assert time.monotonic() < deadline, kept.log_path.read_text()[-2000:]
                    time.sleep(0.1)
        finally:
            stop_server(kept)
        assert hook.received == []
    assert refused.status_code == 400
    assert SWITCH in refused.json()["message"], refused.text
    records = [json.loads(line) for line in kept.log_path.read_text().splitlines()]
    warnings = [r for r in records if r["level"] == "warning" and "subscription_id" in r]
    assert len(warnings) == 1, warnings
    assert warnings[0]["subscription_id"] == made.json()["id"]
    assert SWITCH in warnings[0]["event"]
    assert warnings[0]["origin"] == hook.url.rsplit("/", 1)[0]


def all_failed(deliveries: list[dict[str, object]], count: int) -> bool:
    return len(deliveries) == count and all(d["status"] == "failed" for d in deliveries)
