"""`make bench`: the service's throughput, latency, CPU and memory against its targets.

Seeds a fresh SQLite file (1,000 users x 1,000 plants, plus the bench user's own), serves it
with ``plantstore serve`` pinned to one core and drives it with wrk (32 connections, one thread)
pinned to another: list 10, list 100, create, delete, an 80/10/10 mix, list 10 paced at half its
flat-out rate, the same paced load on a small file and on the bare reference app (the big
file's and the bare app's in rounds, alternating), creates with group commit off. Then the
peers on SQLite (speed/peer_phase.py): plantstore beside FastAPI + sqlite3 and a naive
Starlette app, on the same pinning and data. The bare reference app under
the same granian, measured before and after all that, is the ceiling rates are shown against.
Then SQLite with ``--workers 1`` against ``--workers 2`` on one file, unpinned
(speed/workers_phase.py), and the write ceiling of that file. Then list 10 with a JWT beside
list 10 with a pst_ token, pinned (speed/jwt_phase.py). Then another user's paced latency with
and without a purge of 10,000 expired sandbox users x 100 plants running
(speed/sandbox_phase.py). Then PostgreSQL with ``--workers 2``, unpinned, and the PostgreSQL
peers. Prints the tables and the targets; writes the same as JSON to bench/results/.

    .venv/bin/python bench/run.py [--quick] [--seconds 10] [--skip-postgres] [--skip-peers]
                                  [--skip-workers] [--skip-jwt] [--skip-sandbox] [--skip-webhooks]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import layers
from callers_phase import callers_phase
from copy_phase import copy_phase
from lib import latest, report
from lib.loads import fresh_sqlite, half_rate
from lib.measure import Measurement, Options, not_run
from lib.seed import Layout
from lib.servers import HERE, require_real_disk
from publish import publish as published
from speed import peer_report, sandbox_report, targets, workers_report
from speed.jwt_phase import jwt_rows, jwt_target
from speed.jwt_phase import not_run_rows as jwt_not_run
from speed.peer_phase import (
    POSTGRES,
    SQLITE,
    Contender,
    not_run_contenders,
    postgres_peers,
    sqlite_peers,
)
from speed.phases import (
    POOLED_KEYS,
    POSTGRES_KEYS,
    group_commit_off,
    paced_rounds,
    postgres,
    reference,
    reference_paced,
    sqlite_main,
    sqlite_small,
    stages,
)
from speed.sandbox_phase import SandboxResult, not_run_result, sandbox_purge
from speed.workers_phase import WorkerRow, not_run_rows, sqlite_workers
from webhooks_phase import webhook_phase

RESULTS = HERE / "results"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Flags; --quick only changes the defaults, so explicit values still win."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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


@dataclass
class Phases:
    """What every phase measured."""

    rows: list[Measurement]
    peers: list[Contender]
    workers: list[WorkerRow]
    sandbox: SandboxResult
    webhooks: list[str] = field(default_factory=list)  # webhooks_phase.py's summary lines
    copy: list[str] = field(default_factory=list)  # copy_phase.py's summary lines
    callers: list[str] = field(default_factory=list)  # callers_phase.py's summary lines
    callers_target: targets.Target | None = None  # not run: no target
    stages: Measurement | None = None  # list 10 sampled by py-spy, for the stages table


def run_all(options: Options, args: argparse.Namespace, layout: Layout) -> Phases:
    """Every phase in order; the reference runs first and last to bracket the pinned SQLite
    ones. The workers phase follows, unpinned: its ratios are within itself."""
    print("SQLite: seeding", flush=True)
    url, token = fresh_sqlite(options, "big", layout)
    rows = [reference(options, token, "ref_before", "reference app, before")]
    print("SQLite, one process, server and wrk pinned", flush=True)
    main_rows = sqlite_main(options, layout, url, token)
    rows += main_rows
    rate = half_rate(main_rows[0])  # the paced runs' one rate
    rows.append(sqlite_small(options, layout, rate))
    rows.append(reference_paced(options, token, rate))
    rows += paced_rounds(options, url, token, rate, args.peer_rounds)
    rows.append(group_commit_off(options, url, token))
    sampled = None
    if not (args.profile or args.skip_stages):  # --profile samples the rows themselves
        print("SQLite, list 10 sampled by py-spy: where the time goes", flush=True)
        sampled = stages(options, url, token, args.results)
    if args.skip_peers:
        peers = not_run_contenders(SQLITE, "--skip-peers")
    else:
        print("Peers on SQLite, server and wrk pinned", flush=True)
        peers = sqlite_peers(options, args.peer_rounds)
    rows.append(reference(options, token, "ref_after", "reference app, after"))
    if args.skip_workers:
        workers = not_run_rows("--skip-workers")
    else:
        print("SQLite, --workers 1 then 2 on one file, unpinned", flush=True)
        workers = sqlite_workers(options, layout)
    if args.skip_jwt:
        rows += jwt_not_run("--skip-jwt")
    else:
        print("SQLite, list 10 with a JWT and with a pst_ token, pinned", flush=True)
        rows += jwt_rows(options)
    if args.skip_sandbox:
        sandbox = not_run_result("--skip-sandbox", args.sandbox_users)
    else:
        print("SQLite, a purge of expired sandbox users beside another user's requests", flush=True)
        sandbox = sandbox_purge(options, args.sandbox_users)
    callers_lines, callers_target = ["not run: --skip-callers"], None
    if not args.skip_callers:
        print(
            "SQLite, list 10 with one token, then 10,000 in rotation, in rounds, pinned", flush=True
        )
        callers = callers_phase(options, 1_000 if args.quick else 10_000, args.peer_rounds)
        callers_lines, callers_target = callers.summary(), callers.target()
    webhook_lines = ["not run: --skip-webhooks"]
    if not args.skip_webhooks:
        print("Webhooks on SQLite, server and wrk pinned", flush=True)
        figures = webhook_phase(options)
        rows += figures.rows
        webhook_lines = figures.summary()
    more_rows, more_peers = postgres_phases(options, args, layout)
    copy_lines = ["not run: --skip-copy" if args.skip_copy else "not run: --skip-postgres"]
    if not (args.skip_copy or args.skip_postgres):
        print("plantstore db copy, SQLite to PostgreSQL, unpinned", flush=True)
        plants = 10**6 if not args.quick else 10**5
        copy_lines = copy_phase(args.postgres, plants, options.workdir).summary()
    return Phases(
        rows + more_rows,
        peers + more_peers,
        workers,
        sandbox,
        webhook_lines,
        copy_lines,
        callers_lines,
        callers_target,
        sampled,
    )


def postgres_phases(
    options: Options, args: argparse.Namespace, layout: Layout
) -> tuple[list[Measurement], list[Contender]]:
    """PostgreSQL --workers 2, then its peers; rows kept as not run when skipped."""
    if args.skip_postgres:
        skipped = "--skip-postgres"
        rows = [not_run(key, label, skipped) for key, label in POSTGRES_KEYS + POOLED_KEYS]
        return rows, not_run_contenders(POSTGRES, skipped)
    print("PostgreSQL, --workers 2, unpinned", flush=True)
    rows = postgres(options, args.postgres, layout)
    if args.skip_peers:
        return rows, not_run_contenders(POSTGRES, "--skip-peers")
    print("Peers on PostgreSQL, servers and wrk pinned, PostgreSQL not", flush=True)
    return rows, postgres_peers(options, args.postgres, args.peer_rounds)


def show(phases: Phases, args: argparse.Namespace) -> list[targets.Target]:
    """Print the tables and the targets; return the targets for the JSON record."""
    rows, peers, workers = phases.rows, phases.peers, phases.workers
    by_key = {row.key: row for row in rows}
    top = report.ceiling(by_key)
    before, after = (by_key[k].result for k in ("ref_before", "ref_after"))
    pin = (
        "unpinned"
        if args.no_pin
        else f"server on CPU {args.server_cpus}, wrk on CPU {args.wrk_cpus}"
    )
    print()
    print(
        f"{args.connections} connections, 1 wrk thread, {args.seconds}s per scenario; SQLite rows: "
        f"{pin}; every create/delete is durable (fsynced) before its answer"
    )
    if before and after and top:
        print(
            f"reference ceiling: {top:,.0f} req/s (before {before.rate:,.0f}, "
            f"after {after.rate:,.0f}); '% ref' is req/s over it"
        )
    print(report.table(rows, top))
    print(
        "other%: the server's core busy with anything but the server (other processes, "
        "interrupts, hypervisor steal)"
    )
    shares = [row.other_cpu_share for row in rows if row.other_cpu_share is not None]
    if shares and max(shares) > 0.1:
        print(f"warning: up to {100 * max(shares):.0f}% of the server's core went elsewhere")
    print("webhooks (bench/webhooks_phase.py):")
    print("\n".join(f"  {line}" for line in phases.webhooks))
    print("many callers (bench/callers_phase.py):")
    print("\n".join(f"  {line}" for line in phases.callers))
    print("db copy (bench/copy_phase.py):")
    print("\n".join(f"  {line}" for line in phases.copy))
    print()
    print(peer_report.table(peers, top, pin))
    print()
    print(workers_report.table(workers))
    print()
    print(workers_report.ceiling_table(workers))
    print()
    print(sandbox_report.table(phases.sandbox))
    ours = [row for peer in peers if peer.name == "plantstore" for row in peer.rows.values()]
    ours += workers_report.plantstore_rows(workers)
    found = targets.targets(by_key, top, ours) + peer_report.targets(peers)
    found += workers_report.targets(workers)
    found.append(jwt_target(by_key))
    if phases.callers_target is not None:
        found.append(phases.callers_target)
    found += sandbox_report.targets(phases.sandbox)
    print()
    print("targets (reported, not asserted):")
    print(targets.targets_text(found))
    if phases.stages is not None:
        print("\nwhere the time goes: list 10 sampled by py-spy in a run of its own, each stage's")
        print("share of the samples scaled to the unsampled list 10's CPU per request:")
        recording = _stage_recording(phases)
        us = _list_us(rows)
        print(layers.table(recording, us) if recording else f"  {phases.stages.note}")
    profiles = [path for row in rows for path in row.profiles]
    if profiles:
        print("\npy-spy profiles (the profiled rows ran slower for it):")
        print("\n".join(f"  {path}" for path in profiles))
        print(
            "\nwhere the time goes (py-spy samples by stage, scaled to the row's CPU per request):"
        )
        for row in rows:
            for path in row.profiles:
                if path.endswith("-collapsed.txt"):
                    print(layers.table(Path(path), row.cpu_us_per_request))
    return found


def _stage_recording(phases: Phases) -> Path | None:
    """The stages run's py-spy recording (collapsed stacks), if it recorded anything."""
    profiles = phases.stages.profiles if phases.stages is not None else []
    return next((Path(p) for p in profiles if p.endswith("-collapsed.txt")), None)


def _list_us(rows: list[Measurement]) -> float | None:
    """The unsampled list 10's CPU per request, which the stages' shares are scaled to."""
    return next((row.cpu_us_per_request for row in rows if row.key == "list10"), None)


def stages_json(phases: Phases, rows: list[Measurement]) -> dict[str, object] | None:
    """The stages table as data: each stage's share of the samples, and the µs they scale to."""
    recording = _stage_recording(phases)
    if recording is None:
        return None
    counts = layers.split(recording.read_text())
    total = sum(counts.values()) or 1
    us = _list_us(rows)
    return {
        "us_per_request": us,
        "stages": {
            stage: {"share": count / total, "us": None if us is None else us * count / total}
            for stage, count in counts.most_common()
        },
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
    path = report.write_json(args.results, stamp, payload)
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
