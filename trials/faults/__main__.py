"""``python -m trials.faults``: stage the faults (all, or ``--only``), print the table, write
bench/results/faults-<stamp>.json, and exit 1 if any target failed."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from .config import FAULTS, FaultConfig
from .report import LEGEND, table, write_json
from .suite import Suite, Verdict

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"  # beside the other runs


def progress(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m trials.faults",
        description="Faults of the environment under a running plantstore serve and a create "
        "load, judged against the contract (needs root).",
    )
    parser.add_argument(
        "--only", default="", help=f"comma-separated faults (all): {', '.join(FAULTS)}"
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="how long a fault is held (3)")
    parser.add_argument("--warmup", type=float, default=1.5, help="healthy load before (1.5)")
    parser.add_argument("--after", type=float, default=2.5, help="load after the end (2.5)")
    parser.add_argument("--clients", type=int, default=6, help="concurrent creating clients (6)")
    parser.add_argument(
        "--write-timeout", type=float, default=2.0, help="PLANTSTORE_WRITE_TIMEOUT, seconds (2)"
    )
    parser.add_argument("--workers", type=int, default=2, help="server processes (2)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.only.split(",") if name.strip()] or list(FAULTS)
    unknown = [name for name in names if name not in FAULTS]
    if unknown:
        parser.error(f"unknown fault {', '.join(unknown)}; the faults: {', '.join(FAULTS)}")
    args.names = names
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    workdir = Path(tempfile.mkdtemp(prefix="plantstore-faults-"))
    config = FaultConfig(
        workdir=workdir,
        seconds=args.seconds,
        warmup=args.warmup,
        after=args.after,
        clients=args.clients,
        write_timeout=args.write_timeout,
        workers=args.workers,
        progress=progress,
    )
    print(
        f"faults: {', '.join(args.names)}; each held {args.seconds:g} s (frozen "
        f"{config.frozen_seconds:g} s) under {args.clients} clients, write deadline "
        f"{args.write_timeout:g} s; logs in {workdir}",
        flush=True,
    )
    verdicts: list[Verdict] = []
    try:
        with Suite(config) as suite:
            for name in args.names:
                verdicts.append(suite.run(name))
    finally:
        if verdicts:
            print(table(verdicts))
            print(f"\n{LEGEND}")
    path = write_json(args.results, verdicts, config)
    print(f"\nresults: {path}")
    failed = [verdict for verdict in verdicts if not verdict.passed]
    for verdict in failed:
        print(f"\n{verdict.findings()}")
    if failed:
        print(f"\nFAILED: {len(failed)} of {len(verdicts)} faults; logs kept in {workdir}")
        return 1
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nevery target met by all {len(verdicts)} faults")
    return 0


if __name__ == "__main__":
    sys.exit(main())
