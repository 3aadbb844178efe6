"""What a worker of ``plantstore serve`` is handed by its supervisor."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..http.machine_budget import MachineTable
from ..settings import Settings


@dataclass(frozen=True, slots=True)
class Inheritance:
    """Made once, before the first fork, and passed to every worker's app factory (a worker
    granian forks later to replace one gets the same). A process of its own (``--workers
    1``, an app in a test) has no table (its budgets live in its memory) and no duty file
    (its background jobs start at once)."""

    settings: Settings
    machine_table: MachineTable | None = None  # the rate budgets every worker spends together
    duty: Path | None = None  # the lock file whose holder runs the once-per-machine jobs
