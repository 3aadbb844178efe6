"""The run's figures as a table, the targets they are held to, and the JSON record.

Rates are also shown as a share of the reference ceiling, because absolute rates say more
about the machine than about the service.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from .measure import Measurement
from .place import HERE

COLUMNS = (
    ("scenario", 32),
    ("req/s", 9),
    ("% ref", 7),
    ("p50 ms", 8),
    ("p99 ms", 8),
    ("CPU µs/req", 11),
    ("RSS MB", 7),
    ("non-2xx", 8),
    ("other%", 7),
)


@dataclass
class Verdict:
    """One target of a script (soak, slow clients) that passes or fails; one judged on the
    median of rounds is unsettled when their range straddles the goal."""

    name: str
    goal: str
    measured: str
    passed: bool
    settled: bool = True

    def text(self, name_width: int = 16, goal_width: int = 25) -> str:
        mark = ("PASS" if self.passed else "FAIL") if self.settled else "UNSETTLED"
        return f"  [{mark}] {self.name:<{name_width}} {self.goal:<{goal_width}} {self.measured}"


def ceiling(rows: dict[str, Measurement]) -> float | None:
    """The mean of the reference rates measured before and after the service scenarios."""
    rates = [_rate(rows.get(key)) for key in ("ref_before", "ref_after")]
    rates = [rate for rate in rates if rate]
    return sum(rates) / len(rates) if rates else None


def _rate(row: Measurement | None) -> float:
    """The row's req/s, 0 when it was not run."""
    return row.result.rate if row is not None and row.result is not None else 0.0


def table(rows: list[Measurement], top: float | None) -> str:
    """One line per scenario; notes (pacing, pinning, why not run) listed underneath."""
    lines = [
        "".join(f"{title:>{w}}" if i else f"{title:<{w}}" for i, (title, w) in enumerate(COLUMNS))
    ]
    for row in rows:
        cells = [row.scenario, *_figures(row, top)]
        lines.append(
            "".join(
                f"{cell:>{w}}" if i else f"{cell:<{w}}"
                for i, (cell, (_, w)) in enumerate(zip(cells, COLUMNS, strict=True))
            )
        )
    notes = [f"  {row.scenario}: {note}" for row in rows if (note := _note(row))]
    return "\n".join([*lines, *(["notes:", *notes] if notes else [])])


def _note(row: Measurement) -> str:
    """The row's note, plus its latency from the schedule when it was paced: the p50 and
    p99 columns are wrk's, counted from each send, which hides a stall's queue."""
    schedule = row.result.schedule if row.result is not None else None
    if schedule is None:
        return row.note
    late = f"{schedule.late:,} sent over 1 ms late"
    unmatched = f", {schedule.unmatched:,} answers unmatched" if schedule.unmatched else ""
    from_schedule = (
        f"from the schedule p50 {schedule.p50_ms:.2f}, p99 {schedule.p99_ms:.2f}, "
        f"p99.9 {schedule.p999_ms:.2f}, max {schedule.max_ms:.2f} ms ({late}{unmatched})"
    )
    return f"{row.note}; {from_schedule}" if row.note else from_schedule


def _figures(row: Measurement, top: float | None) -> list[str]:
    result = row.result
    if result is None:
        return ["not run", "-", "-", "-", "-", "-", "-", "-"]
    errors = f"{result.errors}" + (f"+{result.socket_errors}sock" if result.socket_errors else "")
    return [
        f"{result.rate:,.0f}",
        f"{100 * result.rate / top:.0f}%" if top else "-",
        f"{result.p50_ms:.2f}",
        f"{result.p99_ms:.2f}",
        f"{row.cpu_us_per_request:,.0f}" if row.cpu_us_per_request else "-",
        f"{row.peak_rss_mb:.0f}" if row.peak_rss_mb else "-",
        errors,
        "-" if row.other_cpu_share is None else f"{100 * row.other_cpu_share:.0f}%",
    ]


def machine() -> dict[str, Any]:
    """What the figures depend on besides the code."""
    wrk = subprocess.run(["wrk", "--version"], capture_output=True, text=True, check=False)
    model = next(
        (line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")),
        None,
    )
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": model,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "sqlite": sqlite3.sqlite_version,
        "granian": metadata.version("granian"),
        "wrk": (wrk.stdout or wrk.stderr).split("[")[0].strip(),
    }


# What ``make bench`` itself writes: an earlier run's figures, report and plots, not yet
# committed, do not make the code measured differ from its commit.
BENCH_OUTPUTS = (
    ":(top,exclude)bench/results",
    ":(top,exclude)bench/README.md",
    ":(top,exclude)docs/img",
)


def code_version() -> dict[str, Any]:
    """The commit measured, and whether the working tree differed from it (outside the
    benchmark's own outputs)."""

    def git(*args: str) -> str:
        run = subprocess.run(["git", *args], capture_output=True, text=True, check=False, cwd=HERE)
        return run.stdout.strip()

    changes = git("status", "--porcelain", "--", ":(top)", *BENCH_OUTPUTS)
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(changes)}


def begin_run(tools: dict[str, str], results: Path) -> tuple[str, float]:
    """Check that each command in ``tools`` (command: Debian package) is installed, make the
    results directory, and warn if other work loads the machine; return the run's stamp and
    the load average before it."""
    for tool, package in tools.items():
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (apt-get install {package})")
    results.mkdir(parents=True, exist_ok=True)
    load_before = load_average()
    if load_before > 0.5:
        print(f"warning: load average {load_before:.2f} before the run; other work skews figures")
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"), load_before


def load_average() -> float:
    """The one-minute load average: well above 0 means something else competes for the cores."""
    return os.getloadavg()[0]


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def write_json(directory: Path, job: str, stamp: str, payload: dict[str, Any]) -> Path:
    """``<job>-<UTC stamp>.json`` (as every job names its results) plus ``latest.json``, the
    same content."""
    directory.mkdir(parents=True, exist_ok=True)
    text = json.dumps(payload, indent=2, default=str) + "\n"
    path = directory / f"{job}-{stamp}.json"
    path.write_text(text)
    (directory / "latest.json").write_text(text)
    return path
