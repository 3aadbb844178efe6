"""The auth generation moves on every change a cache of looked-up tokens must not miss (a
revoked, re-timed or deleted token, a disabled or deleted user), whatever path makes it, and
not on the bookkeeping of every request (a token's last use); a revoked token is refused by a
running server within a second though it was looked up a moment before."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests import pg
from tests.fixtures.backends import new_database_url, run_sql
from tests.fixtures.calls import bearer, run_cli, token_from_output
from tests.fixtures.servers import start_server, stop_server


def generation(db_url: str) -> int:
    if db_url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as conn:
            return int(conn.execute("SELECT value FROM auth_generation").fetchone()[0])
    [[(value,)]] = pg.run_sql(db_url, "SELECT value FROM auth_generation")
    assert isinstance(value, int)
    return value


def test_the_generation_moves_with_what_a_cache_must_not_miss(db_url: str) -> None:
    run_cli(db_url, "token", "create", "alice")
    run_cli(db_url, "token", "create", "bob")
    changes: list[Callable[[], object]] = [
        lambda: run_sql(db_url, "UPDATE tokens SET last_used_at = 5"),  # bookkeeping: no move
        lambda: run_cli(db_url, "token", "revoke", "1"),
        lambda: run_sql(db_url, "UPDATE tokens SET expires_at = 1 WHERE id = 2"),
        lambda: run_cli(db_url, "user", "disable", "bob"),
        lambda: run_sql(db_url, "DELETE FROM tokens WHERE id = 2"),
    ]
    moved = []
    for change in changes:
        before = generation(db_url)
        change()
        moved.append(generation(db_url) > before)
    assert moved == [False, True, True, True, True]


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
@pytest.mark.server
def test_a_cached_token_is_refused_within_a_second_of_its_revocation(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = new_database_url(store, tmp_path, request)
    server = start_server(url, tmp_path / "serve.log")
    try:
        token = token_from_output(run_cli(url, "token", "create", "carol"))
        with httpx.Client(base_url=server.base_url) as http:
            for _ in range(5):  # looked up, then served from the cache
                assert http.get("/plants", headers=bearer(token)).status_code == 200
            token_id = run_cli(url, "token", "list", "carol").splitlines()[1].split()[0]
            run_cli(url, "token", "revoke", token_id)
            revoked = time.monotonic()
            while True:
                sent = time.monotonic() - revoked  # sent, not answered: a host may stall
                if http.get("/plants", headers=bearer(token)).status_code != 200:
                    break
                assert sent < 1.0, f"a request sent {sent:.3f} s after the revocation was served"
                time.sleep(0.02)
    finally:
        stop_server(server)
