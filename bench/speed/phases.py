"""The run's phases: the reference ceiling, SQLite (one process, pinned), PostgreSQL.

Every server starts fresh and is stopped before the next starts, so two never compete for a
core. Databases are fresh too, except that creates with group commit off reuse the big file:
the two create figures are compared, so they land in a table of the same size.
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
from pathlib import Path

import asyncpg

from bench.lib.loads import (
    CREATE_IDS,
    GROUP_COMMIT_OFF_IDS,
    POOLED_CREATE_IDS,
    creates,
    deletes,
    fresh_sqlite,
    half_rate,
    mix,
    paced,
    sqlite_path,
)
from bench.lib.measure import Load, Measurement, Options, measure, not_run, warm_up
from bench.lib.seed import Layout, count_plants, prepare, seed_postgres
from bench.lib.services import start_reference, start_service
from harness import pgbouncer
from harness.postgres import postgres_database, postgres_problem
from harness.servers import Server

PG_LABEL = "PostgreSQL, 2 workers"
PGB_LABEL = "PostgreSQL through PgBouncer (transaction pooling), 2 workers"
POSTGRES_KEYS = (("pg_list10", f"list 10, {PG_LABEL}"), ("pg_create", f"create, {PG_LABEL}"))
POOLED_KEYS = (("pgb_list10", f"list 10, {PGB_LABEL}"), ("pgb_create", f"create, {PGB_LABEL}"))
ROUND_IDS = 10**10  # each round's creates, direct and pooled, take ids of their own


def reference(options: Options, token: str, key: str, label: str) -> Measurement:
    """The bare ASGI app's list rate: what granian and this machine allow right now."""
    server = start_reference(options, token)
    try:
        warm_up(server, options)
        return measure(server, Load(), options, key, label)
    finally:
        server.stop()


def reference_paced(options: Options, token: str, rate: int, key: str = "ref_paced") -> Measurement:
    """The bare app paced at half of *its* maximum (``rate``): the tail granian and this
    machine allow an app at the same share of its own ceiling, the floor the service's paced
    tail is judged against."""
    server = start_reference(options, token, echo=True)
    note = f"paced at {rate:,}/s, half of its own maximum"
    return _paced_run(server, options, rate, (key, "reference app, paced"), note)


def _paced_run(
    server: Server, options: Options, rate: int, row: tuple[str, str], note: str
) -> Measurement:
    """``server`` warmed up, then list 10 paced at ``rate`` as the row (key, label), then
    stopped."""
    try:
        warm_up(server, options)
        measured = measure(server, paced(rate), options, *row)
        measured.note = note
        return measured
    finally:
        server.stop()


def paced_rounds(
    options: Options, url: str, token: str, rates: tuple[int, int], rounds: int
) -> list[Measurement]:
    """Rounds 2 to ``rounds`` of the paced tail, each a fresh server of the big file at the
    first of ``rates`` (half its maximum) and then the bare app at the second (half of its
    own); ``sqlite_main`` and ``reference_paced`` measured round 1. A p99 moves more from run
    to run than a rate does, so its target takes the median of the rounds, with their range,
    as the ratios do."""
    rate, bare_rate = rates
    rows = []
    for number in range(2, rounds + 1):
        server = start_service(options, f"sqlite-paced-{number}", url, token)
        key, label = f"list10_paced_r{number}", f"list 10 paced, big db, round {number}"
        rows.append(_paced_run(server, options, rate, (key, label), f"paced at {rate:,}/s"))
        rows.append(reference_paced(options, token, bare_rate, f"ref_paced_r{number}"))
    return rows


def sqlite_main(options: Options, layout: Layout, url: str, token: str) -> list[Measurement]:
    """Every flat-out scenario, plus list 10 paced at half its flat-out rate, on the big file."""
    stored = count_plants(sqlite_path(url))
    server = start_service(options, "sqlite-big", url, token)
    try:
        warm_up(server, options)
        rows = [measure(server, Load(profile=True), options, "list10", "list 10")]
        rate = half_rate(rows[0])
        rows.append(measure(server, paced(rate), options, "list10_paced", "list 10 paced, big db"))
        rows[-1].note = f"paced at {rate:,}/s (half of list 10); {stored:,} plants stored"
        rows[-1].stored_plants = stored
        rows.append(measure(server, Load("/plants?limit=100"), options, "list100", "list 100"))
        rows.append(measure(server, creates(CREATE_IDS, profile=True), options, "create", "create"))
        rows.append(measure(server, deletes(layout), options, "delete", "delete"))
        rows.append(measure(server, mix(layout), options, "mix", "mix 80/10/10"))
        rows[-1].note = "80% list 10, 10% create, 10% delete"
        return rows
    finally:
        server.stop()


def stages(options: Options, url: str, token: str, directory: Path) -> Measurement:
    """list 10 once more on the big file, sampled by py-spy for the where-the-time-goes table
    (layers.py). A run of its own: sampling slows the server, so the measured rows are not
    sampled; the stages' shares are scaled to the unsampled list 10's CPU per request."""
    sampled = dataclasses.replace(options, profile_dir=directory)  # kept: the report reads it
    server = start_service(options, "sqlite-stages", url, token)
    try:
        warm_up(server, options)
        row = measure(server, Load(profile=True), sampled, "list10_stages", "list 10, sampled")
    finally:
        server.stop()
    if not any(path.endswith("-collapsed.txt") for path in row.profiles):
        row.note = "py-spy recorded nothing (make bench installs it; it needs ptrace)"
    return row


def sqlite_small(options: Options, layout: Layout, rate: int) -> Measurement:
    """list 10 at the same paced rate on a file holding only the bench user's plants."""
    url, token = fresh_sqlite(options, "small", layout.small)
    stored = count_plants(sqlite_path(url))
    server = start_service(options, "sqlite-small", url, token)
    note = f"paced at {rate:,}/s; only the bench user's {stored:,} plants stored"
    row = _paced_run(server, options, rate, ("list10_paced_small", "list 10 paced, small db"), note)
    row.stored_plants = stored
    return row


def group_commit_off(options: Options, url: str, token: str) -> Measurement:
    """The create scenario again on a fresh server of the same file, one fsync per write."""
    server = start_service(options, "sqlite-no-group", url, token, PLANTSTORE_GROUP_COMMIT="false")
    try:
        warm_up(server, options)
        load = creates(GROUP_COMMIT_OFF_IDS)
        row = measure(server, load, options, "create_no_group_commit", "create, group commit off")
        row.note = "PLANTSTORE_GROUP_COMMIT=false"
        return row
    finally:
        server.stop()


def postgres(
    options: Options, admin_url: str, layout: Layout, rounds: int = 1
) -> list[Measurement]:
    """list 10 and creates with two workers, straight to PostgreSQL and then through PgBouncer
    in transaction pooling, in ``rounds`` interleaved rounds (round 1 under the keys, round N
    under ``<key>_rN``); rows marked not run when PostgreSQL is away."""
    keys = POSTGRES_KEYS + POOLED_KEYS
    problem = postgres_problem(admin_url)
    if problem is None:
        try:
            return _postgres(options, admin_url, layout, rounds)
        except (subprocess.CalledProcessError, RuntimeError, asyncpg.PostgresError) as exc:
            detail = str(getattr(exc, "stderr", None) or exc)
            tail = "\n".join(detail.strip().splitlines()[-12:])
            print(f"  PostgreSQL failed; the end of its output:\n{tail}", flush=True)
            problem = _gist(detail) or type(exc).__name__
    print(f"  PostgreSQL rows not run: {problem}", flush=True)
    return [not_run(key, label, problem) for key, label in keys]


def _gist(detail: str) -> str:
    """The line of a failure's output that says what went wrong (a log ends in chatter)."""
    lines = [line.strip() for line in detail.splitlines() if line.strip()]
    errors = [line for line in lines if "Error:" in line or "error:" in line]
    return (errors or lines or [""])[-1][:300]


def _postgres(options: Options, admin_url: str, layout: Layout, rounds: int) -> list[Measurement]:
    """Seed a fresh database like the SQLite one (no delete ranges: nothing deletes here),
    then direct and through the pooler in turns: the host drifts more between runs than the
    pooler costs, so each ratio is taken round by round."""
    bulk_only = dataclasses.replace(layout, delete_count=0, mix_delete_count=0)
    with postgres_database(admin_url) as url:
        started = time.monotonic()
        token = prepare(url)
        seed_postgres(url, bulk_only)
        took = time.monotonic() - started
        print(f"  seeded PostgreSQL: {bulk_only.total_plants:,} plants in {took:.1f}s", flush=True)
        # Behind a pooler the server holds the service's statement timeout (pooling.py); set
        # before any pooler connects, so each one's server connections start with it.
        pgbouncer.hold_statement_timeout(url)
        rows: list[Measurement] = []
        for number in range(1, rounds + 1):
            block = (number - 1) * ROUND_IDS
            server = start_service(options, "postgres", url, token, "--workers", "2", pinned=False)
            try:
                direct = _measure_unpinned(
                    server, options, _in_round(POSTGRES_KEYS, number), CREATE_IDS + block
                )
            finally:
                server.stop()
            pooled_keys = _in_round(POOLED_KEYS, number)
            pooled = _through_pgbouncer(options, url, token, pooled_keys, POOLED_CREATE_IDS + block)
            rows += direct + pooled
        return rows


def _in_round(keys: tuple[tuple[str, str], ...], number: int) -> tuple[tuple[str, str], ...]:
    """Keys and labels for a round: round 1's as they are, round N's as ``<key>_rN``."""
    if number == 1:
        return keys
    return tuple((f"{key}_r{number}", f"{label}, round {number}") for key, label in keys)


def _through_pgbouncer(
    options: Options, url: str, token: str, keys: tuple[tuple[str, str], ...], first_id: int
) -> list[Measurement]:
    """The same loads through a PgBouncer in transaction pooling, on the same database: the
    1.24 build that keeps prepared statements where tools/build-pgbouncer made it (asyncpg's
    cache on, as the docs advise), else Debian's 1.18 (each statement prepared on each use);
    rows marked not run where neither is installed."""
    keeping = pgbouncer.keeping_installed()
    if not keeping and not pgbouncer.installed():
        return [not_run(key, label, "pgbouncer not installed") for key, label in keys]
    which = (
        f"PgBouncer 1.24, max_prepared_statements {pgbouncer.KEPT_STATEMENTS}, asyncpg's cache on"
        if keeping
        else "Debian's PgBouncer 1.18: each statement prepared on each use"
    )
    with pgbouncer.pgbouncer(url, "transaction", keep_prepared=keeping) as through:
        server = start_service(
            options,
            "postgres-pgbouncer",
            through,
            token,
            "--workers",
            "2",
            pinned=False,
            PLANTSTORE_POSTGRES_POOLING="transaction",
            PLANTSTORE_POSTGRES_POOLER_KEEPS_PREPARED=str(keeping).lower(),
        )
        try:
            rows = _measure_unpinned(server, options, keys, first_id)
        finally:
            server.stop()
    for row in rows:
        row.note = f"{which}; {row.note}"
    return rows


def _measure_unpinned(
    server: Server, options: Options, keys: tuple[tuple[str, str], ...], first_id: int
) -> list[Measurement]:
    """Service and wrk share the cores with the PostgreSQL server, so nothing is pinned."""
    warm_up(server, options, pinned=False)
    (list_key, list_label), (create_key, create_label) = keys
    rows = [
        measure(server, Load(), options, list_key, list_label, pinned=False),
        measure(server, creates(first_id), options, create_key, create_label, pinned=False),
    ]
    for row in rows:
        row.note = "service and wrk unpinned: the PostgreSQL server needs a core too; " + (
            _two_core_budget(row)
        )
    return rows


def _two_core_budget(row: Measurement) -> str:
    """Where each request's CPU went: two cores give 200 µs per request at 10,000/s."""
    spent = {
        "service": row.cpu_us_per_request,
        "PostgreSQL": row.postgres_cpu_us_per_request,
        "wrk": row.wrk_cpu_us_per_request,
    }
    parts = [f"{name} {value:.0f}" for name, value in spent.items() if value is not None]
    total = sum(value for value in spent.values() if value is not None)
    return f"CPU µs/request: {' + '.join(parts)} = {total:.0f}"
