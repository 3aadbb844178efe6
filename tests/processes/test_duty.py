"""The machine's background jobs run in one worker of a ``serve --workers 3`` at a time: a
receiver gets no more concurrent deliveries than one dispatcher sends, and when the worker
running them is killed another takes them over."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.fixtures.calls import bearer
from tests.fixtures.servers import LiveServer, child_pids, start_workers, stop_server
from tests.webhooks.webhook_receiver import receiver

pytestmark = pytest.mark.server

WORKERS = 3
DUTY_LINE = re.compile(r"this worker runs the machine's background jobs \(pid (\d+)\)")


def serve_three(tmp_path: Path, **env: str) -> LiveServer:
    return start_workers(
        f"sqlite:///{tmp_path / 'duty.db'}",
        tmp_path / "serve.log",
        WORKERS,
        PLANTSTORE_WEBHOOK_ALLOW_PRIVATE="true",
        PLANTSTORE_LOG_LEVEL="info",
        **env,
    )


def duty_holders(server: LiveServer) -> list[int]:
    return [int(pid) for pid in DUTY_LINE.findall(server.log_path.read_text())]


def wait_for(condition: object, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_one_worker_delivers_and_the_endpoint_limit_holds_for_the_machine(tmp_path: Path) -> None:
    in_flight, most = 0, 0
    lock = threading.Lock()

    def slow(_: int) -> tuple[int, dict[str, str], float]:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        time.sleep(0.3)
        with lock:
            in_flight -= 1
        return 200, {}, 0.0

    with receiver(slow) as hooks:
        server = serve_three(tmp_path, PLANTSTORE_WEBHOOK_ENDPOINT_CONCURRENCY="2")
        try:
            wait_for(lambda: duty_holders(server))
            headers = bearer(server.token)
            with httpx.Client(base_url=server.base_url) as http:
                assert http.post("/webhooks", json={"url": hooks.url}, headers=headers).is_success
            for plant_id in range(1, 13):  # on new connections: every worker takes some
                with httpx.Client(base_url=server.base_url, headers={"Connection": "close"}) as h:
                    plant = {"id": plant_id, "name": "fern"}
                    assert h.post("/plants", json=plant, headers=headers).status_code == 200
            hooks.wait_for(12, timeout=30)
            holders = duty_holders(server)
        finally:
            stop_server(server)
    assert len(holders) == 1, holders
    assert most <= 2, f"{most} deliveries at once to one endpoint (limit 2)"


def test_a_killed_duty_holder_hands_the_jobs_to_another_worker(tmp_path: Path) -> None:
    with receiver() as hooks:
        server = serve_three(tmp_path)
        try:
            wait_for(lambda: duty_holders(server))
            [first] = duty_holders(server)
            assert first in child_pids(server.process.pid)
            headers = bearer(server.token)
            with httpx.Client(base_url=server.base_url) as http:
                assert http.post("/webhooks", json={"url": hooks.url}, headers=headers).is_success
            os.kill(first, signal.SIGKILL)
            wait_for(lambda: len(duty_holders(server)) == 2)
            second = duty_holders(server)[1]
            assert second != first
            with httpx.Client(base_url=server.base_url) as http:
                plant = {"id": 1, "name": "after the kill"}
                assert http.post("/plants", json=plant, headers=headers).status_code == 200
            [event] = hooks.wait_for(1, timeout=15)
        finally:
            stop_server(server)
    assert b"after the kill" in event.body
