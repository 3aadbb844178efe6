"""One set of limits per machine, without Redis: the workers of one ``plantstore serve`` spend
one rate budget per token and one failed-authentication budget per address, exactly, through
a table in shared memory; a worker killed holding its lock wedges nobody."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from limits import parse

from plantstore.http.machine_budget import STALE_LOCK_S, MachineBudget, MachineTable, hex_key
from tests.fixtures.calls import bearer
from tests.fixtures.servers import LiveServer, answered_by, start_workers, stop_server

WORKERS = 3
FORK = multiprocessing.get_context("fork")


def serve_three(tmp_path: Path, **env: str) -> LiveServer:
    return start_workers(
        f"sqlite:///{tmp_path / 'machine.db'}", tmp_path / "serve.log", WORKERS, **env
    )


def on_new_connection(server: LiveServer, headers: dict[str, str]) -> httpx.Response:
    """GET /plants on a connection of its own, so the kernel spreads the requests."""
    with httpx.Client(base_url=server.base_url, headers={"Connection": "close"}) as http:
        return http.get("/plants", headers=headers)


@pytest.mark.server
def test_three_workers_admit_one_token_budget(tmp_path: Path) -> None:
    # Per hour: a budget refills a request every 2 minutes, none while the test runs, so
    # exactly 30 are admitted (at 30/minute one more would be, legitimately, every 2 s).
    server = serve_three(tmp_path, PLANTSTORE_RATE_LIMIT="30/hour")
    try:
        answers = [on_new_connection(server, bearer(server.token)) for _ in range(90)]
    finally:
        stop_server(server)
    statuses = [answer.status_code for answer in answers]
    assert statuses.count(200) == 30, statuses
    assert statuses.count(429) == 60
    assert len({answered_by(answer) for answer in answers}) > 1, "one worker answered all"


@pytest.mark.server
def test_three_workers_count_one_failed_login_budget(tmp_path: Path) -> None:
    server = serve_three(tmp_path, PLANTSTORE_AUTH_FAILURE_LIMIT="12/hour")
    try:
        answers = [on_new_connection(server, bearer("pst_" + f"{n:043d}")) for n in range(36)]
    finally:
        stop_server(server)
    statuses = [answer.status_code for answer in answers]
    assert statuses.count(401) == 12, statuses
    assert statuses.count(429) == 24
    assert len({answered_by(answer) for answer in answers}) > 1


def _spend_many(table: MachineTable, key: str, count: int, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    budget = MachineBudget(table, "token", parse("50/hour"), hex_key)

    async def spend() -> int:
        return sum([await budget.spend(key) == 0 for _ in range(count)])

    results.put(asyncio.run(spend()))


def test_racing_processes_admit_exactly_the_budget() -> None:
    table = MachineTable()
    results: multiprocessing.Queue = FORK.Queue()  # type: ignore[type-arg]
    racers = [
        FORK.Process(target=_spend_many, args=(table, "ab" * 32, 40, results)) for _ in range(4)
    ]
    for racer in racers:
        racer.start()
    admitted = [results.get(timeout=30) for _ in racers]
    for racer in racers:
        racer.join(10)
    assert sum(admitted) == 50
    assert sum(1 for count in admitted if count) > 1, admitted  # they did race


def test_a_worker_killed_holding_the_lock_wedges_nobody() -> None:
    table = MachineTable()
    ready = FORK.Event()

    def hold_forever() -> None:
        table.acquire()
        ready.set()
        time.sleep(60)

    holder = FORK.Process(target=hold_forever)
    holder.start()
    assert ready.wait(10)
    os.kill(holder.pid or 0, signal.SIGKILL)
    holder.join(10)
    budget = MachineBudget(table, "token", parse("1/hour"), hex_key)
    started = time.monotonic()
    assert asyncio.run(budget.spend("cd" * 32)) == 0.0
    assert STALE_LOCK_S <= time.monotonic() - started < STALE_LOCK_S + 1.0
    assert asyncio.run(budget.spend("cd" * 32)) > 0  # the lock works again: no wait, refused


def test_keys_that_share_a_first_cell_keep_a_cell_each() -> None:
    # Two cell keys (the first 64 bits) whose low 16 bits, and so their first cells, agree.
    # The limit is never reached, so each budget is whole again at once and its cell free
    # to take. Each must keep its own, not take the other's: that made every spend of both
    # keys look its cell up afresh.
    table = MachineTable()
    budget = MachineBudget(table, "token", parse("1000000000/second"), hex_key)
    first, second = "0000000000010001" + "ab" * 24, "0000000000020001" + "ab" * 24
    looked_up: list[str] = []
    look_up = budget._use

    def counted(key: str, *, spend: bool) -> float:
        looked_up.append(key)
        return look_up(key, spend=spend)

    budget._use = counted  # type: ignore[method-assign]

    async def alternate() -> list[float]:
        return [await budget.spend(key) for _ in range(50) for key in (first, second)]

    assert asyncio.run(alternate()) == [0.0] * 100
    assert looked_up == [first, second]  # found once each, then spent where it was
