"""`make soak`: open-loop mixed load at half the maximum rate for ten minutes, watched every 10 s.

Seeds a fresh SQLite file (100 users x 1,000 plants plus the bench user's own), measures the
flat-out rate of the 80/10/10 mix (list 10 / create / delete) for a few seconds, then drives
the same mix paced at half that rate (``paced_mix.lua``: ``mix.lua``'s requests on
``paced.lua``'s schedule) against a fresh server on the same file, in consecutive 10-s wrk
runs. After each run it prints one line: achieved req/s, p50/p99/p99.9, errors (non-2xx and
socket errors), the server worker's RSS, the open files of the server's processes, the WAL
size, and how busy the server's core was. The server is pinned to CPU 0, wrk to CPU 1.

Targets (the issue's): RSS grows by <= 20 MB from minute 2 to the end, open files stay flat,
zero errors. Results go to bench/results/soak-<stamp>.json.

    .venv/bin/python bench/soak.py [--minutes 10] [--rate N] [--users 100]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import report
from harness import HERE, Server, WrkResult, launch, parse_wrk, pinned
from measure import LIST_10, Measurement, Options, measure, warm_up
from phases import CREATE_IDS, fresh_sqlite, half_rate, mix
from procstat import PROC, core_busy_seconds, cpu_list, cpu_seconds, process_tree, rss_mb
from seed import BENCH_USER, MIX_DELETES_PER_SECOND, Layout

RESULTS = HERE / "results"
# The limits are for abuse, not for a benchmark: far above anything this machine reaches.
# (The bench user holds every plant the run deletes: well over the default plant quota.)
# Unknown settings are ignored, so these are harmless before the limits land.
UNLIMITED_RATE = "1000000/second"
LIMITS_OFF = {
    "PLANTSTORE_RATE_LIMIT": UNLIMITED_RATE,
    "PLANTSTORE_AUTH_FAILURE_LIMIT": UNLIMITED_RATE,
    "PLANTSTORE_MAX_PLANTS_PER_USER": str(10**12),
}
FIRST_DOOMED_ID = 1_000_001  # the seed's first delete id: above the listed plants 1..1000
RSS_GROWTH_LIMIT_MB = 20.0
OPEN_FILES_TOLERANCE = 2  # "flat": the spread allowed between samples taken under load


def serve(options: Options, name: str, url: str, token: str, **env: str) -> Server:
    """``plantstore serve`` on ``url`` (its token already issued), pinned, with the limits
    out of the way; ``env`` adds settings."""
    command = [sys.executable, "-m", "plantstore", "serve"]
    environment = {"PLANTSTORE_DATABASE_URL": url, **LIMITS_OFF, **env}
    log = options.workdir / f"{name}.log"
    process, base_url = launch(command, log, options.server_cpus, environment)
    return Server(process, base_url, token)


# --- what the server holds, read from /proc -------------------------------------------------


def worker_pids(root: int) -> list[int]:
    """The processes doing the serving: granian's workers, or the root if it has none."""
    tree = process_tree(root)
    return tree[1:] or tree


def open_files(pids: list[int], kind: str = "") -> int:
    """Descriptors these processes hold (only those whose link starts with ``kind``)."""
    count = 0
    for pid in pids:
        directory = PROC / str(pid) / "fd"
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        if not kind:
            count += len(names)
            continue
        for name in names:
            try:
                count += os.readlink(directory / name).startswith(kind)
            except OSError:
                continue  # closed meanwhile
    return count


def file_mb(path: Path) -> float:
    """A file's size in MB, 0 when it does not exist (a WAL is removed on a clean close)."""
    try:
        return path.stat().st_size / 1e6
    except OSError:
        return 0.0


# --- the paced mix, one wrk run per interval ------------------------------------------------


@dataclass
class Chunk:
    """What one wrk run of ``paced_mix.lua`` reported: its summary and its done() line."""

    wrk: WrkResult
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    non_2xx: int
    socket_errors: int
    statuses: dict[str, int]
    next_create: int
    next_delete: int

    @property
    def errors(self) -> int:
        return self.non_2xx + self.socket_errors


def parse_chunk(output: str) -> Chunk:
    """wrk's summary plus the ``paced-mix:`` line ``paced_mix.lua``'s done() prints."""
    line = next((ln for ln in output.splitlines() if ln.startswith("paced-mix: ")), None)
    if line is None:
        raise RuntimeError(f"paced_mix.lua printed no summary: {output}")
    fields = dict(part.split("=", 1) for part in line.removeprefix("paced-mix: ").split())
    statuses = dict(item.split(":", 1) for item in fields.pop("statuses").split(",") if ":" in item)
    numbers = {key: float(value) for key, value in fields.items()}
    return Chunk(
        wrk=parse_wrk(output),
        p50_ms=numbers["p50_us"] / 1000,
        p99_ms=numbers["p99_us"] / 1000,
        p999_ms=numbers["p999_us"] / 1000,
        max_ms=numbers["max_us"] / 1000,
        non_2xx=int(numbers["non_2xx"]),
        socket_errors=int(sum(numbers[k] for k in ("connect", "read", "write", "timeout"))),
        statuses={status: int(count) for status, count in statuses.items()},
        next_create=int(numbers["next_create"]),
        next_delete=int(numbers["next_delete"]),
    )


def wrk_command(server: Server, seconds: int, connections: int, cpus: str | None) -> list[str]:
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency"]
    command += ["-H", f"Authorization: Bearer {server.token}"]
    command += ["-s", str(HERE / "paced_mix.lua"), server.base_url + LIST_10]
    return pinned(command, cpus)


@dataclass
class Sample:
    """One interval's line: wrk's figures and what the server held near the interval's end."""

    index: int
    elapsed_s: float
    rate: float
    requests: int
    seconds: float  # wrk's own measure of its run
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    errors: int
    non_2xx: int
    socket_errors: int
    statuses: dict[str, int]
    rss_mb: float
    open_files: int
    sockets: int
    wal_mb: float
    server_cpu_share: float  # of the server's core(s)
    other_cpu_share: float | None  # the server's core(s) busy with anything else


@dataclass
class Soak:
    """Everything the run learned, in the order it learned it."""

    rate: int
    flat_out: Measurement | None
    delete_range: tuple[int, int]
    idle_open_files_before: int = 0
    idle_open_files_after: int = 0
    samples: list[Sample] = field(default_factory=list)
    deletes_used: int = 0
    creates_used: int = 0


class Watch:
    """CPU of the server tree and of its core between two interval boundaries."""

    def __init__(self, server: Server, cores: list[int]) -> None:
        self.server, self.cores = server, cores
        self.at = time.monotonic()
        self.cpu = cpu_seconds(process_tree(server.pid))
        self.busy = core_busy_seconds(cores)

    def shares(self) -> tuple[float, float | None]:
        """(server, others) as shares of the server's cores since the last call."""
        now, cpu = time.monotonic(), cpu_seconds(process_tree(self.server.pid))
        busy = core_busy_seconds(self.cores)
        wall = (now - self.at) * max(1, len(self.cores))
        server = (cpu - self.cpu) / wall if wall else 0.0
        others = max(0.0, (busy - self.busy - (cpu - self.cpu)) / wall) if self.cores else None
        self.at, self.cpu, self.busy = now, cpu, busy
        return server, others


HEADER = (
    f"{'elapsed':>7} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'p99.9 ms':>8} {'errors':>6} "
    f"{'RSS MB':>7} {'files':>5} {'WAL MB':>7} {'cpu%':>5} {'other%':>6}"
)


def line(sample: Sample) -> str:
    minutes, seconds = divmod(round(sample.elapsed_s), 60)
    other = "-" if sample.other_cpu_share is None else f"{100 * sample.other_cpu_share:.0f}%"
    return (
        f"{minutes:>4}:{seconds:02d} {sample.rate:>7,.0f} {sample.p50_ms:>7.2f} "
        f"{sample.p99_ms:>7.2f} {sample.p999_ms:>8.2f} {sample.errors:>6} {sample.rss_mb:>7.1f} "
        f"{sample.open_files:>5} {sample.wal_mb:>7.2f} {100 * sample.server_cpu_share:>4.0f}% "
        f"{other:>6}"
    )


def paced_soak(
    server: Server, soak: Soak, args: argparse.Namespace, options: Options, wal: Path
) -> None:
    """Consecutive wrk runs of ``interval`` seconds; sample the server a second before each
    ends (while the load, and its connections, are still there)."""
    intervals = args.minutes * 60 // args.interval
    next_create, next_delete = CREATE_IDS, soak.delete_range[0]
    workers = worker_pids(server.pid)
    watch = Watch(server, cpu_list(options.server_cpus) if options.server_cpus else [])
    started = time.monotonic()
    print(HEADER, flush=True)
    for index in range(intervals):
        env = {
            **os.environ,
            "PLANTSTORE_BENCH_TOKEN": server.token,
            "PLANTSTORE_BENCH_RATE": str(soak.rate),
            "PLANTSTORE_BENCH_ID_BASE": str(next_create),
            "PLANTSTORE_BENCH_DELETE_FROM": str(next_delete),
        }
        command = wrk_command(server, args.interval, args.connections, options.wrk_cpus)
        chunk_started = time.monotonic()
        wrk = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        time.sleep(max(0.0, args.interval - args.sample_before_end))
        tree = process_tree(server.pid)
        held = (rss_mb(workers), open_files(tree), open_files(tree, "socket:"), file_mb(wal))
        stdout, stderr = wrk.communicate()
        if wrk.returncode != 0:
            raise RuntimeError(f"wrk failed ({wrk.returncode}): {stderr}{stdout}")
        chunk = parse_chunk(stdout)
        next_create, next_delete = chunk.next_create, chunk.next_delete
        server_share, other_share = watch.shares()
        sample = Sample(
            index=index,
            elapsed_s=time.monotonic() - started,
            rate=chunk.wrk.rate,
            requests=chunk.wrk.requests,
            seconds=chunk.wrk.seconds,
            p50_ms=chunk.p50_ms,
            p99_ms=chunk.p99_ms,
            p999_ms=chunk.p999_ms,
            max_ms=chunk.max_ms,
            errors=chunk.errors,
            non_2xx=chunk.non_2xx,
            socket_errors=chunk.socket_errors,
            statuses=chunk.statuses,
            rss_mb=held[0],
            open_files=held[1],
            sockets=held[2],
            wal_mb=held[3],
            server_cpu_share=server_share,
            other_cpu_share=other_share,
        )
        soak.samples.append(sample)
        print(line(sample), flush=True)
        if time.monotonic() - chunk_started > args.interval + 5:
            print(
                f"  (wrk took {time.monotonic() - chunk_started:.1f}s for a {args.interval}s run)"
            )
    soak.creates_used = next_create - CREATE_IDS
    soak.deletes_used = next_delete - soak.delete_range[0]


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
    server = serve(options, "soak-flat-out", url, token)
    try:
        warm_up(server, options)
        return measure(server, mix(layout), options, "mix", "mix 80/10/10, flat out")
    finally:
        server.stop()


# --- the verdict ----------------------------------------------------------------------------


def baseline_index(soak: Soak, args: argparse.Namespace) -> int:
    """The interval ending at minute 2; in a run of under 3 minutes, at a fifth of the run."""
    intervals = len(soak.samples)
    seconds = 120 if args.minutes >= 3 else args.minutes * 60 / 5
    return max(0, min(intervals - 1, round(seconds / int(args.interval)) - 1))


def clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}:{rest:02d}"


def verdicts(soak: Soak, args: argparse.Namespace) -> list[report.Verdict]:
    samples = soak.samples
    first, last = samples[baseline_index(soak, args)], samples[-1]
    growth = last.rss_mb - first.rss_mb
    after = samples[baseline_index(soak, args) :]
    files = [s.open_files for s in after]
    spread = max(files) - min(files)
    idle_drift = soak.idle_open_files_after - soak.idle_open_files_before
    requests = sum(s.requests for s in samples)
    errors = sum(s.errors for s in samples)
    statuses: dict[str, int] = {}
    for sample in samples:
        for status, count in sample.statuses.items():
            statuses[status] = statuses.get(status, 0) + count
    bad = {status: n for status, n in statuses.items() if not status.startswith("2")}
    sockets = sum(s.socket_errors for s in samples)
    return [
        report.Verdict(
            "RSS growth",
            f"<= {RSS_GROWTH_LIMIT_MB:.0f} MB",
            f"{growth:+.1f} MB ({first.rss_mb:.1f} MB at {clock(first.elapsed_s)}, "
            f"{last.rss_mb:.1f} MB at {clock(last.elapsed_s)}; "
            f"max {max(s.rss_mb for s in samples):.1f} MB)",
            growth <= RSS_GROWTH_LIMIT_MB,
        ),
        report.Verdict(
            "open files flat",
            f"spread <= {OPEN_FILES_TOLERANCE}, idle same",
            f"under load min {min(files)}, max {max(files)} from {clock(first.elapsed_s)} on; "
            f"idle {soak.idle_open_files_before} before, {soak.idle_open_files_after} after",
            spread <= OPEN_FILES_TOLERANCE and idle_drift <= 0,
        ),
        report.Verdict(
            "errors",
            "0",
            f"{errors:,} of {requests:,} requests"
            + (f" (non-2xx {bad}, socket errors {sockets})" if errors else ""),
            errors == 0,
        ),
    ]


def summary(soak: Soak, args: argparse.Namespace) -> list[report.Verdict]:
    samples = soak.samples
    found = verdicts(soak, args)
    requests = sum(s.requests for s in samples)
    seconds = sum(s.seconds for s in samples)
    print()
    print(
        f"summary: {requests:,} requests in {len(samples)} wrk runs of {args.interval}s, "
        f"{requests / seconds if seconds else 0:,.0f} req/s achieved of {soak.rate:,} scheduled"
    )
    print(
        f"  latency per interval: p50 {min(s.p50_ms for s in samples):.2f}-"
        f"{max(s.p50_ms for s in samples):.2f} ms, p99 {min(s.p99_ms for s in samples):.2f}-"
        f"{max(s.p99_ms for s in samples):.2f} ms, p99.9 up to "
        f"{max(s.p999_ms for s in samples):.2f} ms, max {max(s.max_ms for s in samples):.1f} ms"
    )
    print(
        f"  WAL max {max(s.wal_mb for s in samples):.2f} MB (end {samples[-1].wal_mb:.2f} MB); "
        f"deletes used {soak.deletes_used:,} of {soak.delete_range[1]:,} seeded, "
        f"creates {soak.creates_used:,}"
    )
    others = [s.other_cpu_share for s in samples if s.other_cpu_share is not None]
    if others and max(others) > 0.1:
        print(
            f"  warning: up to {100 * max(others):.0f}% of the server's core went to other "
            "processes in some intervals; latency there says more about the machine"
        )
    print("targets:")
    for verdict in found:
        print(verdict.text())
    return found


# --- the run --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    server = serve(options, "soak", url, token)
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
