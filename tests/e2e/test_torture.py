"""Crash safety, Jepsen-style, bounded for CI: 20 SIGKILLs per backend under concurrent
creates and deletes by several users and tokens, then every acknowledged write checked; and
20 more on SQLite served by two workers, some of one worker alone, some of the whole server.
(``make torture --supervisor-kill-chance`` also kills the supervisor alone.)

``make torture`` runs the same engine (trials/torture/) with 100 kills per backend.
"""

from __future__ import annotations

import random
from pathlib import Path

import httpx
import pytest

from trials.torture.client import Client, Op, Outcome, Signals
from trials.torture.config import TortureConfig, TortureResult
from trials.torture.engine import run_torture
from trials.torture.judge import Key, judge
from trials.torture.victim import Victim

KILLS = 20


@pytest.mark.timeout(600)
@pytest.mark.server
def test_sigkill_torture_loses_and_resurrects_nothing(
    backend: str, db_url: str, tmp_path: Path
) -> None:
    config = TortureConfig(
        database_url=db_url,
        workdir=tmp_path,
        kills=KILLS,
        clients=10,
        users=3,
        tokens_per_user=2,
        workers=2 if backend == "postgres" else 1,
        startup_kill_chance=0.05,  # each costs a whole extra start: keep CI's run short
        progress=print,
    )
    result = run_torture(config)
    assert_survived(result, sqlite=backend == "sqlite")
    assert result.worker_kills == 0


@pytest.mark.timeout(600)
@pytest.mark.parametrize("writers", ["each", "one"])
@pytest.mark.server
def test_sigkill_torture_of_two_sqlite_workers_one_at_a_time_or_all(
    writers: str, tmp_path: Path
) -> None:
    """Two workers on one SQLite file: a kill takes one worker (granian replaces it while the
    other serves on, and writes on) or the whole server. With ``each`` worker committing its
    own writes, a worker killed may die mid-transaction with the other waiting for its lock;
    with ``one`` writer for the machine, about half the worker kills take the one that owns
    it (and the other takes the writer over). Not a backend of the ``backend`` fixture: this
    run needs a file and server of its own, not the shared two-worker server's."""
    config = TortureConfig(
        database_url=f"sqlite:///{tmp_path / 'torture.db'}",
        workdir=tmp_path,
        kills=KILLS,
        clients=10,
        users=3,
        tokens_per_user=2,
        workers=2,
        worker_kill_chance=0.5,
        startup_kill_chance=0.05,
        server_env={"PLANTSTORE_SQLITE_WRITERS": writers},
        progress=print,
    )
    result = run_torture(config)
    assert_survived(result, sqlite=True)
    summary = (
        f"{result.worker_kills} of {result.kills} kills took one worker, {result.owner_kills} "
        f"of them the writer's owner (seed {result.seed})"
    )
    print(summary)
    assert 0 < result.worker_kills < result.kills, summary  # both kinds of kill happened
    if writers == "one":  # both roles of worker: the one that owns the writer, and another
        assert 0 < result.owner_kills < result.worker_kills, summary
    else:  # no worker owns the others' writes
        assert result.owner_kills == 0, summary


def assert_survived(result: TortureResult, *, sqlite: bool) -> None:
    summary = (
        f"seed {result.seed}: {result.kills} kills ({result.worker_kills} of one worker, "
        f"{result.owner_kills} of them the SQLite writer's owner, "
        f"{result.supervisor_kills} of the supervisor alone, "
        f"+{result.startup_kills} while starting), "
        f"{result.acknowledged_creates} acknowledged creates, "
        f"{result.acknowledged_deletes} acknowledged deletes, {result.uncertain} uncertain "
        f"({result.unavailable} of them 503 with Retry-After), {len(result.faults)} server "
        f"faults (5xx), {result.listed} listed; integrity_check {result.integrity_check}; "
        f"{result.mean_restart:.1f}s per restart, {result.seconds:.0f}s in all"
    )
    print(summary)
    assert result.kills >= KILLS, summary
    findings = result.findings()
    assert not result.faults, f"{summary}\n{findings}"  # a 500 is a fault, not a maybe
    assert not findings, f"{summary}\n{findings}"
    assert result.integrity_check == ("ok" if sqlite else "n/a"), summary
    # The run proved something: writes were acknowledged and deleted between the kills,
    # some requests were cut off by a kill, and plants were there to be listed.
    assert result.acknowledged_creates >= KILLS, summary
    assert result.acknowledged_deletes > 0, summary
    assert result.uncertain > 0, summary
    assert result.listed > 0, summary
    assert result.passed, summary


def test_judge_tells_lost_resurrected_and_unexpected_apart() -> None:
    """The verdicts themselves, on hand-made histories (the run above only sees passes)."""
    plant = ("1~1 Ficus", "green")
    acknowledged = Key("u", 1, possible={plant}, sent={plant})
    assert judge(acknowledged, plant) == []
    assert judge(acknowledged, None) == ["lost"]
    assert judge(acknowledged, ("1~1 Ficus", None)) == ["lost", "unexpected"]  # tag dropped
    deleted = Key("u", 1, possible={None}, sent={plant})
    assert judge(deleted, None) == []
    assert judge(deleted, plant) == ["resurrected"]
    assert judge(deleted, ("1~9 never sent", None)) == ["unexpected"]
    # An uncertain delete of an acknowledged plant, or an uncertain create: either outcome.
    maybe = Key("u", 1, possible={plant, None}, sent={plant})
    assert judge(maybe, plant) == []
    assert judge(maybe, None) == []
    assert judge(maybe, ("1~2 Ficus", "green")) == ["unexpected"]


@pytest.mark.parametrize(
    ("status", "headers", "fault"),
    [
        (503, {"Retry-After": "1"}, False),  # the contract's outage answer: uncertain
        (500, {}, True),
        (503, {}, True),  # an outage answer must say when to retry
        (502, {"Retry-After": "1"}, True),
    ],
)
def test_a_5xx_is_a_fault_unless_it_is_a_503_with_retry_after(
    tmp_path: Path, status: int, headers: dict[str, str], fault: bool
) -> None:
    """How one answer is classed, on a canned answer (the run above only sees a good server)."""
    config = TortureConfig(database_url=f"sqlite:///{tmp_path / 'unused.db'}", workdir=tmp_path)
    client = Client(0, "u", "pst_x", Victim(config), Signals(), random.Random(1))
    body = {"error": status, "message": "canned"}
    answer = httpx.MockTransport(lambda request: httpx.Response(status, headers=headers, json=body))
    key = Key("u", 1, possible={None})
    op = Op("create", key, ("1~1 Ficus", None))
    with httpx.Client(transport=answer) as http:
        outcome, response = client._send(http, op)
    assert outcome is Outcome.UNCERTAIN
    assert client._record(op, outcome, response) is op  # repeated until definite
    assert key.possible == {None, ("1~1 Ficus", None)}  # it may have happened either way
    assert client.result.uncertain == 1
    assert client.result.unavailable == (0 if fault else 1)
    assert len(client.result.faults) == (1 if fault else 0)
    verdict = TortureResult("sqlite", 0, acknowledged_creates=1, faults=client.result.faults)
    assert verdict.passed is not fault
    assert ("server fault" in verdict.findings()) is fault
