"""``plantstore db copy`` SQLite → PostgreSQL: how long a million plants take to move, at what
rate, and the copy process's peak memory (bounded by its batch, whatever the size).

The source file is filled straight with SQL (one user, ``--plants`` plants, half of them
tagged, the plant-count trigger keeping the user's count), then the command runs as its own
process into a fresh PostgreSQL database, as an operator would run it.

    .venv/bin/python -m bench.speed.copy_phase [--plants 1000000] [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.lib.place import HERE
from bench.lib.seed import prepare
from harness.postgres import postgres_database, postgres_problem

TARGET_SECONDS = 60.0  # for a million plants, SQLite → PostgreSQL


@dataclass(frozen=True)
class CopyFigures:
    plants: int
    seconds: float
    peak_rss_mb: float

    def summary(self) -> list[str]:
        verdict = "met" if self.seconds <= TARGET_SECONDS * self.plants / 10**6 else "NOT MET"
        return [
            f"{self.plants:,} plants SQLite -> PostgreSQL in {self.seconds:.1f} s "
            f"({self.plants / self.seconds:,.0f} plants/s), peak RSS {self.peak_rss_mb:.0f} MB; "
            f"target <= {TARGET_SECONDS:.0f} s a million: {verdict}"
        ]


def seed(path: Path, plants: int) -> None:
    """The schema and the bench user (``lib.seed.prepare``), then its plants by SQL."""
    prepare(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO plants (user_id, id, name, tag) VALUES (1, ?, ?, ?)",
            ((i, f"plant {i}", "green" if i % 2 else None) for i in range(1, plants + 1)),
        )
    conn.close()


def copy_phase(admin_url: str, plants: int, workdir: Path) -> CopyFigures:
    source = workdir / "copy-source.db"
    seed(source, plants)
    with postgres_database(admin_url) as target:
        started = time.monotonic()
        copy = subprocess.Popen(
            [sys.executable, "-m", "plantstore", "db", "copy", f"sqlite:///{source}", target],
            stdout=subprocess.DEVNULL,
        )
        _, status, usage = os.wait4(copy.pid, 0)  # the copy's own peak memory
        seconds = time.monotonic() - started
        copy.returncode = os.waitstatus_to_exitcode(status)
    if copy.returncode != 0:
        raise RuntimeError(f"plantstore db copy exited {copy.returncode}")
    return CopyFigures(plants, seconds, usage.ru_maxrss / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.speed.copy_phase", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--plants", type=int, default=10**6)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    problem = postgres_problem(args.postgres)
    if problem:
        sys.exit(f"PostgreSQL is not available: {problem}")
    with tempfile.TemporaryDirectory(dir=HERE) as directory:
        figures = copy_phase(args.postgres, args.plants, Path(directory))
    print("\n".join(figures.summary()))


if __name__ == "__main__":
    main()
