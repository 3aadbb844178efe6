"""`make bench`: the service's throughput, latency, CPU and memory against its targets.

Seeds a fresh SQLite file (1,000 users x 1,000 plants, plus the bench user's own), serves it
with ``plantstore serve`` pinned to one core and drives it with wrk (32 connections, one thread)
pinned to another: list 10, list 100, create, delete, an 80/10/10 mix, list 10 paced at half its
flat-out rate, the same paced load on a small file and on the bare reference app (the big
file's and the bare app's in rounds, alternating), creates with group commit off. Then the
peers on SQLite (speed/peer_phase.py): plantstore beside FastAPI + sqlite3 and a naive
Starlette app, on the same pinning and data. The bare reference app under
the same granian, measured before and after all that, is the ceiling rates are shown against.
Then SQLite with ``--workers 1`` against ``--workers 2`` on one file in interleaved rounds,
wrk pinned and the server free (speed/workers_phase.py), and the write ceiling of that file;
then creates at one paced rate with 1 and 2 workers beside the bare app with 1 and 2 workers
at that rate (speed/workers_paced.py). Then list 10 with a JWT beside list 10 with a pst_
token, pinned (speed/jwt_phase.py). Then another user's paced latency with
and without a purge of 10,000 expired sandbox users x 100 plants running
(speed/sandbox_phase.py). Then PostgreSQL with ``--workers 2``, unpinned, and the PostgreSQL
peers. Prints the tables and the targets; writes the same as JSON to bench/results/.

    .venv/bin/python -m bench.speed [--quick] [--seconds 10] [--skip-postgres] [--skip-peers]
                                  [--skip-workers] [--skip-jwt] [--skip-sandbox] [--skip-webhooks]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.lib import latest, report
from bench.lib.measure import Options
from bench.lib.place import HERE, require_real_disk
from bench.lib.seed import Layout

from . import peer_report, workers_report
from .publish import publish as published
from .run import run_all
from .show import show, stages_json

RESULTS = HERE / "results"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Flags; --quick only changes the defaults, so explicit values still win."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.speed", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seconds", type=int, default=None, help="per scenario (default 10)")
    parser.add_argument("--quick", action="store_true", help="smoke test: 2 s, 50 x 100 plants")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--users", type=int, default=None, help="seeded users (default 1000)")
    parser.add_argument("--plants-per-user", type=int, default=None, help="(default 1000)")
    parser.add_argument("--server-cpus", default="0", help="taskset list for the server")
    parser.add_argument("--wrk-cpus", default="1", help="taskset list for wrk")
    parser.add_argument("--no-pin", action="store_true", help="pin neither server nor wrk")
    parser.add_argument(
        "--reference-loop",
        default="asyncio",
        choices=["auto", "asyncio", "uvloop", "rloop"],
        help="granian --loop for the reference app: the service's (cli.py) (default: asyncio)",
    )
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--skip-postgres", action="store_true", help="and PostgreSQL's peers")
    parser.add_argument("--skip-peers", action="store_true", help="no FastAPI/Starlette peers")
    parser.add_argument("--skip-workers", action="store_true", help="no SQLite --workers 1 vs 2")
    parser.add_argument("--skip-jwt", action="store_true", help="no JWT vs pst_ token list 10")
    parser.add_argument("--skip-sandbox", action="store_true", help="no sandbox purge phase")
    parser.add_argument(
        "--sandbox-users", type=int, default=None, help="expired users to purge (default 10000)"
    )
    parser.add_argument("--skip-webhooks", action="store_true", help="no webhooks_phase.py")
    parser.add_argument("--skip-copy", action="store_true", help="no copy_phase.py (db copy)")
    parser.add_argument("--skip-callers", action="store_true", help="no callers_phase.py")
    parser.add_argument(
        "--skip-stages", action="store_true", help="no py-spy run for where the time goes"
    )
    parser.add_argument(
        "--peer-rounds",
        type=int,
        default=None,
        help="interleaved rounds of the peers, the paced tail and the many-callers phase (3)",
    )
    parser.add_argument("--profile", action="store_true", help="py-spy during list 10, create")
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help="directory for the JSON (and the scratch)"
    )
    args = parser.parse_args(argv)
    # Absolute: the scratch directory's paths reach servers started elsewhere (a peer runs in
    # bench/peers) and file: URLs (the JWT phase's JWKS), where a relative path names nothing.
    args.results = args.results.resolve()
    quick = args.quick
    args.seconds = args.seconds or (2 if quick else 10)
    args.peer_rounds = args.peer_rounds or (1 if quick else 3)
    args.users = args.users if args.users is not None else (50 if quick else 1_000)
    if args.sandbox_users is None:
        args.sandbox_users = 1_000 if quick else 10_000
    if args.plants_per_user is None:
        args.plants_per_user = 100 if quick else 1_000
    return args


def settings(args: argparse.Namespace, layout: Layout) -> dict[str, object]:
    """Everything that shaped this run, for the JSON record."""
    return {
        **{
            key: str(value) if isinstance(value, Path) else value
            for key, value in vars(args).items()
        },
        "wrk_threads": 1,
        "seeded_plants": layout.total_plants,
        "delete_range": [layout.delete_from, layout.delete_from + layout.delete_count - 1],
    }


def main() -> None:
    """Run every phase in a scratch directory beside the results, then report."""
    args = parse_args()
    stamp, load_before = report.begin_run({"wrk": "wrk", "taskset": "util-linux"}, args.results)
    code = report.code_version()  # the tree measured: read before a long run, not after it
    require_real_disk(args.results)
    layout = Layout.for_run(args.users, args.plants_per_user, args.seconds)
    started = time.monotonic()
    # On the results' filesystem, not /tmp: a tmpfs would make every fsync free.
    with tempfile.TemporaryDirectory(dir=args.results, prefix=".run-") as directory:
        options = Options(
            seconds=args.seconds,
            connections=args.connections,
            server_cpus=None if args.no_pin else args.server_cpus,
            wrk_cpus=None if args.no_pin else args.wrk_cpus,
            workdir=Path(directory),
            profile_dir=args.results if args.profile else None,
            stamp=stamp,
            reference_loop=args.reference_loop,
        )
        phases = run_all(options, args, layout)
    found = show(phases, args)
    rows, peers = phases.rows, phases.peers
    payload = {
        "started_utc": stamp,
        "duration_s": round(time.monotonic() - started, 1),
        "code": code,
        "machine": report.machine(),
        "load_average": {"before": load_before, "after": report.load_average()},
        "settings": settings(args, layout),
        "ceiling_rate": report.ceiling({row.key: row for row in rows}),
        "scenarios": [row.as_json() for row in rows],
        "peers": peer_report.as_json(peers, report.ceiling({row.key: row for row in rows})),
        "sqlite_workers": workers_report.as_json(phases.workers),
        "sandbox": phases.sandbox.as_json(),
        "webhooks": phases.webhooks,
        "db_copy": phases.copy,
        "many_callers": phases.callers,
        "stages": stages_json(phases, rows),
        "targets": [{**vars(target), "verdict": target.verdict} for target in found],
    }
    path = report.write_json(args.results, "speed", stamp, payload)
    print(f"\nwritten: {path} (and {path.parent / 'latest.json'})")
    publish(args, payload, path)


def publish(args: argparse.Namespace, payload: dict[str, object], path: Path) -> None:
    """A full run becomes the report (publish.py); a --quick run only prints its table."""
    if args.quick or args.results.resolve() != RESULTS.resolve():
        table = latest.markdown(payload, path.name)
        print(f"\nnot published (--quick, or --results elsewhere); the table would be:\n{table}")
        return
    for written in published(payload, path):
        print(f"written: {written}")


if __name__ == "__main__":
    main()
