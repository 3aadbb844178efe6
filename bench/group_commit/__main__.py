"""Durable creates/s with 32 concurrent connections, group commit on versus off.

Starts ``plantstore serve`` on a fresh SQLite file (server pinned to CPU 0), drives it with
wrk (pinned to CPU 1) and prints one row per mode. Every create is fsynced before its 200, so
the file goes beside the results (a real disk, checked at start), never /tmp, which may be a
tmpfs where an fsync is free.

    .venv/bin/python -m bench.group_commit [--seconds 10] [--connections 32] [--dir PATH]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from bench.lib.place import HERE, require_real_disk
from bench.lib.wrk import run_wrk
from harness.servers import start_server

RESULTS = HERE / "results"


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.group_commit", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--dir", type=Path, default=RESULTS, help="for the SQLite files")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    args.dir.mkdir(parents=True, exist_ok=True)
    require_real_disk(args.dir)
    print(f"durable creates, {args.connections} connections, {args.seconds}s each")
    print(f"{'group commit':<14}{'creates/s':>12}{'p99':>10}{'non-2xx':>9}")
    for group_commit in (True, False):
        with tempfile.TemporaryDirectory(dir=args.dir, prefix=".group-commit-") as directory:
            url = f"sqlite:///{Path(directory) / 'bench.db'}"
            server = start_server(
                url,
                Path(directory) / "server.log",
                "0",
                PLANTSTORE_GROUP_COMMIT=str(group_commit).lower(),
            )
            try:
                result = run_wrk(
                    server.base_url, server.token, args.seconds, args.connections, "1", "create.lua"
                )
            finally:
                server.stop()
        mode = "on" if group_commit else "off"
        print(f"{mode:<14}{result.rate:>12,.0f}{result.p99:>10}{result.errors:>9}")


if __name__ == "__main__":
    main()
