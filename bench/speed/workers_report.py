"""The SQLite workers phase in the report: its table, the write ceiling, targets and JSON.

Ratios use 2xx answers per second, so a 503 for a write lock held too long earns nothing;
the tables still show every row's non-2xx count and the lock timeouts behind them.
"""

from __future__ import annotations

import os
from itertools import pairwise
from typing import Any

from bench.lib.measure import Measurement

from .targets import Target
from .workers_phase import CEILING_WORKERS, SCENARIOS, WORKER_COUNTS, WorkerRow

# (scenario, what the target calls it, how many times one worker's rate two are to manage)
GOALS = (
    ("list10", "list 10", 1.5),
    ("create", "durable creates", 1.2),
    ("mix", "mix 80/10/10", 1.4),
)
STILL_SCALING = 1.1  # more workers "scale" while each step buys at least 10 % more creates
COLUMNS = (
    ("scenario", 18),
    ("workers", 8),
    ("req/s", 9),
    ("p50 ms", 8),
    ("p99 ms", 8),
    ("CPU µs/req", 11),
    ("cores", 6),
    ("switches/req", 13),
    ("waited µs/req", 14),
    ("RSS MB", 7),
    ("non-2xx", 8),
    ("other%", 7),
    ("lock waits", 11),
    ("wait s", 8),
    ("timeouts", 9),
    ("2xx/s vs 1", 11),
)
CEILING_COLUMNS = (
    ("workers", 9),
    ("creates/s", 10),
    ("vs 1", 7),
    ("p99 ms", 8),
    ("CPU µs/req", 11),
    ("commits/s", 10),
    ("writes/commit", 14),
    ("commits that waited", 20),
    ("writer time waiting", 20),
    ("timeouts", 9),
    ("non-2xx", 8),
)


def find(rows: list[WorkerRow], workers: int, scenario: str) -> WorkerRow | None:
    return next((r for r in rows if r.workers == workers and r.scenario == scenario), None)


def ratio(rows: list[WorkerRow], scenario: str, workers: int, base: int = 1) -> float | None:
    """``workers``' 2xx rate over ``base``'s for one scenario, when both ran."""
    mine, theirs = find(rows, workers, scenario), find(rows, base, scenario)
    if mine is None or theirs is None or mine.row.result is None or theirs.row.result is None:
        return None
    yours = theirs.row.result.good_rate
    return mine.row.result.good_rate / yours if yours else None


def _line(cells: list[str], columns: tuple[tuple[str, int], ...]) -> str:
    return "".join(
        f"{cell:>{width}}" if i else f"{cell:<{width}}"
        for i, (cell, (_, width)) in enumerate(zip(cells, columns, strict=True))
    )


def table(rows: list[WorkerRow]) -> str:
    """list 10, creates and the mix at one worker and at two, one line each."""
    lines = [
        "SQLite workers: one file seeded like the big one, `serve --workers N`; server and wrk "
        "unpinned (they share the cores); cores: the server's CPU time over the run's; "
        "switches/req: its threads' context switches (hand-offs between threads and processes) "
        "per request; waited µs/req: the time its threads were ready to run but waited for a "
        "core, per request; other% over all cores; lock waits, their total time and timeouts are this "
        "run's, from the server's metrics (one worker never waits)",
        _line([title for title, _ in COLUMNS], COLUMNS),
    ]
    for scenario, what in SCENARIOS:
        for workers in WORKER_COUNTS:
            found = find(rows, workers, scenario)
            if found is not None:
                lines.append(_line(_cells(found, what, ratio(rows, scenario, workers)), COLUMNS))
    notes = sorted(
        {r.row.note for r in rows if r.row.result is None or (r.lock and r.lock.missing)}
    )
    return "\n".join([*lines, *[f"  {note}" for note in notes]])


def _cells(found: WorkerRow, what: str, versus: float | None) -> list[str]:
    row, lock = found.row, found.lock
    head = [what, str(found.workers)]
    result = row.result
    if result is None:
        return [*head, "not run", *["-"] * (len(COLUMNS) - 3)]
    errors = f"{result.errors}" + (f"+{result.socket_errors}sock" if result.socket_errors else "")
    switches, waited = row.context_switches_per_request, row.runqueue_wait_us_per_request
    return [
        *head,
        f"{result.rate:,.0f}",
        f"{result.p50_ms:.2f}",
        f"{result.p99_ms:.2f}",
        f"{row.cpu_us_per_request:,.0f}" if row.cpu_us_per_request else "-",
        _cores_used(row),
        "-" if switches is None else f"{switches:.1f}",
        "-" if waited is None else f"{waited:,.0f}",
        f"{row.peak_rss_mb:.0f}" if row.peak_rss_mb else "-",
        errors,
        "-" if row.other_cpu_share is None else f"{100 * row.other_cpu_share:.0f}%",
        "-" if lock is None else f"{lock.waits:,}",
        "-" if lock is None else f"{lock.wait_seconds:.2f}",
        "-" if lock is None else f"{lock.timeouts:,}",
        "-" if versus is None or found.workers == 1 else f"{versus:.2f}x",
    ]


def _cores_used(row: Measurement) -> str:
    """How many cores the server kept busy: one worker may already use more than one (granian's
    I/O thread, the writer), and what two cannot use is time spent waiting, not computing."""
    if row.result is None or not row.cpu_us_per_request:
        return "-"
    return f"{row.cpu_us_per_request * row.result.rate / 1e6:.2f}"


def ceiling_table(rows: list[WorkerRow]) -> str:
    """Durable creates at 1, 2 and 4 workers on the one file, and where they stop scaling."""
    counts = sorted({r.workers for r in rows if r.scenario == "create"})
    lines = [
        "write ceiling of one SQLite file: durable creates by workers (one owns the machine's "
        "writer, the others send it their writes); writer time waiting: the lock waits' "
        "total over the run's seconds times the workers",
        _line([title for title, _ in CEILING_COLUMNS], CEILING_COLUMNS),
    ]
    for workers in counts:
        found = find(rows, workers, "create")
        if found is not None:
            lines.append(
                _line(_ceiling_cells(found, ratio(rows, "create", workers)), CEILING_COLUMNS)
            )
    return "\n".join([*lines, f"  {where_it_stops(rows)}"])


def _ceiling_cells(found: WorkerRow, versus: float | None) -> list[str]:
    result, lock = found.row.result, found.lock
    if result is None or lock is None:
        return [str(found.workers), "not run", *["-"] * (len(CEILING_COLUMNS) - 2)]
    seconds = result.seconds or 1.0
    errors = result.errors + result.socket_errors
    cpu = found.row.cpu_us_per_request
    return [
        str(found.workers),
        f"{result.rate:,.0f}",
        "-" if versus is None else f"{versus:.2f}x",
        f"{result.p99_ms:.2f}",
        f"{cpu:,.0f}" if cpu else "-",
        f"{lock.commits / seconds:,.0f}",
        f"{lock.writes / lock.commits:.1f}" if lock.commits else "-",
        f"{100 * lock.waits / lock.commits:.0f}%" if lock.commits else "-",
        f"{100 * lock.wait_seconds / (seconds * found.workers):.0f}%",
        f"{lock.timeouts:,}",
        str(errors),
    ]


def where_it_stops(rows: list[WorkerRow]) -> str:
    """The first step in workers that bought less than STILL_SCALING times the creates."""
    ran = sorted(
        (r.workers, r.row.result.good_rate)
        for r in rows
        if r.scenario == "create" and r.row.result is not None
    )
    if len(ran) < 2:
        return "where the write lock stops scaling: not measured"
    caveat = f"(on {_cores()} cores shared with wrk, workers past the cores also compete for CPU)"
    for (fewer, slower), (more, faster) in pairwise(ran):
        if faster < slower * STILL_SCALING:
            gain = faster / slower if slower else float("inf")
            return (
                f"creates stop scaling past {fewer} worker{'s' if fewer > 1 else ''}: {more} made "
                f"{gain:.2f}x the 2xx/s of {fewer} {caveat}"
            )
    return f"creates still scale at {ran[-1][0]} workers {caveat}"


def cores_allow(one: Measurement) -> float | None:
    """How far the machine's cores let two workers outrun one, if each request costs what it
    cost with one worker: every core busy with the server and wrk, over one worker's rate.

    Past it, a ratio is out of reach on this machine whatever the server does; a server
    process also runs granian's I/O threads beside Python's, so one worker can already
    keep more than one core busy.
    """
    result, cpu, wrk = one.result, one.cpu_us_per_request, one.wrk_cpu_us_per_request
    if result is None or not cpu or wrk is None or not result.good_rate:
        return None
    return _cores() * 1e6 / (cpu + wrk) / result.good_rate


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def targets(rows: list[WorkerRow]) -> list[Target]:
    """Two workers' 2xx rate over one worker's, against their floors."""
    found = []
    for scenario, what, floor in GOALS:
        name, goal = f"SQLite --workers 2 / 1, {what}", f">= {floor:g}x"
        two, one = find(rows, 2, scenario), find(rows, 1, scenario)
        value = ratio(rows, scenario, 2)
        if value is None or two is None or one is None or not two.row.result or not one.row.result:
            missing = [r.row.note for r in (two, one) if r is not None and r.row.result is None]
            found.append(Target(name, goal, (missing or ["not run"])[0], None))
            continue
        rates = f"{two.row.result.good_rate:,.0f} vs {one.row.result.good_rate:,.0f}/s, unpinned"
        room = cores_allow(one.row)
        if room is not None:
            rates += f"; the cores allow about {room:.2f}x"
        costs = (one.row.cpu_us_per_request, two.row.cpu_us_per_request)
        if all(costs):  # what eats into that room: each request's cost with two workers
            rates += f"; server CPU a request {costs[0]:.0f} µs with 1, {costs[1]:.0f} with 2"
        waits = (one.row.runqueue_wait_us_per_request, two.row.runqueue_wait_us_per_request)
        if waits[0] is not None and waits[1] is not None:  # time ready to run, but no core free
            rates += f"; its threads waited for a core {waits[0]:.0f} µs a request with 1, "
            rates += f"{waits[1]:.0f} with 2"
        found.append(
            Target(
                name,
                goal,
                f"{value:.2f}x ({rates})",
                value >= floor,
                ratio=[value, value, value],
                floor=floor,
            )
        )
    return found


def plantstore_rows(rows: list[WorkerRow]) -> list[Measurement]:
    """The rows the run-wide targets (peak RSS, every answer 2xx) also cover: one and two
    workers, the service as shipped on this machine; four workers is an exploration."""
    return [r.row for r in rows if r.workers in WORKER_COUNTS]


def as_json(rows: list[WorkerRow]) -> dict[str, Any]:
    """The workers section of the run's JSON: every row with its lock figures, the ratios."""
    return {
        "pinned": False,
        "worker_counts": list(WORKER_COUNTS),
        "ceiling_workers": CEILING_WORKERS,
        "rows": [r.as_json() for r in rows],
        "ratios_2_over_1": {scenario: ratio(rows, scenario, 2) for scenario, _ in SCENARIOS},
        "create_ratios_over_1": {
            str(r.workers): ratio(rows, "create", r.workers) for r in rows if r.scenario == "create"
        },
        "write_ceiling": where_it_stops(rows),
    }
