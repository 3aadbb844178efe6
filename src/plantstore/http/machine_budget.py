"""Rate budgets that every worker of one ``plantstore serve`` spends together.

Each worker is a process of its own, so budgets kept in a worker's memory let N workers admit
N times a limit. Here the budgets live in one file of shared memory (``/dev/shm``) that
``serve`` creates before its workers start and names in ``MACHINE_BUDGETS_VARIABLE``: for each
kind of budget, a table of cells (a 64-bit key and its GCRA theoretical arrival time), found by
open addressing. A spend reads and writes a cell under ``flock`` on the worker's own open of
the file: the kernel drops a lock whose holder dies, so a worker killed mid-spend never
wedges the others. One spend costs about a microsecond (two system calls and a struct read
and write); the clock is ``CLOCK_MONOTONIC``, one for the whole machine.

A table holds ``SLOTS`` keys per kind; a key whose budget is whole again frees its cell. Should
every cell a key may use hold a live budget, the one nearest to whole is taken over, which can
admit that key's requests early: with 65,536 cells, only under far more live keys than that.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import mmap
import os
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from limits import RateLimitItem

MACHINE_BUDGETS_VARIABLE = "PLANTSTORE_INTERNAL_MACHINE_BUDGETS"
KINDS = ("token", "auth-failure")
SLOTS = 1 << 16
_MASK = SLOTS - 1
_PROBES = 8
_CELL = struct.Struct("=Qd")  # key (0: never used), theoretical arrival time (monotonic s)


@contextlib.contextmanager
def machine_budgets() -> Iterator[Path]:
    """Create the shared file for the workers about to start, name it in the environment
    they inherit, and remove it when they are done."""
    shm = "/dev/shm"  # noqa: S108 (mkstemp below makes a fresh file, mode 0600, O_EXCL)
    directory = shm if os.path.isdir(shm) else None
    descriptor, name = tempfile.mkstemp(prefix="plantstore-budgets-", dir=directory)
    try:
        os.ftruncate(descriptor, len(KINDS) * SLOTS * _CELL.size)
        os.close(descriptor)
        os.environ[MACHINE_BUDGETS_VARIABLE] = name
        yield Path(name)
    finally:
        os.environ.pop(MACHINE_BUDGETS_VARIABLE, None)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


class MachineTable:
    """This worker's view of the shared file: its own descriptor (so its ``flock`` excludes
    the other workers') and a mapping of it."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDWR)
        self._map = mmap.mmap(self._fd, len(KINDS) * SLOTS * _CELL.size)

    @classmethod
    def from_environment(cls) -> MachineTable | None:
        """The table ``serve`` made for its workers; None outside ``serve``."""
        path = os.environ.get(MACHINE_BUDGETS_VARIABLE)
        return cls(Path(path)) if path and os.path.exists(path) else None

    def use(self, kind: str, key: int, interval: float, tolerance: float, spend: bool) -> float:
        """GCRA on the key's cell: 0 if a spend fits (made if ``spend``), else the wait."""
        base = KINDS.index(kind) * SLOTS
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            now = time.monotonic()
            offset, arrival = self._find(base, key, now)
            if arrival < now:
                arrival = now
            wait = arrival - tolerance - now
            if wait > 0:
                return wait
            if spend:
                _CELL.pack_into(self._map, offset, key, arrival + interval)
            return 0.0
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _find(self, base: int, key: int, now: float) -> tuple[int, float]:
        """The key's cell and its arrival time; for a new key, a free cell (or the one
        nearest to whole) and ``now`` (a whole budget)."""
        free = -1
        oldest, oldest_arrival = -1, float("inf")
        for probe in range(_PROBES):
            offset = (base + ((key + probe) & _MASK)) * _CELL.size
            held, arrival = _CELL.unpack_from(self._map, offset)
            if held == key:
                return offset, arrival
            if free < 0 and (held == 0 or arrival <= now):
                free = offset
            if arrival < oldest_arrival:
                oldest, oldest_arrival = offset, arrival
        return (free if free >= 0 else oldest), now


class MachineBudget:
    """A budget kept in the machine table, with ``Budget``'s interface."""

    def __init__(
        self, table: MachineTable, kind: str, item: RateLimitItem, key_of: Callable[[str], int]
    ) -> None:
        period = float(item.get_expiry())
        self._table = table
        self._kind = kind
        self._interval = period / item.amount
        self._tolerance = period - self._interval
        self._key_of = key_of

    async def wait(self, key: str) -> float:
        return self._table.use(
            self._kind, self._key_of(key), self._interval, self._tolerance, False
        )

    async def spend(self, key: str) -> float:
        return self._table.use(self._kind, self._key_of(key), self._interval, self._tolerance, True)


def hex_key(text: str) -> int:
    """A token hash (hex SHA-256) as a cell key: its first 64 bits, never 0."""
    return int(text[:16], 16) or 1


def text_key(text: str) -> int:
    """Any other key (a client address) as a cell key: a 64-bit BLAKE2b of it, never 0."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") or 1
