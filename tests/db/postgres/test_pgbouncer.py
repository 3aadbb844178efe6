"""Behind a real PgBouncer, in session and in transaction pooling, the service keeps every
server-side setting it relies on or refuses to start: the per-user quota holds (each create
sets it for its own transaction), the statement timeout and ``synchronous_commit`` are the
server's own for the service's role, and prepared statements never outlive a transaction
unless the pooler keeps them (and the start refuses a pooler said to keep them that does not).

PgBouncer is Debian's (``apt install pgbouncer``, 1.18), and 1.24 built from Debian's source
(``tools/build-pgbouncer``, which ``make test`` runs) for ``max_prepared_statements``, in front
of the run's PostgreSQL, run by the benchmark's own runner (bench/lib/pgbouncer.py), which
``make bench`` uses too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from harness import pgbouncer
from tests import pg
from tests.fixtures.calls import assert_error, bearer
from tests.fixtures.servers import all_plants, free_port, start_server, stop_server

pytestmark = pytest.mark.server

# Each case: a pool mode, and whether the pooler keeps prepared statements (the 1.24 build).
MODES = {
    "session": ("session", False),
    "transaction": ("transaction", False),
    "transaction-keeping": ("transaction", True),
}
QUOTA = 40


def require(keep_prepared: bool) -> None:
    if not pgbouncer.installed():
        pytest.skip("pgbouncer is not installed (apt install pgbouncer)")
    if keep_prepared and not pgbouncer.keeping_installed():
        pytest.skip("PgBouncer 1.24 is not built (tools/build-pgbouncer; make test runs it)")


@pytest.fixture(params=list(MODES))
def pooled(request: pytest.FixtureRequest, postgres: pg.PostgresServer) -> Iterator[list[str]]:
    """[pool mode, the database's direct URL, its URL through a fresh PgBouncer, whether it
    keeps prepared statements ("true" or "false")]."""
    mode, keep_prepared = MODES[request.param]
    require(keep_prepared)
    direct = postgres.create_database()
    with pgbouncer.pgbouncer(direct, mode, keep_prepared=keep_prepared) as through:
        yield [mode, direct, through, str(keep_prepared).lower()]


def hold_statement_timeout(direct: str, through: str) -> None:
    """Give the service's role the server-side timeout a pooler needs (pooling.py)."""
    pgbouncer.hold_statement_timeout(direct)
    pgbouncer.admin(through, "RECONNECT")  # the server connections it holds start afresh


def refused_start(through: str, **settings: str) -> str:
    """Run ``plantstore serve`` through the pooler; it must stop, saying why in one line."""
    environment = {
        **os.environ,
        "PLANTSTORE_DATABASE_URL": through,
        "PLANTSTORE_PORT": str(free_port()),
        **settings,
    }
    result = subprocess.run(
        [sys.executable, "-m", "plantstore", "serve"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_the_start_refuses_in_one_line_until_the_server_holds_the_settings(
    pooled: list[str],
) -> None:
    mode, _, through, _ = pooled
    line = refused_start(through, PLANTSTORE_POSTGRES_POOLING=mode)
    assert f"behind a {mode} pooler" in line
    assert "SET statement_timeout = '2000ms'" in line
    assert "synchronous_commit" in line  # what it has is said, here "on"


def test_through_the_pooler_the_quota_holds_and_creates_never_fail(
    pooled: list[str], tmp_path: Path
) -> None:
    mode, direct, through, keeping = pooled
    hold_statement_timeout(direct, through)
    server = start_server(
        through,
        tmp_path / "serve.log",
        "--workers",
        "2",
        PLANTSTORE_POSTGRES_POOLING=mode,
        PLANTSTORE_POSTGRES_POOLER_KEEPS_PREPARED=keeping,
        PLANTSTORE_MAX_PLANTS_PER_USER=str(QUOTA),
        PLANTSTORE_RATE_LIMIT="off",
    )
    try:
        headers = bearer(server.token)

        def create(plant_id: int) -> int:
            with httpx.Client(base_url=server.base_url, timeout=10) as http:
                body = {"id": plant_id, "name": f"p{plant_id}"}
                return http.post("/plants", headers=headers, json=body).status_code

        # Concurrent creates from both workers past the quota: batches, the one-create path
        # and the trigger's row lock all run through the pooler's shared server connections.
        with ThreadPoolExecutor(8) as pool:
            statuses = Counter(pool.map(create, range(QUOTA + 12)))
        assert statuses == {200: QUOTA, 403: 12}, statuses
        with server.client() as http:
            refused = http.post("/plants", headers=headers, json={"id": 999, "name": "x"})
            assert_error(refused, 403, "quota")
            assert http.delete("/plants/3", headers=headers).status_code == 204
            again = http.post("/plants", headers=headers, json={"id": 999, "name": "x"})
            assert again.status_code == 200, again.text
        assert len(all_plants(server, server.token)) == QUOTA
        # What the service's sessions run with, seen from the server: the role's settings.
        [[settings]] = pg.run_sql(
            through,
            "SELECT current_setting('statement_timeout'), current_setting('synchronous_commit')",
        )
        assert settings == ("2s", "on")
    finally:
        stop_server(server)
    assert "Traceback" not in server.log_path.read_text()


def test_a_pooler_that_keeps_prepared_statements_is_sent_each_statement_once(
    postgres: pg.PostgresServer, tmp_path: Path
) -> None:
    """With the 1.24 build asyncpg's cache stays on: 200 lists, a handful of Parse messages."""
    require(keep_prepared=True)
    direct = postgres.create_database()
    with pgbouncer.pgbouncer(direct, "transaction", keep_prepared=True) as through:
        hold_statement_timeout(direct, through)
        server = start_server(
            through,
            tmp_path / "serve.log",
            PLANTSTORE_POSTGRES_POOLING="transaction",
            PLANTSTORE_POSTGRES_POOLER_KEEPS_PREPARED="true",
            PLANTSTORE_RATE_LIMIT="off",
        )
        try:
            before = pgbouncer.stats(through)
            with server.client() as http:
                for _ in range(200):
                    assert http.get("/plants", headers=bearer(server.token)).status_code == 200
            after = pgbouncer.stats(through)
        finally:
            stop_server(server)
    binds = after["total_bind_count"] - before["total_bind_count"]
    parses = after["total_client_parse_count"] - before["total_client_parse_count"]
    assert binds >= 200, (binds, parses)
    assert parses <= 10, (binds, parses)  # each statement once per connection, not per use
    assert "Traceback" not in server.log_path.read_text()


def test_a_pooler_said_to_keep_prepared_statements_that_drops_them_is_refused_in_one_line(
    postgres: pg.PostgresServer,
) -> None:
    require(keep_prepared=False)
    direct = postgres.create_database()
    with pgbouncer.pgbouncer(direct, "transaction") as through:  # Debian's 1.18
        hold_statement_timeout(direct, through)
        line = refused_start(
            through,
            PLANTSTORE_POSTGRES_POOLING="transaction",
            PLANTSTORE_POSTGRES_POOLER_KEEPS_PREPARED="true",
        )
    assert "does not keep prepared statements" in line
    assert "PLANTSTORE_POSTGRES_POOLER_KEEPS_PREPARED=false" in line
