"""Bad input at volume: schemathesis against a real server, then atheris on request parsing.

1. schemathesis. For each backend (SQLite in a fresh temporary file; PostgreSQL in a fresh
   database on --postgres, dropped afterwards) a real ``plantstore serve`` runs with the
   rate limits out of reach, and ``schemathesis run`` tests its own /openapi.json with every
   check and every phase (examples, coverage, fuzzing, stateful) until schemathesis's JSON
   report counts at least --requests generated test cases (one request each, as its NDJSON
   event log confirms): one run, then more runs with the next seeds if that was short. Each
   run uses tests/e2e/schemathesis.toml and tests/e2e/schemathesis_hooks.py, as
   tests/e2e/test_schemathesis.py does.
2. atheris. Every harness in trials/fuzz/harnesses/ runs for its share of --atheris-runs executions,
   coverage-guided from its seed corpus: body, content_type, query, path and headers fuzz
   the request parsers one by one, app drives the whole ASGI app. A crash is recorded with
   its input, and the harness goes on with the rest of its share, passing over inputs that
   end in a crash it has already recorded, so one run lists every distinct crash.

The summary table gives, per phase and backend or harness, the requests or executions and
the failures or crashes, then the volume targets (10,000 requests per backend, 1,000,000
executions), met or not; the exit status is 1 if anything failed or crashed. Work files
(schemathesis reports, server logs, corpora, crash inputs) go to a temporary directory,
kept if anything failed or with --keep.

    make fuzz                                     # the full count: about 25 minutes
    make fuzz ARGS="--quick"                      # a smoke pass: about a minute
    .venv/bin/python -m trials.fuzz --skip-schemathesis --harness app --atheris-runs 1000000
    .venv/bin/python -m trials.fuzz.harnesses.fuzz_query -runs=100000   # one harness, by hand
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .atheris_phase import HARNESS_RUNS, Crash, harness_names, print_crashes, run_harnesses
from .schemathesis_phase import print_failures, schemathesis_rows
from .summary import REQUIRED_REQUESTS, Row, print_table, print_targets

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trials.fuzz", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="a smoke pass: few requests/runs")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-schemathesis", action="store_true")
    parser.add_argument("--skip-atheris", action="store_true")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="an admin URL")
    parser.add_argument("--requests", type=int, help="per backend (default 10,000)")
    parser.add_argument(
        "--atheris-runs",
        type=int,
        help=f"in all, shared as in HARNESS_RUNS (default {sum(HARNESS_RUNS.values()):,})",
    )
    parser.add_argument(
        "--harness", action="append", choices=harness_names(), help="only these (repeatable)"
    )
    parser.add_argument("--workers", type=int, default=1, help="schemathesis workers")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="harnesses at once")
    parser.add_argument("--seed", type=int, default=20261121)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if args.requests is None:
        args.requests = 300 if args.quick else REQUIRED_REQUESTS
    if args.atheris_runs is None:
        args.atheris_runs = 30_000 if args.quick else sum(HARNESS_RUNS.values())
    harnesses = args.harness or harness_names()

    work = Path(tempfile.mkdtemp(prefix="plantstore-fuzz-"))
    print(f"work directory: {work}", flush=True)
    started = time.monotonic()
    rows: list[Row] = []
    all_crashes: dict[str, list[Crash]] = {}

    if not args.skip_schemathesis:
        rows += schemathesis_rows(args, work)

    if not args.skip_atheris:
        for name, row, crashes in run_harnesses(harnesses, args, work):
            rows.append(row)
            all_crashes[name] = crashes

    failed = any(row.failures for row in rows)
    print_failures(rows)
    print_crashes(all_crashes)
    print_table(rows)
    print_targets(rows)
    minutes = (time.monotonic() - started) / 60
    print(f"\n{'FAILED' if failed else 'passed'} in {minutes:.1f} minutes")
    if failed or args.keep:
        print(f"work files kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
