"""The SQLite workers phase: ``serve --workers 1`` against ``--workers 2`` on one file.

A fresh file, seeded like the run's big one, served by one worker and then by two, in
interleaved rounds (1, 2, 1, 2, ...), so a drift of the machine falls on both alike. Each
worker commits its own writes (the lock waits count the other worker's SQLite lock). wrk is
pinned to one core and the server is not: it may use every core, as on a bigger machine,
and its CPU a request (its whole process tree's) says what a second worker costs. Each
server runs list 10, durable creates and the 80/10/10 mix. Around every run the server's
metrics listener (on a free port of its own) is scraped, so each row carries the lock waits,
their time, the timeouts and the commits of that run alone. Each round also runs creates on
two workers with one writer for the machine (``PLANTSTORE_SQLITE_WRITERS=one``), the
alternative, beside the default. Then the write ceiling of the one file: durable creates with
four workers, once; then, through ``sqlite_workers``' ``after``, the same load at both counts
(``workers_paced``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.lib.loads import creates, fresh_sqlite
from bench.lib.measure import Load, Measurement, Options, measure, not_run, warm_up
from bench.lib.seed import Layout
from bench.lib.services import start_service
from harness.procstat import core_busy_seconds
from harness.servers import Server, free_port

WORKER_COUNTS = (1, 2)  # the table and its ratio targets: two workers over one
CEILING_WORKERS = 4  # creates only: where one file's write lock stops paying for workers
SCENARIOS = (("list10", "list 10"), ("create", "create (durable)"), ("mix", "mix 80/10/10"))
# workers_paced's: plantstore's creates, and the bare reference app's list 10, at one rate
PACED, BARE = "create_paced", "bare_paced"
PACED_SCENARIOS = ((PACED, "create (durable), paced"), (BARE, "bare app list 10, paced"))
LABELS = dict(SCENARIOS + PACED_SCENARIOS)
# Ids no other phase uses (lib/loads.py takes 1..3 x 10**12 for creates, 1,000,001 up for
# deletes): a block of create ids per run, a delete range per mix run.
CREATE_IDS = 4 * 10**12
ID_BLOCK = 2 * 10**10  # up to 100 blocks before the sandbox phase's ids
DELETE_FROM = 100_000_001
LOCK_WAIT = "plantstore_sqlite_write_lock_wait_seconds"
SAMPLES = {  # LockFigures' field: the sample of the server's /metrics it is read from
    "waits": f"{LOCK_WAIT}_count",
    "wait_seconds": f"{LOCK_WAIT}_sum",
    "timeouts": "plantstore_sqlite_write_lock_timeouts_total",
    "commits": "plantstore_group_commit_batch_size_count",
    "writes": "plantstore_group_commit_batch_size_sum",
}
FAILURES = (RuntimeError, OSError, subprocess.CalledProcessError)
WHERE = "wrk pinned to one core, the server unpinned"


@dataclass
class LockFigures:
    """The write-lock and commit metrics of one run: the scrape after it less the one before."""

    waits: int  # group commits that found the lock held by another worker
    wait_seconds: float  # the time they waited for it, all together
    timeouts: int  # commits refused (503) after waiting out PLANTSTORE_BUSY_TIMEOUT_MS
    commits: int  # transactions committed, one fsync each
    writes: int  # the writes those commits carried
    buckets: tuple[tuple[float, float], ...] = ()  # the wait histogram, (le, cumulative count)
    missing: tuple[str, ...] = ()  # samples the server's /metrics lacked (counted as 0)

    def since(self, before: LockFigures) -> LockFigures:
        earlier = dict(before.buckets)
        return LockFigures(
            waits=self.waits - before.waits,
            wait_seconds=self.wait_seconds - before.wait_seconds,
            timeouts=self.timeouts - before.timeouts,
            commits=self.commits - before.commits,
            writes=self.writes - before.writes,
            buckets=tuple((le, count - earlier.get(le, 0.0)) for le, count in self.buckets),
            missing=tuple(sorted({*self.missing, *before.missing})),
        )

    @property
    def longest_wait_at_most_s(self) -> float | None:
        """The upper bound of the histogram bucket holding the longest wait (None: no wait)."""
        return next((le for le, count in self.buckets if self.waits and count >= self.waits), None)

    def as_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        del data["buckets"]
        longest = self.longest_wait_at_most_s  # +Inf: past the last bucket; JSON has no inf
        return {**data, "longest_wait_at_most_s": "+Inf" if longest == math.inf else longest}


@dataclass
class WorkerRow:
    """One scenario at one worker count; ``lock`` is None when it was not run."""

    workers: int
    scenario: str  # a key of SCENARIOS
    row: Measurement
    lock: LockFigures | None = None
    round: int = 0  # of the interleaved rounds; the ceiling runs once, as round 0
    writers: str = "each"  # PLANTSTORE_SQLITE_WRITERS: "one" is the alternative's row

    def as_json(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "scenario": self.scenario,
            "round": self.round,
            "writers": self.writers,
            "measurement": self.row.as_json(),
            "lock": None if self.lock is None else self.lock.as_json(),
        }


def scrape(port: int) -> LockFigures:
    """The server's lock and commit figures so far, from its metrics listener."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    buckets: list[tuple[float, float]] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{LOCK_WAIT}_bucket":
                buckets.append((float(sample.labels["le"]), sample.value))
            else:
                values[sample.name] = sample.value
    figures = {field: values.get(sample, 0.0) for field, sample in SAMPLES.items()}
    return LockFigures(
        waits=int(figures["waits"]),
        wait_seconds=figures["wait_seconds"],
        timeouts=int(figures["timeouts"]),
        commits=int(figures["commits"]),
        writes=int(figures["writes"]),
        buckets=tuple(sorted(buckets)),
        missing=tuple(sample for sample in SAMPLES.values() if sample not in values),
    )


def workers_layout(layout: Layout, runs: int) -> Layout:
    """The run's layout (same users, same plants each), with a delete range of ``runs`` times
    the mix's deletes placed where no other phase deletes: each mix run takes a slice of its
    own. (lib/seed.py seeds a layout's delete and mix ranges alike; the mix range, after it,
    is not used.)"""
    count = layout.mix_delete_count
    return dataclasses.replace(
        layout,
        delete_from=DELETE_FROM,
        delete_count=count * runs,
        mix_delete_from=DELETE_FROM + count * runs,
        mix_delete_count=count,
    )


# after the rounds, on the same file: (options, url, token, the rows so far) -> more rows
After = Callable[[Options, str, str, list[WorkerRow]], list[WorkerRow]]


def sqlite_workers(
    options: Options, layout: Layout, rounds: int, after: After | None = None
) -> list[WorkerRow]:
    """Every row of the phase: the three scenarios at 1 and 2 workers in ``rounds``
    interleaved rounds, then creates at 4 once, then ``after``'s rows (workers_paced)."""
    runs = rounds * len(WORKER_COUNTS)
    own = workers_layout(layout, runs)
    try:
        url, token = fresh_sqlite(options, "workers", own)
    except FAILURES as exc:
        return not_run_rows(f"seeding failed: {failure_text(exc)}")
    rows: list[WorkerRow] = []
    for run in range(runs):
        workers, round_ = WORKER_COUNTS[run % len(WORKER_COUNTS)], run // len(WORKER_COUNTS)
        loads = {
            "list10": Load(),
            "create": creates(create_ids(2 * run)),
            "mix": _mix(create_ids(2 * run + 1), own.delete_from + run * layout.mix_delete_count),
        }
        rows += serve(options, url, token, workers, loads, round_)
        if workers == 2:  # the alternative: one writer for the machine, creates only
            one = {"create": creates(create_ids(2 * run + 1) + ID_BLOCK // 2)}
            rows += serve(options, url, token, workers, one, round_, writers="one")
    ceiling = {"create": creates(create_ids(2 * runs))}
    rows += serve(options, url, token, CEILING_WORKERS, ceiling, 0)
    return rows + (after(options, url, token, rows) if after is not None else [])


def create_ids(block: int) -> int:
    return CREATE_IDS + block * ID_BLOCK


def _mix(first_create: int, first_delete: int) -> Load:
    env = {
        "PLANTSTORE_BENCH_ID_BASE": str(first_create),
        "PLANTSTORE_BENCH_DELETE_FROM": str(first_delete),
    }
    return Load(script="mix.lua", env=env)


def serve(
    options: Options,
    url: str,
    token: str,
    workers: int,
    loads: dict[str, Load],
    round_: int,
    writers: str = "each",
) -> list[WorkerRow]:
    """One unpinned server with ``workers`` processes; each load measured (wrk pinned) and
    scraped."""
    print(f"  --workers {workers}, round {round_ + 1}, {writers} writer(s)", flush=True)
    port = free_port()
    env = {"PLANTSTORE_METRICS_ADDRESS": f"127.0.0.1:{port}", "PLANTSTORE_SQLITE_WRITERS": writers}
    name = f"sqlite-workers-{workers}-{writers}"
    wrk_pinned = dataclasses.replace(options, server_cpus=None)  # wrk's core alone
    rows: list[WorkerRow] = []
    try:
        server = start_service(
            options, name, url, token, "--workers", str(workers), pinned=False, **env
        )
        try:
            warm_up(server, wrk_pinned)
            for scenario, load in loads.items():
                key, label = (
                    row_key(workers, scenario, writers),
                    row_label(workers, scenario, writers),
                )
                before = scrape(port)
                row = measure_unpinned(server, load, options, key, label)
                lock = scrape(port).since(before)
                row.note = f"--workers {workers}, PLANTSTORE_SQLITE_WRITERS={writers}; {WHERE}"
                if lock.missing:
                    row.note += (
                        f"; not in the server's metrics (taken as 0): {', '.join(lock.missing)}"
                    )
                rows.append(WorkerRow(workers, scenario, row, lock, round_, writers))
        finally:
            server.stop()
    except FAILURES as exc:
        why = failure_text(exc)
        print(f"    failed: {why}", flush=True)
        done = {row.scenario for row in rows}
        rows += [
            not_run_row(workers, scenario, why, round_, writers)
            for scenario in loads
            if scenario not in done
        ]
    return rows


def measure_unpinned(
    server: Server, load: Load, options: Options, key: str, label: str
) -> Measurement:
    """``load`` on a server free on every core, wrk pinned to its own: the row, with the
    machine's CPU that was neither theirs."""
    wrk_pinned = dataclasses.replace(options, server_cpus=None)  # wrk's core alone
    busy = _all_cores_busy()
    row = measure(server, load, wrk_pinned, key, label)
    _unpinned_figures(row, _all_cores_busy() - busy)
    row.pinned = False
    return row


def _all_cores_busy() -> float:
    return core_busy_seconds(sorted(os.sched_getaffinity(0)))


def _unpinned_figures(row: Measurement, busy: float) -> None:
    """other%: the machine's busy time that was neither the server's nor wrk's, over all the
    cores; PostgreSQL's idle CPU is no part of a SQLite row."""
    row.postgres_cpu_us_per_request = None
    result = row.result
    if result is None or not result.requests or row.cpu_us_per_request is None:
        return
    ours = (row.cpu_us_per_request + (row.wrk_cpu_us_per_request or 0)) * result.requests / 1e6
    wall = result.seconds * len(os.sched_getaffinity(0))
    row.other_cpu_share = max(0.0, busy - ours) / wall if wall else None


def failure_text(exc: BaseException) -> str:
    detail = str(getattr(exc, "stderr", None) or exc).strip().splitlines()
    return (detail or [type(exc).__name__])[-1][:300]


def row_key(workers: int, scenario: str, writers: str = "each") -> str:
    if scenario == BARE:
        return f"bare_workers{workers}_list10_paced"
    return f"sqlite_workers{workers}_{scenario}" + ("_one_writer" if writers == "one" else "")


def row_label(workers: int, scenario: str, writers: str = "each") -> str:
    what = LABELS[scenario]
    one = ", one writer for the machine" if writers == "one" else ""
    return f"{what}, {workers} worker{'s' if workers > 1 else ''}{one}"


def not_run_row(
    workers: int, scenario: str, why: str, round_: int = 0, writers: str = "each"
) -> WorkerRow:
    key, label = row_key(workers, scenario, writers), row_label(workers, scenario, writers)
    return WorkerRow(workers, scenario, not_run(key, label, why), None, round_, writers)


def not_run_rows(why: str) -> list[WorkerRow]:
    """The phase's rows, kept in the report as not run (``--skip-workers``, a failed seed)."""
    rows = [not_run_row(n, key, why) for n in WORKER_COUNTS for key, _ in SCENARIOS]
    return [*rows, not_run_row(CEILING_WORKERS, "create", why)]
