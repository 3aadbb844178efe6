"""Fresh benchmark databases: schema and token through the real CLI, rows in bulk.

Going through HTTP would take minutes for a million plants, so rows are written straight
into the tables the migrations created (stdlib sqlite3 ``executemany``, asyncpg ``COPY``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg

BENCH_USER = "bench"
LIST_PLANTS = 1_000  # the bench user's ids 1..1000, the ones every list returns
DELETES_PER_SECOND = 30_000  # delete range headroom: twice the fastest delete rate expected
MIX_DELETES_PER_SECOND = 5_000  # the mix deletes one request in ten
Row = tuple[int, int, str, str | None]


@dataclass(frozen=True)
class Layout:
    """Who owns which plants: the other users' bulk and the bench user's id ranges."""

    users: int
    plants_per_user: int
    delete_from: int
    delete_count: int
    mix_delete_from: int
    mix_delete_count: int

    @classmethod
    def for_run(cls, users: int, plants_per_user: int, seconds: int) -> Layout:
        """Delete ranges large enough that no delete of a run ever finds its id gone."""
        delete_count = DELETES_PER_SECOND * seconds
        delete_from = 1_000_001
        return cls(
            users=users,
            plants_per_user=plants_per_user,
            delete_from=delete_from,
            delete_count=delete_count,
            mix_delete_from=delete_from + delete_count,
            mix_delete_count=MIX_DELETES_PER_SECOND * seconds,
        )

    @property
    def small(self) -> Layout:
        """Only the bench user's listed plants: the baseline for list latency."""
        return Layout(0, 0, self.delete_from, 0, self.mix_delete_from, 0)

    @property
    def total_plants(self) -> int:
        return (
            LIST_PLANTS
            + self.delete_count
            + self.mix_delete_count
            + self.users * self.plants_per_user
        )


def plantstore(database_url: str, *args: str) -> str:
    """Run the real ``plantstore`` command on ``database_url``; return what it printed."""
    return subprocess.run(
        [sys.executable, "-m", "plantstore", *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PLANTSTORE_DATABASE_URL": database_url},
    ).stdout


def prepare(database_url: str) -> str:
    """Create the schema and issue the bench user's token (which creates the user)."""
    plantstore(database_url, "db", "upgrade")
    output = plantstore(database_url, "token", "create", BENCH_USER, "--label", "benchmark")
    token = re.search(r"pst_[A-Za-z0-9_-]+", output.strip().splitlines()[-1])
    if token is None:
        raise RuntimeError(f"token create printed no token: {output}")
    return token.group(0)


def bench_rows(user_id: int, layout: Layout) -> Iterator[Row]:
    """The listed plants (shaped like the reference app's body), then the ones to delete."""
    for plant_id in range(1, LIST_PLANTS + 1):
        yield user_id, plant_id, f"bench plant {plant_id}", "b"
    for start, count in (
        (layout.delete_from, layout.delete_count),
        (layout.mix_delete_from, layout.mix_delete_count),
    ):
        for plant_id in range(start, start + count):
            yield user_id, plant_id, "doomed", None


def other_rows(user_ids: list[int], plants_per_user: int) -> Iterator[Row]:
    """Everyone else's plants, in primary-key order (the cheapest order to insert)."""
    for user_id in user_ids:
        for plant_id in range(1, plants_per_user + 1):
            yield user_id, plant_id, f"plant {plant_id}", None if plant_id % 3 else "green"


def user_names(count: int) -> list[str]:
    """Names no real user (``bench``, ``default``) can collide with."""
    return [f"seed-user-{n:05d}" for n in range(count)]


def seed_sqlite(path: Path, layout: Layout) -> None:
    """Bulk rows into a file the CLI has migrated; one transaction, then a checkpoint."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")  # seeding only: the server sets FULL
        conn.execute("BEGIN")
        (bench_id,) = conn.execute("SELECT id FROM users WHERE name = ?", (BENCH_USER,)).fetchone()
        now = time.time()
        names = user_names(layout.users)
        conn.executemany(
            "INSERT INTO users (name, created_at) VALUES (?, ?)", [(n, now) for n in names]
        )
        ids = [
            row[0]
            for row in conn.execute("SELECT id FROM users WHERE id > ? ORDER BY id", (bench_id,))
        ]
        insert = "INSERT INTO plants (user_id, id, name, tag) VALUES (?, ?, ?, ?)"
        conn.executemany(insert, bench_rows(bench_id, layout))
        conn.executemany(insert, other_rows(ids, layout.plants_per_user))
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    os.sync()  # the seed's dirty pages are written back now, not during a measurement


def count_plants(path: Path) -> int:
    """Rows the SQLite file really holds: a target about table size reports only these."""
    conn = sqlite3.connect(path)
    try:
        (count,) = conn.execute("SELECT count(*) FROM plants").fetchone()
        return int(count)
    finally:
        conn.close()


def seed_postgres(database_url: str, layout: Layout) -> None:
    """Bulk rows with COPY, then ANALYZE so the planner knows the table's real size."""
    asyncio.run(_seed_postgres(database_url, layout))


async def _seed_postgres(database_url: str, layout: Layout) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        bench_id = await conn.fetchval("SELECT id FROM users WHERE name = $1", BENCH_USER)
        now = time.time()
        await conn.copy_records_to_table(
            "users",
            records=[(name, now) for name in user_names(layout.users)],
            columns=["name", "created_at"],
        )
        ids = [
            r["id"]
            for r in await conn.fetch("SELECT id FROM users WHERE id > $1 ORDER BY id", bench_id)
        ]
        columns = ["user_id", "id", "name", "tag"]
        await conn.copy_records_to_table(
            "plants", records=bench_rows(bench_id, layout), columns=columns
        )
        await conn.copy_records_to_table(
            "plants", records=other_rows(ids, layout.plants_per_user), columns=columns
        )
        await conn.execute("ANALYZE")
        with contextlib.suppress(asyncpg.InsufficientPrivilegeError):
            await conn.execute("CHECKPOINT")  # flush the seed now, not during a measurement
    finally:
        await conn.close()
