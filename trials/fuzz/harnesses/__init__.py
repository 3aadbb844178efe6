"""The atheris harnesses, one module each (``fuzz_<name>``), run as
``python -m trials.fuzz.harnesses.fuzz_<name>``: a process of their own, coverage-guided."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HARNESS_DIR = Path(__file__).resolve().parent
ROOT = HARNESS_DIR.parents[2]  # the repository: where ``trials`` imports from


def names() -> list[str]:
    """Every harness, by the name after ``fuzz_``."""
    return sorted(path.stem.removeprefix("fuzz_") for path in HARNESS_DIR.glob("fuzz_*.py"))


def command(name: str) -> list[str]:
    """The harness run as a module, so its ``from .fuzzlib import`` works from any cwd."""
    return [sys.executable, "-m", f"{__name__}.fuzz_{name}"]


def environment(**extra: str) -> dict[str, str]:
    """The caller's environment with the repository first on PYTHONPATH: a harness runs in
    a scratch directory, where ``-m`` alone would not find ``bench``."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}
