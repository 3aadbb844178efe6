"""Crash safety under SIGKILL: concurrent clients create and delete plants while the server
is killed at random moments and restarted: on SQLite with one worker, on SQLite with several
(where a kill takes sometimes one worker, which granian replaces, sometimes the supervisor
alone, whose workers then stop, sometimes the whole server),
and on PostgreSQL.

Afterwards every acknowledged plant must be listed with its exact name and tag, no
acknowledged delete may have come back, nothing may appear that was never sent, no answer may
be a 500 (any 5xx but a 503 with Retry-After), and the SQLite file must pass
``PRAGMA integrity_check``. Exits 1 when any of that fails.
See trials/torture/__init__.py for how uncertain (cut-off) requests are judged.

    make torture [ARGS="--kills 200 --backend sqlite-workers --clients 16 --seed 7"]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from harness.postgres import postgres_database

from .config import TortureConfig, TortureError, TortureResult
from .engine import run_torture

COLUMNS = (
    ("backend", 11),
    ("kills", 6),
    ("1 worker", 9),
    ("supervisor", 11),
    ("+start", 7),
    ("ack creates", 12),
    ("ack deletes", 12),
    ("uncertain", 10),
    ("503", 5),
    ("faults", 7),
    ("listed", 8),
    ("lost", 6),
    ("resurrected", 12),
    ("unexpected", 11),
    ("odd", 5),
    ("integrity_check", 16),
    ("restart s", 10),
    ("respawn s", 10),
    ("seconds", 8),
)
BACKENDS = ("sqlite", "sqlite-workers", "postgres")


def label(result: TortureResult) -> str:
    return result.backend if result.workers == 1 else f"{result.backend} x{result.workers}"


def row(result: TortureResult) -> list[str]:
    return [
        label(result),
        str(result.kills),
        str(result.worker_kills),
        str(result.supervisor_kills),
        str(result.startup_kills),
        str(result.acknowledged_creates),
        str(result.acknowledged_deletes),
        str(result.uncertain),
        str(result.unavailable),
        str(len(result.faults)),
        str(result.listed),
        str(len(result.lost)),
        str(len(result.resurrected)),
        str(len(result.unexpected)),
        str(len(result.odd)),
        result.integrity_check,
        f"{result.mean_restart:.1f}",
        f"{result.mean_respawn:.1f}" if result.worker_kills else "-",
        f"{result.seconds:.0f}",
    ]


LEGEND = """\
kills: SIGKILLs under traffic; 1 worker: those of one worker alone (granian replaced it while
the others served on); supervisor: those of the supervisor alone (its workers stopped as on
SIGTERM, then the server was restarted); the rest took the whole server; +start: extra
SIGKILLs of a server still starting.
ack creates/deletes: answered 200/204. uncertain: attempts cut off by a kill, or answered 503
with Retry-After (either outcome allowed; each is repeated until answered); 503: those 503s.
faults: any other 5xx answer (a 500, a 503 without Retry-After): each fails the run.
listed: plants listed at the end.
restart s: mean seconds from a whole-server or supervisor kill to /healthz answering again.
respawn s: mean seconds from a one-worker kill to its replacement serving."""


def table(results: list[TortureResult]) -> str:
    header = "".join(f"{name:>{width}}" for name, width in COLUMNS)
    lines = [header]
    for result in results:
        cells = row(result)
        lines.append(
            "".join(f"{cell:>{width}}" for cell, (_, width) in zip(cells, COLUMNS, strict=True))
        )
    return "\n".join([*lines, "", LEGEND])


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m trials.torture", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--kills", type=int, default=100, help="SIGKILLs per backend (100)")
    parser.add_argument(
        "--backend",
        choices=(*BACKENDS, "all"),
        default="all",
        help="sqlite: one worker; sqlite-workers: --sqlite-workers of them; postgres (all)",
    )
    parser.add_argument("--clients", type=int, default=12, help="client threads (12)")
    parser.add_argument("--users", type=int, default=4, help="users (4)")
    parser.add_argument("--tokens-per-user", type=int, default=2, help="tokens per user (2)")
    parser.add_argument(
        "--postgres-workers", type=int, default=2, help="server processes on PostgreSQL (2)"
    )
    parser.add_argument(
        "--sqlite-workers", type=int, default=2, help="server processes for sqlite-workers (2)"
    )
    parser.add_argument(
        "--worker-kill-chance",
        type=float,
        default=0.5,
        help="with several workers, the chance a kill takes one worker, not the server (0.5)",
    )
    parser.add_argument(
        "--supervisor-kill-chance",
        type=float,
        default=0.0,
        help="with several workers, the chance a kill takes the supervisor alone (0: its "
        "orphaned workers have been seen not to finish their graceful stop under this load)",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed for the clients' choices")
    parser.add_argument(
        "--postgres",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="an administrative URL; a fresh database is created beside it and dropped",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args()
    backends = BACKENDS if args.backend == "all" else (args.backend,)

    results: list[TortureResult] = []
    workdir = Path(tempfile.mkdtemp(prefix="plantstore-torture-"))
    print(
        f"torture: {args.kills} SIGKILLs per backend, {args.clients} clients, "
        f"{args.users} users x {args.tokens_per_user} tokens; logs in {workdir}",
        flush=True,
    )

    def run(backend: str, database_url: str, workers: int) -> None:
        config = TortureConfig(
            database_url=database_url,
            workdir=workdir / backend,
            kills=args.kills,
            clients=args.clients,
            users=args.users,
            tokens_per_user=args.tokens_per_user,
            workers=workers,
            worker_kill_chance=args.worker_kill_chance,
            supervisor_kill_chance=args.supervisor_kill_chance,
            seed=args.seed,
            progress=progress,
        )
        result = run_torture(config)
        print(f"{backend}: seed {result.seed}, {result.keys} keys", flush=True)
        results.append(result)

    try:
        for backend in backends:
            if backend == "sqlite":
                run(backend, f"sqlite:///{workdir / backend / 'torture.db'}", 1)
            elif backend == "sqlite-workers":
                run(backend, f"sqlite:///{workdir / backend / 'torture.db'}", args.sqlite_workers)
            else:
                with postgres_database(args.postgres) as url:
                    run(backend, url, args.postgres_workers)
    except TortureError as exc:
        print(table(results))
        sys.exit(f"torture could not run: {exc}")
    if not args.keep and all(result.passed for result in results):
        shutil.rmtree(workdir, ignore_errors=True)

    print(table(results))
    failed = False
    for result in results:
        findings = result.findings()
        if findings:
            print(f"\n{label(result)}:\n{findings}")
        failed = failed or not result.passed
    if failed:
        print(f"\nFAILED: logs and databases kept in {workdir}")
        sys.exit(1)
    print("\nno acknowledged write lost, none resurrected, nothing unexpected")


if __name__ == "__main__":
    main()
