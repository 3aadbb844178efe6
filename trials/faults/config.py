"""The suite's settings, the faults' names, and the one error that says a fault could not be
staged (not root, no loop device, no ``fsfreeze``...)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SQLITE_FAULTS = ("disk-full", "io-error", "frozen", "file-removed", "file-replaced")
POSTGRES_FAULTS = ("pg-connections-ended", "pg-restart-fast", "pg-restart-immediate", "pg-outage")
PORT_FAULTS = ("second-serve",)
FAULTS = (*SQLITE_FAULTS, *POSTGRES_FAULTS, *PORT_FAULTS)

# How each fault ends: the operator's action that undoes it (the table's "ended by").
ENDED_BY = {
    "disk-full": "filler removed",
    "io-error": "fsck, restart",
    "frozen": "fsfreeze -u",
    "file-removed": "restart",
    "file-replaced": "restart",
    "pg-connections-ended": "last kill",
    "pg-restart-fast": "pg up again",
    "pg-restart-immediate": "pg up again",
    "pg-outage": "pg_ctl start",
    "second-serve": "second exits",
}
# Faults during which no write can succeed: /readyz must answer 503 within a second of the
# start. (Disk full counts from the first write refused: SQLite may first fill space its
# files already hold. Connections ended and a second serve leave the database writable.)
BLOCKS_WRITES = frozenset(
    {
        "disk-full",
        "io-error",
        "frozen",
        "file-removed",
        "file-replaced",
        "pg-restart-fast",
        "pg-restart-immediate",
        "pg-outage",
    }
)
# Faults the operator ends by restarting the service: times are counted from the restart.
NEEDS_RESTART = frozenset({"io-error", "file-removed", "file-replaced"})

FLIP_LIMIT = 1.0  # seconds for /readyz to follow the fault, and for writes to flow again
GRACE = 1.0  # a 200 for a create sent within this of a file's removal may still be honest
MAX_LOG_LINES = 10  # lines the server may write during a fault
REFUSE_LIMIT = 5.0  # seconds for a second serve on a taken address to give up
CLIENT_TIMEOUT = 15.0


class StagingError(Exception):
    """The fault could not be staged here; the message says why."""


@dataclass
class FaultConfig:
    """How long each phase lasts and how hard the load pushes."""

    workdir: Path
    seconds: float = 3.0  # how long a fault is held
    warmup: float = 1.5  # healthy load before the fault
    after: float = 2.5  # load after the fault's end
    clients: int = 6
    write_timeout: float = 2.0  # PLANTSTORE_WRITE_TIMEOUT given to the server
    workers: int = 2
    image_mb: int = 64
    python: str = sys.executable
    progress: Callable[[str], None] = field(default=lambda text: None)

    @property
    def answer_bound(self) -> float:
        """The longest any answer may take: the write deadline and one second."""
        return self.write_timeout + 1.0

    @property
    def frozen_seconds(self) -> float:
        """A freeze is held well past the write deadline, whatever ``seconds`` says."""
        return max(self.seconds, 3 * self.write_timeout)


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise StagingError(f"{what} needs root (running as uid {os.geteuid()})")


def require_tools(*tools: str) -> None:
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        raise StagingError(f"not installed: {', '.join(missing)} (e2fsprogs, util-linux)")
