"""The peers' phase: plantstore beside what a team would write in an afternoon, in one run.

SQLite: plantstore as shipped (one process), FastAPI + pydantic + sqlite3 on uvicorn and a
naive Starlette + msgspec + sqlite3 app on granian. PostgreSQL: plantstore ``--workers 1``
and FastAPI + asyncpg on uvicorn. Every server gets a fresh database of its own (a file
beside the run's others, or a fresh PostgreSQL database) and the same data: the bench user's
20 plants, created through the server's own API. Each is pinned to the server's core and wrk
to the other, as in the main phase; PostgreSQL itself is unpinned. Then list 10 and durable
creates, whose ids are fresh, so every create is an insert. Servers run one at a time.
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

from lib.loads import CREATE_IDS, creates
from lib.measure import LIST_10, Load, Measurement, Options, measure, not_run, warm_up
from lib.postgres import postgres_database, postgres_problem
from lib.seed import prepare
from lib.servers import Server
from lib.services import start_service
from speed.peer_envs import FASTAPI_ASYNCPG, FASTAPI_SQLITE, STARLETTE_NAIVE, Peer, start_peer

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
    rows: dict[str, Measurement] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "backend": self.backend,
            "rows": {key: row.as_json() for key, row in self.rows.items()},
        }


Starter = Callable[[], AbstractContextManager[Server]]


def sqlite_peers(options: Options) -> list[Contender]:
    """plantstore, then each SQLite peer, each on a fresh file in the run's directory."""

    @contextmanager
    def plantstore() -> Iterator[Server]:
        url = f"sqlite:///{options.workdir / 'peers-plantstore.db'}"
        yield start_service(options, "peers-plantstore", url, prepare(url))

    def peer(which: Peer) -> Starter:
        @contextmanager
        def start() -> Iterator[Server]:
            database = str(options.workdir / f"peers-{which.name}.db")
            log = options.workdir / f"peers-{which.name}.log"
            yield start_peer(which, database, log, options.server_cpus)

        return start

    return [
        _contend(options, PLANTSTORE, "plantstore as shipped, 1 process", SQLITE, plantstore),
        _contend(options, FASTAPI_SQLITE.name, FASTAPI_SQLITE.label, SQLITE, peer(FASTAPI_SQLITE)),
        _contend(
            options, STARLETTE_NAIVE.name, STARLETTE_NAIVE.label, SQLITE, peer(STARLETTE_NAIVE)
        ),
    ]


def postgres_peers(options: Options, admin_url: str) -> list[Contender]:
    """plantstore --workers 1, then FastAPI + asyncpg, each on a fresh database."""

    @contextmanager
    def plantstore() -> Iterator[Server]:
        with postgres_database(admin_url) as url:  # _contend stops the server before the drop
            token = prepare(url)
            yield start_service(options, "peers-pg-plantstore", url, token, "--workers", "1")

    @contextmanager
    def asyncpg_peer() -> Iterator[Server]:
        with postgres_database(admin_url) as url:
            log = options.workdir / f"peers-{FASTAPI_ASYNCPG.name}.log"
            yield start_peer(FASTAPI_ASYNCPG, url, log, options.server_cpus)

    contenders = [
        (PLANTSTORE, "plantstore as shipped, --workers 1", plantstore),
        (FASTAPI_ASYNCPG.name, FASTAPI_ASYNCPG.label, asyncpg_peer),
    ]
    problem = postgres_problem(admin_url)
    if problem is not None:
        print(f"  PostgreSQL peers not run: {problem}", flush=True)
        return [_not_run(name, label, POSTGRES, problem) for name, label, _ in contenders]
    return [_contend(options, name, label, POSTGRES, start) for name, label, start in contenders]


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


def _contend(options: Options, name: str, label: str, backend: str, start: Starter) -> Contender:
    """Start the server, seed it, measure each scenario; a server that fails is not run."""
    print(f"  {backend}: {label}", flush=True)
    contender = Contender(name, label, backend)
    try:
        with start() as server:
            try:
                smoke_check(server)
                seed_over_http(server)
                warm_up(server, options)
                for key, what, load in SCENARIOS:
                    row_key, scenario = _key(backend, name, key), f"{label}: {what}"
                    contender.rows[key] = measure(server, load, options, row_key, scenario)
                    contender.rows[key].note = f"{backend}, {SEEDED} plants seeded"
            finally:
                server.stop()
    except FAILURES as exc:
        detail = str(getattr(exc, "stderr", None) or exc).strip().splitlines()
        why = (detail or [type(exc).__name__])[-1][:300]
        print(f"    failed: {why}", flush=True)
        return _not_run(name, label, backend, why)
    return contender


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
