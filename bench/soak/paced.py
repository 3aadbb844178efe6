"""The paced mix, one wrk run of ``paced_mix.lua`` per interval, and what the server held near
each interval's end: one printed line and one ``Sample`` per interval."""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.lib.loads import CREATE_IDS
from bench.lib.measure import LIST_10, Measurement, Options
from bench.lib.wrk import LUA, WrkResult, parse_wrk
from harness.procstat import (
    core_busy_seconds,
    cpu_list,
    cpu_seconds,
    file_mb,
    open_files,
    process_tree,
    rss_mb,
    worker_pids,
)
from harness.servers import Server, pinned


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
    command += ["-s", str(LUA / "paced_mix.lua"), server.base_url + LIST_10]
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
