"""The peers' phase: plantstore beside what a team would write in an afternoon, in one run.

SQLite: plantstore as shipped (one process), FastAPI + pydantic + sqlite3 on uvicorn and a
naive Starlette + msgspec + sqlite3 app on granian. PostgreSQL: plantstore ``--workers 1``
and FastAPI + asyncpg on uvicorn. Every server gets a fresh database of its own (a file
beside the run's others, or a fresh PostgreSQL database) and the same data: the bench user's
20 plants, created through the server's own API, after a smoke check of the three operations.
Each is pinned to the server's core and wrk to the other, as in the main phase; PostgreSQL
itself is unpinned. Then list 10 and durable creates, whose ids are fresh, so every create is
an insert. Servers run one at a time, in interleaved rounds (plantstore, each peer,
plantstore, each peer, ...), so a drift of the machine touches every server; each ratio is
reported over the rounds as its median and range.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from bench.lib.loads import CREATE_IDS, creates
from bench.lib.measure import LIST_10, Load, Measurement, Options, measure, not_run, warm_up
from bench.lib.seed import prepare
from bench.lib.services import start_service
from harness.postgres import postgres_database, postgres_problem
from harness.servers import Server

from .peer_envs import FASTAPI_ASYNCPG, FASTAPI_SQLITE, STARLETTE_NAIVE, Peer, start_peer

SEEDED = 20  # the bench user's plants: list 10 reads the first ten of them
SCENARIOS = (("list10", "list 10", Load()), ("create", "create", creates(CREATE_IDS)))
SQLITE, POSTGRES = "SQLite", "PostgreSQL"
PLANTSTORE = "plantstore"
FAILURES = (RuntimeError, OSError, subprocess.CalledProcessError, asyncpg.PostgresError)


@dataclass
class Contender:
    """One server of the comparison and its rows, keyed by scenario."""

    name: str  # "plantstore" or the peer's file stem
    label: str
    backend: str
    rows: dict[str, Measurement] = field(default_factory=dict)  # each scenario's median round
    rounds: dict[str, list[Measurement]] = field(default_factory=dict)  # every round, in order

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "backend": self.backend,
            "rows": {key: row.as_json() for key, row in self.rows.items()},
        }


Starter = Callable[[int], AbstractContextManager[Server]]  # given the round
Entrant = tuple[str, str, Starter]  # name, label, how to start it


def sqlite_peers(options: Options, rounds: int = 3) -> list[Contender]:
    """plantstore and each SQLite peer, in interleaved rounds, each on a fresh file."""

    @contextmanager
    def plantstore(round_number: int) -> Iterator[Server]:
        url = f"sqlite:///{options.workdir / f'peers-plantstore-{round_number}.db'}"
        yield start_service(options, f"peers-plantstore-{round_number}", url, prepare(url))

    def peer(which: Peer) -> Starter:
        @contextmanager
        def start(round_number: int) -> Iterator[Server]:
            database = str(options.workdir / f"peers-{which.name}-{round_number}.db")
            log = options.workdir / f"peers-{which.name}-{round_number}.log"
            yield start_peer(which, database, log, options.server_cpus)

        return start

    entrants: list[Entrant] = [
        (PLANTSTORE, "plantstore as shipped, 1 process", plantstore),
        (FASTAPI_SQLITE.name, FASTAPI_SQLITE.label, peer(FASTAPI_SQLITE)),
        (STARLETTE_NAIVE.name, STARLETTE_NAIVE.label, peer(STARLETTE_NAIVE)),
    ]
    return _interleaved(options, SQLITE, entrants, rounds)


def postgres_peers(options: Options, admin_url: str, rounds: int = 3) -> list[Contender]:
    """plantstore --workers 1 and FastAPI + asyncpg, in interleaved rounds, each on a fresh
    database."""

    @contextmanager
    def plantstore(round_number: int) -> Iterator[Server]:
        with postgres_database(admin_url) as url:  # the server stops before the drop
            token = prepare(url)
            name = f"peers-pg-plantstore-{round_number}"
            yield start_service(options, name, url, token, "--workers", "1")

    @contextmanager
    def asyncpg_peer(round_number: int) -> Iterator[Server]:
        with postgres_database(admin_url) as url:
            log = options.workdir / f"peers-{FASTAPI_ASYNCPG.name}-{round_number}.log"
            yield start_peer(FASTAPI_ASYNCPG, url, log, options.server_cpus)

    entrants: list[Entrant] = [
        (PLANTSTORE, "plantstore as shipped, --workers 1", plantstore),
        (FASTAPI_ASYNCPG.name, FASTAPI_ASYNCPG.label, asyncpg_peer),
    ]
    problem = postgres_problem(admin_url)
    if problem is not None:
        print(f"  PostgreSQL peers not run: {problem}", flush=True)
        return [_not_run(name, label, POSTGRES, problem) for name, label, _ in entrants]
    return _interleaved(options, POSTGRES, entrants, rounds)


def _interleaved(
    options: Options, backend: str, entrants: list[Entrant], rounds: int
) -> list[Contender]:
    """Every entrant once per round, in the same order each round; a server that fails in
    any round is reported as not run, with why."""
    contenders = {name: Contender(name, label, backend) for name, label, _ in entrants}
    failed: dict[str, str] = {}
    for round_number in range(1, rounds + 1):
        print(f"  {backend}, round {round_number} of {rounds}", flush=True)
        for name, label, start in entrants:
            if name in failed:
                continue
            measured = _contend(options, name, label, backend, start, round_number)
            if isinstance(measured, str):
                failed[name] = measured
                continue
            for key, row in measured.items():
                contenders[name].rounds.setdefault(key, []).append(row)
    found = []
    for name, label, _ in entrants:
        if name in failed:
            found.append(_not_run(name, label, backend, failed[name]))
            continue
        contender = contenders[name]
        contender.rows = {key: _median_row(rows) for key, rows in contender.rounds.items()}
        found.append(contender)
    return found


def _median_row(rows: list[Measurement]) -> Measurement:
    """The round whose rate is the median (the lower middle of an even count)."""
    rates = sorted(rows, key=lambda row: row.result.good_rate if row.result else 0.0)
    return rates[(len(rates) - 1) // 2]


def round_ratios(ours: Contender, theirs: Contender, key: str) -> list[float]:
    """plantstore's 2xx rate over the peer's, round by round (rounds both completed)."""
    mine, yours = ours.rounds.get(key, []), theirs.rounds.get(key, [])
    return [
        a.result.good_rate / b.result.good_rate
        for a, b in zip(mine, yours, strict=False)
        if a.result and b.result and b.result.good_rate
    ]


def not_run_contenders(backend: str, why: str) -> list[Contender]:
    """The backend's contenders, kept in the report as not run (``--skip-peers`` and such)."""
    names = {
        SQLITE: [
            (PLANTSTORE, "plantstore as shipped, 1 process"),
            (FASTAPI_SQLITE.name, FASTAPI_SQLITE.label),
            (STARLETTE_NAIVE.name, STARLETTE_NAIVE.label),
        ],
        POSTGRES: [
            (PLANTSTORE, "plantstore as shipped, --workers 1"),
            (FASTAPI_ASYNCPG.name, FASTAPI_ASYNCPG.label),
        ],
    }[backend]
    return [_not_run(name, label, backend, why) for name, label in names]


def _not_run(name: str, label: str, backend: str, why: str) -> Contender:
    rows = {
        key: not_run(_key(backend, name, key), f"{label}: {what}", why)
        for key, what, _ in SCENARIOS
    }
    return Contender(name, label, backend, rows)


def _key(backend: str, name: str, scenario: str) -> str:
    return f"peers_{backend.lower()}_{name}_{scenario}"


def _contend(
    options: Options, name: str, label: str, backend: str, start: Starter, round_number: int
) -> dict[str, Measurement] | str:
    """Start the server, check and seed it, measure each scenario; why, if it failed."""
    print(f"  {backend}: {label}", flush=True)
    rows: dict[str, Measurement] = {}
    try:
        with start(round_number) as server:
            try:
                smoke_check(server)
                seed_over_http(server)
                warm_up(server, options)
                for key, what, load in SCENARIOS:
                    if key == "create":  # fresh ids each round: a repeat is no insert
                        load = creates(CREATE_IDS + round_number * 10**9)
                    row_key, scenario = _key(backend, name, key), f"{label}: {what}"
                    rows[key] = measure(server, load, options, row_key, scenario)
                    rows[key].note = f"{backend}, {SEEDED} plants seeded, round {round_number}"
            finally:
                server.stop()
    except FAILURES as exc:
        detail = str(getattr(exc, "stderr", None) or exc).strip().splitlines()
        why = (detail or [type(exc).__name__])[-1][:300]
        print(f"    failed: {why}", flush=True)
        return why
    return rows


SMOKE_ID = 10**15  # far from the seeded plants and the timed creates' ids


def smoke_check(server: Server) -> None:
    """Before a server is timed, prove it answers the three operations as the contract says:
    create 200, the same create again 200, another body on that id 409, list 200 with it,
    delete 204, delete again 404, and no token 401. A server that does not is not timed."""
    plant = {"id": SMOKE_ID, "name": "smoke", "tag": "s"}
    steps = [
        ("POST", "/plants", plant, True, 200),
        ("POST", "/plants", plant, True, 200),
        ("POST", "/plants", {"id": SMOKE_ID, "name": "other"}, True, 409),
        ("GET", "/plants?limit=1000", None, True, 200),
        ("DELETE", f"/plants/{SMOKE_ID}", None, True, 204),
        ("DELETE", f"/plants/{SMOKE_ID}", None, True, 404),
        ("GET", "/plants", None, False, 401),
    ]
    for method, path, body, authorized, wanted in steps:
        headers = {"Content-Type": "application/json"}
        if authorized:
            headers["Authorization"] = f"Bearer {server.token}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(server.base_url + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status, answered = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, answered = exc.code, exc.read()
        if status != wanted:
            raise RuntimeError(f"smoke check: {method} {path} answered {status}, not {wanted}")
        if (
            method == "GET"
            and authorized
            and {"name": "smoke", "tag": "s"} not in json.loads(answered)
        ):
            raise RuntimeError("smoke check: the created plant is not in the list")


def seed_over_http(server: Server) -> None:
    """The bench user's plants 1..20, shaped like the reference app's body, through the API;
    then a list 10 to check that the server answers it with ten plants."""
    headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
    for plant_id in range(1, SEEDED + 1):
        body = {"id": plant_id, "name": f"bench plant {plant_id}", "tag": "b"}
        request = urllib.request.Request(
            f"{server.base_url}/plants", json.dumps(body).encode(), headers, method="POST"
        )
        _answer(request)
    listed = _answer(urllib.request.Request(server.base_url + LIST_10, headers=headers))
    if not isinstance(listed, list) or len(listed) != 10:
        raise RuntimeError(f"list 10 after seeding answered {listed!r}")


def _answer(request: urllib.request.Request) -> object:
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise RuntimeError(
            f"{request.method} {request.full_url}: {exc.code} {exc.read()!r}"
        ) from exc
