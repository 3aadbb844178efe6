"""The phases of ``python -m bench.speed`` in order, and what they measured: the order is
the method (the reference brackets the pinned SQLite rows), so it lives in one place."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from bench.lib.loads import fresh_sqlite, half_rate
from bench.lib.measure import Measurement, Options, not_run
from bench.lib.seed import Layout

from . import targets
from .callers_phase import callers_phase
from .copy_phase import copy_phase
from .jwt_phase import jwt_rows
from .jwt_phase import not_run_rows as jwt_not_run
from .peer_phase import (
    POSTGRES,
    SQLITE,
    Contender,
    not_run_contenders,
    postgres_peers,
    sqlite_peers,
)
from .phases import (
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
from .sandbox_phase import SandboxResult, not_run_result, sandbox_purge
from .webhooks_phase import webhook_phase
from .workers_paced import second_worker
from .workers_phase import WorkerRow, not_run_rows, sqlite_workers


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
    ones. The workers phase follows, wrk pinned and the server not: its ratios are within
    itself."""
    print("SQLite: seeding", flush=True)
    url, token = fresh_sqlite(options, "big", layout)
    rows = [reference(options, token, "ref_before", "reference app, before")]
    print("SQLite, one process, server and wrk pinned", flush=True)
    main_rows = sqlite_main(options, layout, url, token)
    rows += main_rows
    rate = half_rate(main_rows[0])  # the service's paced runs' one rate
    bare_rate = half_rate(rows[0])  # the bare app's: half of its own maximum
    rows.append(sqlite_small(options, layout, rate))
    rows.append(reference_paced(options, token, bare_rate))
    rows += paced_rounds(options, url, token, (rate, bare_rate), args.peer_rounds)
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
        print("SQLite, --workers 1 then 2 on one file in rounds, wrk pinned", flush=True)
        after = second_worker(args.peer_rounds)
        workers = sqlite_workers(options, layout, args.peer_rounds, after)
    if args.skip_jwt:
        rows += jwt_not_run("--skip-jwt")
    else:
        print("SQLite, list 10 with a JWT and with a pst_ token, pinned", flush=True)
        rows += jwt_rows(options, args.peer_rounds)
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
    rows = postgres(options, args.postgres, layout, args.peer_rounds)
    if args.skip_peers:
        return rows, not_run_contenders(POSTGRES, "--skip-peers")
    print("Peers on PostgreSQL, servers and wrk pinned, PostgreSQL not", flush=True)
    return rows, postgres_peers(options, args.postgres, args.peer_rounds)
