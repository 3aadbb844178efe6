"""`make soak`: open-loop mixed load at half the maximum rate for ten minutes, watched every 10 s.

Seeds a fresh SQLite file (100 users x 1,000 plants plus the bench user's own), measures the
flat-out rate of the 80/10/10 mix (list 10 / create / delete) for a few seconds, then drives
the same mix paced at half that rate (``paced_mix.lua``: ``mix.lua``'s requests on
``paced.lua``'s schedule) against a fresh server on the same file, in consecutive 10-s wrk
runs. After each run it prints one line: achieved req/s, p50/p99/p99.9, errors (non-2xx and
socket errors), the server worker's RSS, the open files of the server's processes, the WAL
size, and how busy the server's core was. The server is pinned to CPU 0, wrk to CPU 1.

Targets: RSS grows by <= 20 MB from minute 2 to the end, open files stay flat,
zero errors. Results go to bench/results/soak-<stamp>.json.

    .venv/bin/python -m bench.soak [--minutes 10] [--rate N] [--users 100]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sqlite3
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.lib import report
from bench.lib.loads import fresh_sqlite, half_rate, mix
from bench.lib.measure import Measurement, Options, measure, warm_up
from bench.lib.place import HERE
from bench.lib.seed import BENCH_USER, MIX_DELETES_PER_SECOND, Layout
from bench.lib.services import LIMITS_OFF, serve_limits_off
from harness.procstat import open_files, process_tree

from .paced import Soak, paced_soak
from .verdict import baseline_index, summary

RESULTS = HERE / "results"
FIRST_DOOMED_ID = 1_000_001  # the seed's first delete id: above the listed plants 1..1000


# --- seeding, the flat-out probe, the delete range ------------------------------------------


def add_doomed_plants(path: Path, first: int, count: int) -> None:
    """More of the bench user's plants for the paced run to delete (server stopped)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        (user_id,) = conn.execute("SELECT id FROM users WHERE name = ?", (BENCH_USER,)).fetchone()
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO plants (user_id, id, name, tag) VALUES (?, ?, 'doomed', NULL)",
            ((user_id, plant_id) for plant_id in range(first, first + count)),
        )
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    os.sync()


def deletes_needed(rate: int, args: argparse.Namespace) -> int:
    """One request in ten deletes: the schedule's share for the whole run, plus what each wrk
    run may ask for beyond its schedule (one per connection) and some headroom."""
    seconds: int = args.minutes * 60
    runs: int = seconds // args.interval
    connections: int = args.connections
    return math.ceil(rate * seconds / 10 * 1.05) + runs * connections + 1_000


def flat_out(options: Options, url: str, token: str, layout: Layout) -> Measurement:
    """The mix flat out on a fresh server: the rate the paced run is half of."""
    server = serve_limits_off(options, "soak-flat-out", url, token)
    try:
        warm_up(server, options)
        return measure(server, mix(layout), options, "mix", "mix 80/10/10, flat out")
    finally:
        server.stop()


# --- the run --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--minutes", type=int, default=10, help="paced load (default 10)")
    parser.add_argument("--interval", type=int, default=10, help="seconds per wrk run and line")
    parser.add_argument("--rate", type=int, default=None, help="paced rate (default: half max)")
    parser.add_argument("--probe-seconds", type=int, default=5, help="flat-out mix (default 5)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--users", type=int, default=100, help="seeded users (default 100)")
    parser.add_argument("--plants-per-user", type=int, default=1_000)
    parser.add_argument("--server-cpus", default="0", help="taskset list for the server")
    parser.add_argument("--wrk-cpus", default="1", help="taskset list for wrk")
    parser.add_argument("--no-pin", action="store_true", help="pin neither server nor wrk")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.sample_before_end = min(1.0, args.interval / 4)
    if args.minutes < 1 or args.interval < 2 or args.minutes * 60 < args.interval:
        parser.error("--minutes must be >= 1 and --interval between 2 and the run's length")
    return args


def run(args: argparse.Namespace, workdir: Path) -> Soak:
    options = Options(
        seconds=args.probe_seconds,
        connections=args.connections,
        server_cpus=None if args.no_pin else args.server_cpus,
        wrk_cpus=None if args.no_pin else args.wrk_cpus,
        workdir=workdir,
    )
    # The flat-out probe deletes from the seed's range (sized for its rate, as make bench's
    # is); the paced run's range is added after it, once the rate is known.
    probe_deletes = MIX_DELETES_PER_SECOND * (args.probe_seconds + 1)
    layout = Layout(
        users=args.users,
        plants_per_user=args.plants_per_user,
        delete_from=FIRST_DOOMED_ID,
        delete_count=0,
        mix_delete_from=FIRST_DOOMED_ID,
        mix_delete_count=probe_deletes,
    )
    url, token = fresh_sqlite(options, "soak", layout)
    path = Path(url.removeprefix("sqlite:///"))
    probe: Measurement | None = None
    if args.rate is None:
        print(f"flat-out mix, {args.probe_seconds}s:", flush=True)
        probe = flat_out(options, url, token, layout)
        rate = half_rate(probe)
        if probe.result is not None:
            r = probe.result
            print(
                f"  {r.rate:,.0f} req/s, p50 {r.p50}, p99 {r.p99}, "
                f"{r.errors + r.socket_errors} errors; paced rate {rate:,}/s",
                flush=True,
            )
    else:
        rate = args.rate
    first = FIRST_DOOMED_ID + probe_deletes
    count = deletes_needed(rate, args)
    add_doomed_plants(path, first, count)
    soak = Soak(rate=rate, flat_out=probe, delete_range=(first, count))
    server = serve_limits_off(options, "soak", url, token)
    try:
        time.sleep(0.5)  # let the worker finish starting before the idle count
        soak.idle_open_files_before = open_files(process_tree(server.pid))
        print(
            f"\npaced mix at {rate:,} req/s for {args.minutes} min on a fresh server; one wrk "
            f"run per {args.interval}s line (restarted each time, {args.connections} "
            "connections), latency from each request's send; server pinned to CPU "
            f"{options.server_cpus}, wrk to CPU {options.wrk_cpus}",
            flush=True,
        )
        paced_soak(server, soak, args, options, Path(f"{path}-wal"))
        time.sleep(1.0)  # the last run's connections are closed by now
        soak.idle_open_files_after = open_files(process_tree(server.pid))
    finally:
        server.stop()
    return soak


def main() -> None:
    args = parse_args()
    stamp, load_before = report.begin_run({"wrk": "wrk", "taskset": "util-linux"}, args.results)
    started = time.monotonic()
    # On the results' filesystem, not /tmp: a tmpfs would make every fsync free.
    with tempfile.TemporaryDirectory(dir=args.results, prefix=".soak-") as directory:
        soak = run(args, Path(directory))
    found = summary(soak, args)
    print(f"load average: {load_before:.2f} before, {report.load_average():.2f} after")
    payload: dict[str, Any] = {
        "started_utc": stamp,
        "duration_s": round(time.monotonic() - started, 1),
        "code": report.code_version(),
        "machine": report.machine(),
        "load_average": {"before": load_before, "after": report.load_average()},
        "settings": {
            **{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "server_env": LIMITS_OFF,
            "wrk_threads": 1,
            "mix": "80% GET /plants?limit=10, 10% POST /plants, 10% DELETE /plants/{id}",
            "note": "one wrk run per interval, restarted each time; latency from each send",
        },
        "rate": soak.rate,
        "flat_out": None if soak.flat_out is None else soak.flat_out.as_json(),
        "delete_range": {"first": soak.delete_range[0], "count": soak.delete_range[1]},
        "deletes_used": soak.deletes_used,
        "creates_used": soak.creates_used,
        "idle_open_files": {
            "before": soak.idle_open_files_before,
            "after": soak.idle_open_files_after,
        },
        "baseline_interval": baseline_index(soak, args),
        "intervals": [asdict(sample) for sample in soak.samples],
        "targets": [asdict(verdict) for verdict in found],
        "passed": all(verdict.passed for verdict in found),
    }
    path = args.results / f"soak-{stamp}.json"
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"\nwritten: {path}")


if __name__ == "__main__":
    main()
