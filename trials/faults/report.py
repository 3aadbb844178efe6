"""The table printed at the end, its legend, and the JSON written to bench/results/."""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .config import BLOCKS_WRITES, ENDED_BY, NEEDS_RESTART, FaultConfig
from .load import Probe
from .suite import Verdict

COLUMNS = (
    ("fault", 21),
    ("answers", 30),
    ("longest", 8),
    ("readyz 503/200", 15),
    ("write again", 19),
    ("ended by", 15),
    ("lost", 5),
    ("integrity", 10),
)

LEGEND = """\
answers: creates by status ("503!": a 503 without Retry-After or the Error body; "timeout",
"connection": no answer). longest: the longest answer, in seconds (bound: the write deadline
+ 1 s). readyz 503/200: seconds from the fault's start (disk full: the first refused write)
to /readyz's first 503, and from its end (or the restarted service being ready) to its first
200; "n/a" where writes stay possible. write again: seconds from the end to the first create
answered 200. lost: acknowledged creates not found afterwards (for a removed or replaced
file: not in the old file, or answered 200 more than 1 s after the swap, or not listed after
the restart). integrity: PRAGMA integrity_check of the SQLite file at the end."""


def seconds(value: float | None, missing: str = "never") -> str:
    return missing if value is None else f"{value:.2f}"


def row(verdict: Verdict) -> list[str]:
    result, m = verdict.result, verdict.measures
    name = result.name
    readyz_503 = seconds(m.readyz_503) if name in BLOCKS_WRITES else "n/a"
    again = seconds(m.write_again)
    if name in NEEDS_RESTART and m.write_again is not None:
        again += " after restart"
    answers = " ".join(f"{label}:{count}" for label, count in sorted_counts(m.counts))
    return [
        name,
        answers or "none",
        f"{m.longest:.2f}",
        f"{readyz_503}/{seconds(m.readyz_200)}",
        again,
        ENDED_BY.get(name, "-"),
        "?" if result.lost is None else str(result.lost),
        integrity(result.integrity) if result.backend == "sqlite" else "n/a",
    ]


def integrity(text: str) -> str:
    return {"ok": "ok", "n/a": "not run"}.get(text, "NOT OK")


def sorted_counts(counts: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda item: (not item[0][:3].isdigit(), item[0]))


def table(verdicts: list[Verdict]) -> str:
    header = "  ".join(f"{title:<{width}}" for title, width in COLUMNS) + "  verdict"
    lines = [header, "-" * len(header)]
    for verdict in verdicts:
        cells = row(verdict)
        text = "  ".join(
            f"{cell:<{width}}" for cell, (_, width) in zip(cells, COLUMNS, strict=True)
        )
        failed = ", ".join(target.name for target in verdict.failed)
        if verdict.result.start is None and verdict.result.error:
            failed = f"NOT STAGED: {verdict.result.error[:100]}"
        lines.append(f"{text}  {'ok' if verdict.passed else 'FAILED: ' + failed}")
    return "\n".join(lines)


def transitions(probes: list[Probe], origin: float) -> list[list[Any]]:
    """The probe's timeline as its changes: [seconds from the load's start, status]."""
    changes: list[list[Any]] = []
    for probe in probes:
        if not changes or changes[-1][1] != probe.status:
            changes.append([round(probe.sent - origin, 3), probe.status])
    return changes


def fault_json(verdict: Verdict) -> dict[str, Any]:
    result, m = verdict.result, verdict.measures
    origin = result.origin

    def at(moment: float | None) -> float | None:
        return None if moment is None else round(moment - origin, 3)

    return {
        "fault": result.name,
        "backend": result.backend,
        "passed": verdict.passed,
        "error": result.error,
        "evidence": result.evidence,
        "notes": result.notes,
        "ended_by": ENDED_BY.get(result.name),
        "times": {
            "start": at(result.start),
            "end": at(result.end),
            "operator": at(result.operator),
        },
        "answers": m.counts,
        "acknowledged": m.acknowledged,
        "other_5xx": m.bad_5xx,
        "other_5xx_bodies": m.bad_bodies,
        "bodies_503": sorted({a.body or "" for a in result.answers if a.status == 503})[:5],
        "unanswered": m.unanswered,
        "longest_s": round(m.longest, 3),
        "over_bound": m.over_bound,
        "readyz_503_after_s": m.readyz_503,
        "readyz_200_after_s": m.readyz_200,
        "ready_at_end": m.ready_at_end,
        "readyz": transitions(result.readyz, origin),
        "healthz": transitions(result.healthz, origin),
        "write_again_s": m.write_again,
        "log_lines_during_fault": result.log_lines,
        "lost": result.lost,
        "lost_detail": result.lost_detail,
        "integrity_check": result.integrity,
        "targets": [
            {"name": t.name, "passed": t.passed, "detail": t.detail} for t in verdict.targets
        ],
    }


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() + (" (src modified)" if dirty.stdout.strip() else "")


def write_json(directory: Path, verdicts: list[Verdict], config: FaultConfig) -> Path:
    """bench/results/faults-<UTC stamp>.json, as soak-… and slow-clients-… are named."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    payload = {
        "suite": "faults",
        "stamp": stamp,
        "commit": commit(),
        "host": {
            "kernel": platform.release(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "cores": os.cpu_count(),
        },
        "config": {
            "seconds": config.seconds,
            "frozen_seconds": config.frozen_seconds,
            "warmup": config.warmup,
            "after": config.after,
            "clients": config.clients,
            "workers": config.workers,
            "write_timeout": config.write_timeout,
            "answer_bound": config.answer_bound,
        },
        "passed": all(verdict.passed for verdict in verdicts),
        "faults": [fault_json(verdict) for verdict in verdicts],
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"faults-{stamp}.json"
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path
