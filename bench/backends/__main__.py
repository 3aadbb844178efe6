"""List and create throughput on SQLite (one process) beside PostgreSQL (--workers 2).

Each configuration gets a fresh database and a real ``plantstore serve``; wrk drives
``GET /plants?limit=10`` (the user holds 100 plants) and durable creates, 32 connections.
SQLite's single process is pinned to CPU 0 and wrk to CPU 1. PostgreSQL's two workers and
the PostgreSQL server itself need both cores, so there nothing is pinned and wrk shares them:
its figures are a floor for a machine with a separate database host. The SQLite file goes
beside the results (a real disk, checked at start), never /tmp, which may be a tmpfs where an
fsync is free.

    .venv/bin/python -m bench.backends [--postgres postgresql://...] [--dir PATH]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import urllib.request
from pathlib import Path

from bench.lib.place import HERE, require_real_disk
from bench.lib.wrk import WrkResult, run_wrk
from harness.postgres import postgres_database
from harness.servers import Server, start_server

RESULTS = HERE / "results"


def seed(server: Server, plants: int) -> None:
    for plant_id in range(-plants, 0):  # below the ids wrk's creates use
        request = urllib.request.Request(
            f"{server.base_url}/plants",
            data=json.dumps({"id": plant_id, "name": f"seed {plant_id}"}).encode(),
            headers={"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=10).read()


def measure(server: Server, seconds: int, wrk_cpus: str | None) -> dict[str, WrkResult]:
    seed(server, 100)
    return {
        "list 10": run_wrk(
            f"{server.base_url}/plants?limit=10", server.token, seconds, 32, wrk_cpus, None
        ),
        "create": run_wrk(server.base_url, server.token, seconds, 32, wrk_cpus, "create.lua"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.backends", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--dir", type=Path, default=RESULTS, help="for the SQLite file")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    args.dir.mkdir(parents=True, exist_ok=True)
    require_real_disk(args.dir)
    rows: list[tuple[str, str, WrkResult]] = []
    with tempfile.TemporaryDirectory(dir=args.dir, prefix=".backends-") as directory:
        url = f"sqlite:///{Path(directory) / 'bench.db'}"
        server = start_server(url, Path(directory) / "sqlite.log", "0")
        try:
            rows += [
                ("SQLite, 1 process", k, v) for k, v in measure(server, args.seconds, "1").items()
            ]
        finally:
            server.stop()
        with postgres_database(args.postgres) as pg_url:
            server = start_server(pg_url, Path(directory) / "pg.log", None, "--workers", "2")
            try:
                rows += [
                    ("PostgreSQL, --workers 2", k, v)
                    for k, v in measure(server, args.seconds, None).items()
                ]
            finally:
                server.stop()
    print(f"32 connections, {args.seconds}s per figure; every create is durable before its 200")
    print(f"{'backend':<26}{'request':<10}{'req/s':>10}{'p50':>10}{'p99':>10}{'non-2xx':>9}")
    for backend, request, result in rows:
        print(
            f"{backend:<26}{request:<10}{result.rate:>10,.0f}{result.p50:>10}"
            f"{result.p99:>10}{result.errors:>9}"
        )


if __name__ == "__main__":
    main()
