"""The SQLite workers phase in the report: its table, the write ceiling, targets and JSON.

Ratios use 2xx answers per second, so a 503 for a write lock held too long earns nothing;
the tables still show every row's non-2xx count and the lock timeouts behind them. A figure
over the interleaved rounds is their median with their range; a ratio of two workers over
one is taken round by round (each round's 2 over the same round's 1).
"""

from __future__ import annotations

import os
import statistics
from itertools import pairwise
from typing import Any

from bench.lib.measure import Measurement, median_and_range, span_text

from .targets import Target
from .workers_paced import at_one_load, paced_rate
from .workers_phase import (
    BARE,
    CEILING_WORKERS,
    PACED,
    PACED_SCENARIOS,
    SCENARIOS,
    WHERE,
    WORKER_COUNTS,
    WorkerRow,
)

# (scenario, what the target calls it, how many times one worker's rate two are to manage)
GOALS = (
    ("list10", "list 10", 1.5),
    ("create", "durable creates", 1.2),
    ("mix", "mix 80/10/10", 1.4),
)
CPU_CEILING = ("create", "durable create", 1.10)  # two workers' CPU a request over one's
ONE = "one writer"  # the row of PLANTSTORE_SQLITE_WRITERS=one
STILL_SCALING = 1.1  # more workers "scale" while each step buys at least 10 % more creates
COLUMNS = (
    ("scenario", 31),
    ("workers", 8),
    ("req/s [range]", 22),
    ("p50 ms", 8),
    ("p99 ms", 8),
    ("CPU µs/req [range]", 20),
    ("cores", 6),
    ("switches/req", 13),
    ("waited µs/req", 14),
    ("RSS MB", 7),
    ("non-2xx", 8),
    ("other%", 7),
    ("lock waits", 11),
    ("wait s", 8),
    ("timeouts", 9),
    ("2xx/s vs 1", 20),
    ("CPU/req vs 1", 20),
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


def find(
    rows: list[WorkerRow], workers: int, scenario: str, writers: str = "each"
) -> WorkerRow | None:
    """The first round's row (the ceiling's only one)."""
    return next((r for r in rows if _is(r, workers, scenario, writers)), None)


def _is(row: WorkerRow, workers: int, scenario: str, writers: str) -> bool:
    return row.workers == workers and row.scenario == scenario and row.writers == writers


def rounds(
    rows: list[WorkerRow], workers: int, scenario: str, writers: str = "each"
) -> list[WorkerRow]:
    """Every round's row of one scenario at one worker count that ran."""
    return [r for r in rows if _is(r, workers, scenario, writers) and r.row.result is not None]


def typical(
    rows: list[WorkerRow], workers: int, scenario: str, writers: str = "each"
) -> WorkerRow | None:
    """The round whose 2xx rate is the median one (the lower middle of an even count)."""
    ran = sorted(rounds(rows, workers, scenario, writers), key=_good_rate)
    return ran[(len(ran) - 1) // 2] if ran else find(rows, workers, scenario, writers)


def _good_rate(row: WorkerRow) -> float:
    return row.row.result.good_rate if row.row.result is not None else 0.0


def round_ratios(
    rows: list[WorkerRow],
    scenario: str,
    workers: int = 2,
    base: int = 1,
    cpu: bool = False,
    writers: str = "each",
) -> list[float]:
    """Each round's ``workers`` (with ``writers``) over the same round's ``base``: 2xx rates,
    or with ``cpu`` the server's CPU a request. The ceiling's one run is set against round
    0's base."""
    mine = {r.round: r for r in rounds(rows, workers, scenario, writers)}
    theirs = {r.round: r for r in rounds(rows, base, scenario)}
    found = []
    for number, row in mine.items():
        other = theirs.get(number)
        if other is None:
            continue
        if cpu:
            top, bottom = row.row.cpu_us_per_request, other.row.cpu_us_per_request
        else:
            top, bottom = _good_rate(row), _good_rate(other)
        if top and bottom:
            found.append(top / bottom)
    return found


def ratio(rows: list[WorkerRow], scenario: str, workers: int, base: int = 1) -> float | None:
    """``workers``' 2xx rate over ``base``'s for one scenario: the median over the rounds."""
    found = round_ratios(rows, scenario, workers, base)
    return statistics.median(found) if found else None


def _line(cells: list[str], columns: tuple[tuple[str, int], ...]) -> str:
    return "".join(
        f"{cell:>{width}}" if i else f"{cell:<{width}}"
        for i, (cell, (_, width)) in enumerate(zip(cells, columns, strict=True))
    )


def table(rows: list[WorkerRow]) -> str:
    """list 10, creates and the mix at one worker and at two, one line each."""
    count = max((r.round + 1 for r in rows if r.workers in WORKER_COUNTS), default=0)
    lines = [
        f"SQLite workers: one file seeded like the big one, `serve --workers N`, {count} "
        "interleaved rounds; wrk pinned to one core, the server unpinned (free on every core); "
        "req/s, CPU µs/req (the server's whole process tree) and the ratios: the rounds' median "
        "[range], a ratio taken round by round; the other columns: the median round's; cores: "
        "the server's CPU time over the run's; switches/req: its threads' context switches "
        "(hand-offs between threads and processes) per request; waited µs/req: the time its "
        "threads were ready to run but waited for a core, per request; other% over all cores; "
        "lock waits, their total time and timeouts: the other worker's SQLite write lock, from "
        "the server's metrics (one worker never waits)",
        _line([title for title, _ in COLUMNS], COLUMNS),
    ]
    for scenario, what in SCENARIOS + PACED_SCENARIOS:
        for workers in WORKER_COUNTS:
            found = typical(rows, workers, scenario)
            if found is not None:
                lines.append(_line(_cells(rows, found, what), COLUMNS))
        alternative = typical(rows, 2, scenario, writers="one")
        if alternative is not None:  # the same, one writer for the machine
            lines.append(_line(_cells(rows, alternative, f"{what} ({ONE})"), COLUMNS))
    notes = sorted(
        {r.row.note for r in rows if r.row.result is None or (r.lock and r.lock.missing)}
    )
    return "\n".join([*lines, *[f"  {note}" for note in notes]])


def _cells(rows: list[WorkerRow], found: WorkerRow, what: str) -> list[str]:
    row, lock = found.row, found.lock
    head = [what, str(found.workers)]
    result = row.result
    if result is None:
        return [*head, "not run", *["-"] * (len(COLUMNS) - 3)]
    ran = rounds(rows, found.workers, found.scenario, found.writers)
    rates = [r.row.result.good_rate for r in ran if r.row.result is not None]
    cpus = [r.row.cpu_us_per_request for r in ran if r.row.cpu_us_per_request]
    errors = f"{result.errors}" + (f"+{result.socket_errors}sock" if result.socket_errors else "")
    switches, waited = row.context_switches_per_request, row.runqueue_wait_us_per_request
    two = found.workers != 1
    return [
        *head,
        span_text(rates, "{:,.0f}"),
        f"{result.p50_ms:.2f}",
        f"{result.p99_ms:.2f}",
        span_text(cpus, "{:,.0f}"),
        _cores_used(row),
        "-" if switches is None else f"{switches:.1f}",
        "-" if waited is None else f"{waited:,.0f}",
        f"{row.peak_rss_mb:.0f}" if row.peak_rss_mb else "-",
        errors,
        "-" if row.other_cpu_share is None else f"{100 * row.other_cpu_share:.0f}%",
        "-" if lock is None else f"{lock.waits:,}",
        "-" if lock is None else f"{lock.wait_seconds:.2f}",
        "-" if lock is None else f"{lock.timeouts:,}",
        *(_versus_one(rows, found, cpu) if two else "-" for cpu in (False, True)),
    ]


def _versus_one(rows: list[WorkerRow], found: WorkerRow, cpu: bool) -> str:
    """The row's rate (or CPU a request) over one worker's, round by round."""
    found_ratios = round_ratios(rows, found.scenario, found.workers, cpu=cpu, writers=found.writers)
    return span_text(found_ratios) + "x" if found_ratios else "-"


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
        "write ceiling of one SQLite file: durable creates by workers, each committing its own "
        "writes (the median round of 1 and 2, the one run of 4); writer time waiting: the lock "
        "waits' total over the run's seconds times the workers",
        _line([title for title, _ in CEILING_COLUMNS], CEILING_COLUMNS),
    ]
    for workers in counts:
        found = typical(rows, workers, "create")
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
    counts = sorted({r.workers for r in rows if r.scenario == "create"})
    ran = [
        (workers, statistics.median(_good_rate(r) for r in found))
        for workers in counts
        if (found := rounds(rows, workers, "create"))
    ]
    if len(ran) < 2:
        return "where the write lock stops scaling: not measured"
    caveat = f"(on {_cores()} cores, one of them wrk's: workers past the cores compete for CPU)"
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
    """Two workers' 2xx rate over one worker's, against their floors, and a durable create's
    CPU with two against its ceiling; each says whether the cores or the service stopped it."""
    found = [_rate_target(rows, scenario, what, floor) for scenario, what, floor in GOALS]
    return [*found, _cpu_target(rows)]


def _rate_target(rows: list[WorkerRow], scenario: str, what: str, floor: float) -> Target:
    name, goal = f"SQLite --workers 2 / 1, {what}", f">= {floor:g}x"
    ratios = round_ratios(rows, scenario)
    two, one = typical(rows, 2, scenario), typical(rows, 1, scenario)
    span = median_and_range(ratios)
    if span is None or two is None or one is None or not two.row.result or not one.row.result:
        missing = [r.row.note for r in (two, one) if r is not None and r.row.result is None]
        return Target(name, goal, (missing or ["not run"])[0], None)
    value, low, high = span
    text = f"{span_text(ratios)}x over {len(ratios)} rounds ({two.row.result.good_rate:,.0f} vs "
    text += f"{one.row.result.good_rate:,.0f}/s in the median rounds; {WHERE}"
    room = cores_allow(one.row)
    if room is not None:
        text += f"; the cores allow about {room:.2f}x"
    costs = (one.row.cpu_us_per_request, two.row.cpu_us_per_request)
    if all(costs):  # what eats into that room: each request's cost with two workers
        text += f"; server CPU a request {costs[0]:.0f} µs with 1, {costs[1]:.0f} with 2"
    waits = (one.row.runqueue_wait_us_per_request, two.row.runqueue_wait_us_per_request)
    if waits[0] is not None and waits[1] is not None:  # time ready to run, but no core free
        text += f"; its threads waited for a core {waits[0]:.0f} µs a request with 1, "
        text += f"{waits[1]:.0f} with 2"
    text += ")" + _who_stopped(value >= floor, room, floor)
    return Target(
        name,
        goal,
        text,
        value >= floor,
        settled=low >= floor or high < floor,
        ratio=[value, low, high],
        floor=floor,
    )


def _who_stopped(met: bool, room: float | None, floor: float) -> str:
    """A miss is the machine's when its cores cannot give the floor, else the service's."""
    if met or room is None:
        return ""
    if room < floor:
        return f"; the machine stopped it: its cores allow {room:.2f}x, under the floor"
    return "; the service stopped it: the cores allow the floor"


def _cpu_target(rows: list[WorkerRow]) -> Target:
    scenario, what, ceiling = CPU_CEILING
    name, goal = f"SQLite --workers 2 / 1, CPU a {what}", f"<= {ceiling:.2f}x"
    ratios = round_ratios(rows, scenario, cpu=True)
    span = median_and_range(ratios)
    if span is None:
        return Target(name, goal, "not run", None)
    value, low, high = span
    ones = [r.row.cpu_us_per_request or 0.0 for r in rounds(rows, 1, scenario)]
    twos = [r.row.cpu_us_per_request or 0.0 for r in rounds(rows, 2, scenario)]
    text = f"{span_text(ratios)}x over {len(ratios)} rounds (the server's process tree: "
    text += f"{span_text(ones, '{:.0f}')} µs with 1, {span_text(twos, '{:.0f}')} with 2; {WHERE})"
    met = value <= ceiling
    ours, bare = (round_ratios(rows, key, cpu=True) for key in (PACED, BARE))
    text += at_one_load(ours, bare, paced_rate(rows), met, ceiling)
    return Target(name, goal, text, met, settled=high <= ceiling or low > ceiling)


def plantstore_rows(rows: list[WorkerRow]) -> list[Measurement]:
    """The rows the run-wide targets (peak RSS, every answer 2xx) also cover: one and two
    workers, the service as shipped on this machine; four workers is an exploration."""
    return [r.row for r in rows if r.workers in WORKER_COUNTS]


def as_json(rows: list[WorkerRow]) -> dict[str, Any]:
    """The workers section of the run's JSON: every row with its lock figures, the ratios."""
    return {
        "pinned": False,
        "wrk_pinned": True,
        "worker_counts": list(WORKER_COUNTS),
        "ceiling_workers": CEILING_WORKERS,
        "rows": [r.as_json() for r in rows],
        "ratios_2_over_1": {scenario: ratio(rows, scenario, 2) for scenario, _ in SCENARIOS},
        "round_ratios_2_over_1": {
            scenario: round_ratios(rows, scenario) for scenario, _ in SCENARIOS
        },
        "cpu_round_ratios_2_over_1": {
            scenario: round_ratios(rows, scenario, cpu=True)
            for scenario, _ in SCENARIOS + PACED_SCENARIOS
        },
        "paced_rate": paced_rate(rows),
        "create_ratios_over_1": {
            str(r.workers): ratio(rows, "create", r.workers) for r in rows if r.scenario == "create"
        },
        "write_ceiling": where_it_stops(rows),
    }
