"""The soak's targets (RSS growth, open files flat, zero errors) judged over its samples, and
the summary printed after the run."""

from __future__ import annotations

import argparse

from bench.lib import report

from .paced import Soak

RSS_GROWTH_LIMIT_MB = 20.0
OPEN_FILES_TOLERANCE = 2  # "flat": the spread allowed between samples taken under load


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
