"""One set of limits per machine, without Redis: the workers of one ``plantstore serve`` spend
one rate budget per token and one failed-authentication budget per address, exactly, through
a table in shared memory; a worker killed mid-spend wedges nobody."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import httpx
from limits import parse

from plantstore.http.machine_budget import (
    MachineBudget,
    MachineTable,
    hex_key,
    machine_budgets,
)
from tests.conftest import (
    LiveServer,
    bearer,
    child_pids,
    start_server,
    stop_server,
    wait_for_started_workers,
)

WORKERS = 3


def serve_three(tmp_path: Path, **env: str) -> LiveServer:
    server = start_server(
        f"sqlite:///{tmp_path / 'machine.db'}", tmp_path / "serve.log", "--workers", "3", **env
    )
    wait_for_started_workers(server, WORKERS)
    assert len(child_pids(server.process.pid)) == WORKERS
    return server


def answered_by(response: httpx.Response) -> str:
    """The answering process: a generated request id starts with its process's prefix."""
    return response.headers["x-request-id"][:12]


def on_new_connections(
    server: LiveServer, count: int, headers: dict[str, str]
) -> list[httpx.Response]:
    """``count`` GET /plants, each on a connection of its own, so the kernel spreads them."""
    answers = []
    for _ in range(count):
        with httpx.Client(base_url=server.base_url, headers={"Connection": "close"}) as http:
            answers.append(http.get("/plants", headers=headers))
    return answers


def test_three_workers_admit_one_token_budget(tmp_path: Path) -> None:
    # Per hour: a budget refills a request every 2 minutes, none while the test runs, so
    # exactly 30 are admitted (at 30/minute one more would be, legitimately, every 2 s).
    server = serve_three(tmp_path, PLANTSTORE_RATE_LIMIT="30/hour")
    try:
        answers = on_new_connections(server, 90, bearer(server.token))
    finally:
        stop_server(server)
    statuses = [answer.status_code for answer in answers]
    assert statuses.count(200) == 30, statuses
    assert statuses.count(429) == 90 - statuses.count(200)
    assert len({answered_by(answer) for answer in answers}) > 1, "one worker answered all"


def test_three_workers_count_one_failed_login_budget(tmp_path: Path) -> None:
    server = serve_three(tmp_path, PLANTSTORE_AUTH_FAILURE_LIMIT="12/hour")
    try:
        answers = [
            on_new_connections(server, 1, bearer("pst_" + f"{n:043d}"))[0] for n in range(36)
        ]
    finally:
        stop_server(server)
    statuses = [answer.status_code for answer in answers]
    assert statuses.count(401) == 12, statuses
    assert statuses.count(429) == 36 - statuses.count(401)
    assert len({answered_by(answer) for answer in answers}) > 1


def test_the_shared_file_lives_as_long_as_serve(tmp_path: Path) -> None:
    server = serve_three(tmp_path, PLANTSTORE_RATE_LIMIT="100/second")  # a budget to keep
    try:
        deadline = time.monotonic() + 20
        while True:  # a worker maps the file in its start-up, once granian said it started
            maps = [
                {
                    line.split()[-1]
                    for line in Path(f"/proc/{worker}/maps").read_text().splitlines()
                    if "plantstore-budgets-" in line
                }
                for worker in child_pids(server.process.pid)
            ]
            if all(maps) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        mapped = set().union(*maps)
        assert all(maps), maps
        assert len(mapped) == 1, mapped  # every worker maps the one file
        shared = Path(mapped.pop())
        assert shared.is_file()
    finally:
        stop_server(server)
    assert not shared.exists()


def _spend_many(path: str, key: str, count: int, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    import asyncio

    budget = MachineBudget(MachineTable(Path(path)), "token", parse("50/hour"), hex_key)

    async def spend() -> int:
        return sum([await budget.spend(key) == 0 for _ in range(count)])

    results.put(asyncio.run(spend()))


def test_racing_processes_admit_exactly_the_budget() -> None:
    with machine_budgets() as path:
        key = "ab" * 32
        results: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
        racers = [
            multiprocessing.get_context("fork").Process(
                target=_spend_many, args=(str(path), key, 40, results)
            )
            for _ in range(4)
        ]
        for racer in racers:
            racer.start()
        admitted = sum(results.get(timeout=30) for _ in racers)
        for racer in racers:
            racer.join(10)
    assert admitted == 50


def test_a_worker_killed_holding_the_lock_wedges_nobody() -> None:
    import fcntl

    with machine_budgets() as path:
        ready = multiprocessing.get_context("fork").Event()

        def hold_forever() -> None:
            descriptor = os.open(path, os.O_RDWR)
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            ready.set()
            time.sleep(60)

        holder = multiprocessing.get_context("fork").Process(target=hold_forever)
        holder.start()
        assert ready.wait(10)
        os.kill(holder.pid or 0, signal.SIGKILL)
        holder.join(10)
        table = MachineTable(path)
        started = time.monotonic()
        wait = table.use("token", hex_key("cd" * 32), 1.0, 0.0, True)
        assert wait == 0.0
        assert time.monotonic() - started < 1.0
