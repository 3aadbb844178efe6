"""Sample the server with py-spy during a scenario, for a per-layer split of its CPU.

One recording in py-spy's raw (collapsed stack) format, the form easiest to sum by frame;
a speedscope copy is derived from it so the same samples can be browsed as a flame chart.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any


def py_spy() -> str:
    """The py-spy beside this interpreter (``make bench`` installs it), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise RuntimeError("--profile needs py-spy: .venv/bin/pip install -e '.[bench]'")
    return found


def raw_path(stem: Path) -> Path:
    return stem.with_name(f"{stem.name}-collapsed.txt")


def start(pid: int, seconds: int, stem: Path) -> subprocess.Popen[bytes]:
    """Record ``pid`` and its worker processes, thread by thread, for ``seconds``."""
    raw = raw_path(stem)
    command = [py_spy(), "record", "--pid", str(pid), "--subprocesses", "--threads"]
    command += ["--duration", str(seconds), "--format", "raw", "--output", str(raw)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def finish(process: subprocess.Popen[bytes], stem: Path) -> list[Path]:
    """Wait for the recording; write its speedscope twin; return the files written."""
    raw = raw_path(stem)
    _, errors = process.communicate(timeout=120)
    if process.returncode != 0 or not raw.exists():
        print(f"  py-spy failed ({process.returncode}): {errors.decode().strip()[-500:]}")
        return []
    speedscope = stem.with_name(f"{stem.name}-speedscope.json")
    speedscope.write_text(json.dumps(to_speedscope(raw.read_text(), stem.name)))
    return [raw, speedscope]


def to_speedscope(collapsed: str, name: str) -> dict[str, Any]:
    """Collapsed stacks (``a;b;c 42`` per line) as one sampled speedscope profile."""
    frames: dict[str, int] = {}
    samples: list[list[int]] = []
    weights: list[int] = []
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples.append([frames.setdefault(frame, len(frames)) for frame in stack.split(";")])
        weights.append(int(count))
    return {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "name": name,
        "exporter": "plantstore bench/lib/pyspy.py",
        "shared": {"frames": [{"name": frame} for frame in frames]},
        "profiles": [
            {
                "type": "sampled",
                "name": name,
                "unit": "none",
                "startValue": 0,
                "endValue": sum(weights),
                "samples": samples,
                "weights": weights,
            }
        ],
    }
