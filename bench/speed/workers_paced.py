"""What a second worker costs at one load: ``serve --workers 1`` against ``--workers 2``, and
the bare reference app under the same granian with one worker against two, each paced at the
same rate (half of one worker's flat-out creates), in interleaved rounds.

Flat out, one worker and two are at different loads: one worker's event loop is saturated,
two are not, and a process's CPU a request depends on how loaded it is (a busy loop takes
many requests a wake-up, a half-idle one few). At one paced rate the load is the same, so the
two-over-one ratio of CPU a request is what the second process itself costs. The bare app's
ratio is the floor: what granian, Python's event loop and this machine charge any app for a
second worker, with none of plantstore's write path. The CPU target's verdict reads it.
"""

from __future__ import annotations

import dataclasses
import statistics

from bench.lib.loads import paced_creates, paced_list
from bench.lib.measure import Options, span_text, warm_up
from bench.lib.services import start_reference

from .workers_phase import (
    BARE,
    FAILURES,
    PACED,
    PACED_SCENARIOS,
    WHERE,
    WORKER_COUNTS,
    After,
    WorkerRow,
    create_ids,
    failure_text,
    measure_unpinned,
    not_run_row,
    row_key,
    row_label,
    serve,
)

FIRST_BLOCK = 50  # of create ids (ID_BLOCK each): past the flat-out runs, before 100


def paced_rate(rows: list[WorkerRow]) -> int | None:
    """Half of one worker's flat-out creates, the median over the rounds; None if not run."""
    rates = [
        r.row.result.good_rate
        for r in rows
        if r.workers == 1 and r.scenario == "create" and r.row.result is not None
    ]
    return max(1, round(statistics.median(rates) / 2)) if rates else None


def second_worker(rounds: int) -> After:
    """``sqlite_workers``' last step: ``rounds`` of the paced rows."""

    def paced(options: Options, url: str, token: str, rows: list[WorkerRow]) -> list[WorkerRow]:
        print("  the same load at 1 and 2 workers: plantstore and the bare app", flush=True)
        return paced_rounds(options, url, token, paced_rate(rows), rounds)

    return paced


def paced_rounds(
    options: Options, url: str, token: str, rate: int | None, rounds: int
) -> list[WorkerRow]:
    """Per round: plantstore's creates at 1 worker, the bare app at 1, both again at 2."""
    if rate is None:
        why = "one worker's flat-out creates did not run"
        return [not_run_row(w, s, why) for s, _ in PACED_SCENARIOS for w in WORKER_COUNTS]
    rows: list[WorkerRow] = []
    for round_ in range(rounds):
        for workers in WORKER_COUNTS:
            block = FIRST_BLOCK + round_ * len(WORKER_COUNTS) + workers
            load = {PACED: paced_creates(create_ids(block), rate)}
            rows += serve(options, url, token, workers, load, round_)
            rows[-1].row.note += f"; paced at {rate:,}/s, half of one worker's flat-out creates"
            rows.append(_bare(options, token, workers, rate, round_))
    return rows


def _bare(options: Options, token: str, workers: int, rate: int, round_: int) -> WorkerRow:
    key, label = row_key(workers, BARE), row_label(workers, BARE)
    wrk_pinned = dataclasses.replace(options, server_cpus=None)
    try:
        server = start_reference(options, token, workers=workers, pinned=False)
        try:
            warm_up(server, wrk_pinned)
            row = measure_unpinned(server, paced_list(rate), options, key, label)
        finally:
            server.stop()
    except FAILURES as exc:
        return not_run_row(workers, BARE, failure_text(exc), round_)
    row.note = f"granian --workers {workers}, paced at {rate:,}/s; {WHERE}"
    return WorkerRow(workers, BARE, row, None, round_)


def at_one_load(
    ours: list[float], bare: list[float], rate: int | None, met: bool, ceiling: float
) -> str:
    """The CPU target's words on the paced rows: what a second worker costs at one load, a
    create (``ours``) and the bare app's list 10 (``bare``), the rounds' ratios of CPU a
    request; a miss is the runtime's when even the bare app pays more than the ceiling."""
    if not ours or not bare:
        return ""
    text = f"; at one paced rate ({rate or 0:,}/s), a second worker costs a create "
    text += f"{span_text(ours)}x the CPU, and the bare reference app's list 10 {span_text(bare)}x"
    floor = statistics.median(bare)
    own = statistics.median(ours) / floor  # what plantstore adds to the runtime's share
    text += f" (a create's over the bare app's: {own:.2f}x)"
    if met:
        return text
    if floor <= ceiling:
        return text + ": the service stopped it (the bare app pays under the ceiling)"
    text += ": granian and the event loop stopped it (the bare app pays over the ceiling)"
    return text + (f", and the service adds over {ceiling:.2f}x to it" if own > ceiling else "")
