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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from harness import HERE, WrkResult
from measure import Measurement

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
    """One target of a script (soak, slow clients) that passes or fails outright."""

    name: str
    goal: str
    measured: str
    passed: bool

    def text(self, name_width: int = 16, goal_width: int = 25) -> str:
        mark = "PASS" if self.passed else "FAIL"
        return f"  [{mark}] {self.name:<{name_width}} {self.goal:<{goal_width}} {self.measured}"


@dataclass
class Target:
    name: str
    goal: str
    measured: str
    met: bool | None  # None: not run

    @property
    def verdict(self) -> str:
        return {True: "met", False: "NOT MET", None: "not run"}[self.met]


def ceiling(rows: dict[str, Measurement]) -> float | None:
    """The mean of the reference rates measured before and after the service scenarios."""
    rates = [_rate(rows.get(key)) for key in ("ref_before", "ref_after")]
    rates = [rate for rate in rates if rate]
    return sum(rates) / len(rates) if rates else None


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
    notes = [f"  {row.scenario}: {row.note}" for row in rows if row.note]
    return "\n".join([*lines, *(["notes:", *notes] if notes else [])])


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


def targets(rows: dict[str, Measurement], top: float | None) -> list[Target]:
    """Every target of the issue, each with its measured value and verdict."""
    return [
        _list_share(rows.get("list10"), top),
        _at_least("durable creates, 32 conns, 1 process", rows.get("create"), 8_000),
        _group_commit_gain(rows.get("create"), rows.get("create_no_group_commit")),
        _paced_p99(rows.get("list10_paced")),
        _stored_ratio(rows.get("list10_paced"), rows.get("list10_paced_small")),
        _at_least("PostgreSQL --workers 2, list 10", rows.get("pg_list10"), 10_000),
        _at_least("PostgreSQL --workers 2, creates", rows.get("pg_create"), 5_000),
        _peak_rss([row for key, row in rows.items() if not key.startswith("ref_")]),
        _all_2xx(list(rows.values())),
    ]


Judge = Callable[[list[WrkResult]], tuple[str, bool]]


def _check(name: str, goal: str, rows: list[Measurement | None], judge: Judge) -> Target:
    """A target judged on wrk's results, when every row it needs was run."""
    results = [row.result for row in rows if row is not None and row.result is not None]
    if len(results) < len(rows):
        why = next((row.note for row in rows if row is not None and row.result is None), "")
        return Target(name, goal, why or "not run", None)
    measured, met = judge(results)
    return Target(name, goal, measured, met)


def _rate(row: Measurement | None) -> float:
    """The row's req/s, 0 when it was not run."""
    return row.result.rate if row is not None and row.result is not None else 0.0


def _list_share(row: Measurement | None, top: float | None) -> Target:
    def judge(results: list[WrkResult]) -> tuple[str, bool]:
        share = results[0].rate / top if top else 0.0
        return f"{100 * share:.0f}% ({results[0].rate:,.0f} of {top or 0:,.0f} req/s)", share >= 0.5

    return _check("list 10, SQLite, 1 process", ">= 50% of reference", [row], judge)


def _at_least(name: str, row: Measurement | None, floor: int) -> Target:
    def judge(results: list[WrkResult]) -> tuple[str, bool]:
        return f"{results[0].rate:,.0f}/s", results[0].rate >= floor

    return _check(name, f">= {floor:,}/s", [row], judge)


def _group_commit_gain(on: Measurement | None, off: Measurement | None) -> Target:
    def judge(results: list[WrkResult]) -> tuple[str, bool]:
        with_group, without = results[0].rate, results[1].rate
        gain = with_group / without if without else float("inf")
        return f"{gain:.1f}x ({with_group:,.0f}/s vs {without:,.0f}/s off)", gain >= 4

    return _check("creates, group commit on vs off", ">= 4x", [on, off], judge)


def _paced_p99(row: Measurement | None) -> Target:
    def judge(results: list[WrkResult]) -> tuple[str, bool]:
        paced = results[0]
        target = row.note if row is not None else ""
        measured = f"p99 {paced.p99_ms:.2f} ms at {paced.rate:,.0f}/s achieved ({target})"
        return measured, paced.p99_ms <= 5

    return _check("list 10 p99 at half the max rate", "<= 5 ms", [row], judge)


def _stored_ratio(big: Measurement | None, small: Measurement | None) -> Target:
    def judge(results: list[WrkResult]) -> tuple[str, bool]:
        large, few = results
        ratio = large.p50_ms / few.p50_ms
        measured = (
            f"p50 {ratio:.2f}x ({large.p50_ms:.2f} vs {few.p50_ms:.2f} ms; "
            f"p99 {large.p99_ms:.2f} vs {few.p99_ms:.2f} ms) "
            f"at {large.rate:,.0f} and {few.rate:,.0f}/s"
        )
        return measured, ratio <= 1.2

    return _check("list 10, 1M stored vs 1k stored", "p50 <= 1.2x", [big, small], judge)


def _peak_rss(rows: list[Measurement]) -> Target:
    peaks = [row.peak_rss_mb for row in rows if row.peak_rss_mb is not None]
    if not peaks:
        return Target("peak RSS per process", "<= 100 MB", "not run", None)
    return Target("peak RSS per process", "<= 100 MB", f"{max(peaks):.0f} MB", max(peaks) <= 100)


def _all_2xx(rows: list[Measurement]) -> Target:
    bad = [r.scenario for r in rows if r.result and (r.result.errors or r.result.socket_errors)]
    measured = "all 2xx" if not bad else "errors in: " + ", ".join(bad)
    return Target("every response 2xx, no socket errors", "0 errors", measured, not bad)


def targets_text(found: list[Target]) -> str:
    """One aligned line per target: verdict, name, goal, measured value."""
    width = max(len(t.name) for t in found)
    return "\n".join(
        f"  [{t.verdict:^7}] {t.name:<{width}}  {t.goal:<20} {t.measured}" for t in found
    )


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


def code_version() -> dict[str, Any]:
    """The commit measured, and whether the working tree differed from it."""

    def git(*args: str) -> str:
        run = subprocess.run(["git", *args], capture_output=True, text=True, check=False, cwd=HERE)
        return run.stdout.strip()

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


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


def write_json(directory: Path, stamp: str, payload: dict[str, Any]) -> Path:
    """``<UTC stamp>.json`` plus ``latest.json``, the same content."""
    directory.mkdir(parents=True, exist_ok=True)
    text = json.dumps(payload, indent=2, default=str) + "\n"
    path = directory / f"{stamp}.json"
    path.write_text(text)
    (directory / "latest.json").write_text(text)
    return path
