"""The sandbox purge's cost to everyone else: another user's latency with and without a purge
of 10,000 expired sandbox users x 100 plants running, on SQLite.

A fresh file holds the bench user's plants and the sandbox users (seeded straight into SQLite,
not yet expired). A sandbox-mode server takes paced creates and then paced list 10 from the
bench user, latency counted from each request's due time (``scheduled.lua``): the figures
without a purge. The server stops, every sandbox user's expiry is moved an hour into the past,
and a new server (the purge looks every second with a 10 s TTL) takes the same loads while its
purge runs. Its log says how long the purge took, in how many steps, and the longest a step
held the writer: the most a write can have waited on the purge. Each row says how much of its window the
purge covered; after the loads, the phase waits for the purge to finish and checks that only
the bench user is left.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.lib.measure import Load, Measurement, Options, measure, not_run, warm_up
from bench.lib.seed import BENCH_USER, LIST_PLANTS, prepare
from bench.lib.services import start_service
from harness.servers import Server

PLANTS_EACH = 100
RATES = {"create": 100, "list10": 400}  # per second: well below saturation on two shared cores
CREATE_IDS = 6 * 10**12  # ids no other phase uses (lib/loads.py, speed/workers_phase.py)
DONE = re.compile(
    r"sandbox purge deleted (\d+) rows in ([\d.]+) s \((\d+) steps, the longest held ([\d.]+) ms\)"
)
PURGE_TIMEOUT_S = 900


@dataclass
class Purge:
    """What the server's purge reported, and when it ran (monotonic seconds after start)."""

    rows: int
    seconds: float
    steps: int
    longest_hold_ms: float
    users_left: int


@dataclass
class SandboxResult:
    users: int
    plants_each: int
    without: list[Measurement] = field(default_factory=list)
    during: list[Measurement] = field(default_factory=list)
    purge: Purge | None = None
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "users": self.users,
            "plants_each": self.plants_each,
            "rates": RATES,
            "without_purge": [row.as_json() for row in self.without],
            "during_purge": [row.as_json() for row in self.during],
            "purge": None if self.purge is None else asdict(self.purge),
            "note": self.note,
        }


def not_run_result(why: str, users: int) -> SandboxResult:
    rows = [not_run(f"sandbox_{name}", name, why) for name in RATES]
    return SandboxResult(users, PLANTS_EACH, rows, rows, None, f"not run: {why}")


def seed(path: Path, users: int, expires_at: float) -> None:
    """The bench user's LIST_PLANTS plants and ``users`` sandbox users of PLANTS_EACH plants,
    each with its token, in one transaction."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA synchronous = OFF")  # seeding only: the server sets FULL
        conn.execute("BEGIN")
        (bench,) = conn.execute("SELECT id FROM users WHERE name = ?", (BENCH_USER,)).fetchone()
        conn.executemany(
            "INSERT INTO plants (user_id, id, name) VALUES (?, ?, 'bench plant')",
            [(bench, plant) for plant in range(1, LIST_PLANTS + 1)],
        )
        for n in range(users):
            user = conn.execute(
                "INSERT INTO users (name, created_at, max_plants, sandbox_expires_at) "
                "VALUES (?, 0, ?, ?)",
                (f"sandbox-bench-{n}", PLANTS_EACH, expires_at),
            ).lastrowid
            conn.execute(
                "INSERT INTO tokens (user_id, token_hash, created_at, expires_at, label) "
                "VALUES (?, ?, 0, ?, 'sandbox')",
                (user, f"{n:064x}", expires_at),
            )
            conn.executemany(
                "INSERT INTO plants (user_id, id, name) VALUES (?, ?, 'x')",
                [(user, plant) for plant in range(PLANTS_EACH)],
            )
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def expire_all(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(
            "UPDATE users SET sandbox_expires_at = ? WHERE sandbox_expires_at IS NOT NULL",
            (time.time() - 3600,),
        )
        conn.commit()


def sandbox_users(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM users WHERE sandbox_expires_at IS NOT NULL"
        ).fetchone()
        return int(count)


def loads(run: int) -> list[tuple[str, Load]]:
    """Paced creates (fresh ids per run) and paced list 10, both from the bench user."""
    create = Load(
        script="scheduled.lua",
        env={
            "PLANTSTORE_BENCH_RATE": str(RATES["create"]),
            "PLANTSTORE_BENCH_CREATE_FROM": str(CREATE_IDS + run * 10**9),
        },
    )
    listing = Load(script="scheduled.lua", env={"PLANTSTORE_BENCH_RATE": str(RATES["list10"])})
    return [("create", create), ("list10", listing)]


def _sandbox(ttl: str) -> dict[str, Any]:
    """Sandbox mode with ``ttl``: 10 s makes the purge look every second."""
    return {
        "PLANTSTORE_SANDBOX": "true",
        "PLANTSTORE_SANDBOX_ISSUE_LIMIT": "off",
        "PLANTSTORE_SANDBOX_TTL": ttl,
    }


def run_loads(
    options: Options, server: Server, run: int, label: str
) -> list[tuple[Measurement, float, float]]:
    """Each load once; with the monotonic start and end of its window."""
    rows = []
    for name, load in loads(run):
        started = time.monotonic()
        key = f"sandbox_{name}_{'during' if run else 'without'}"
        row = measure(server, load, options, key, f"{name} paced, {label}")
        rows.append((row, started, time.monotonic()))
    return rows


def sandbox_purge(options: Options, users: int) -> SandboxResult:
    """Both runs on one file; see the module's docstring."""
    url = f"sqlite:///{options.workdir / 'sandbox.db'}"
    path = Path(url.removeprefix("sqlite:///"))
    token = prepare(url)
    started = time.monotonic()
    seed(path, users, time.time() + 86_400)
    print(
        f"  seeded {users:,} sandbox users x {PLANTS_EACH} plants in {time.monotonic() - started:.1f}s",
        flush=True,
    )
    result = SandboxResult(users, PLANTS_EACH)

    server = start_service(options, "sandbox-without", url, token, **_sandbox("1h"))
    try:
        warm_up(server, options)
        result.without = [row for row, _, _ in run_loads(options, server, 0, "no purge")]
    finally:
        server.stop()

    expire_all(path)
    server_started = time.monotonic()
    server = start_service(options, "sandbox-during", url, token, **_sandbox("10s"))
    log = options.workdir / "sandbox-during.log"
    try:
        windows = run_loads(options, server, 1, "purge running")
        deadline = time.monotonic() + PURGE_TIMEOUT_S
        while (done := DONE.search(log.read_text())) is None and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        server.stop()
    if done is None:
        result.during = [row for row, _, _ in windows]
        result.note = f"the purge did not finish within {PURGE_TIMEOUT_S} s"
        return result
    purge = Purge(
        rows=int(done.group(1)),
        seconds=float(done.group(2)),
        steps=int(done.group(3)),
        longest_hold_ms=float(done.group(4)),
        users_left=sandbox_users(path),
    )
    result.purge = purge
    # The purge started within a second of the server (its first look), and ran for its seconds.
    purge_end = server_started + 1.0 + purge.seconds
    for row, start, end in windows:
        covered = max(0.0, min(end, purge_end) - start) / (end - start)
        row.note = f"purge running for {100 * covered:.0f}% of the window"
    result.during = [row for row, _, _ in windows]
    return result
