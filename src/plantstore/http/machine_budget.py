"""Rate budgets that every worker of one ``plantstore serve`` spends together.

Each worker is a process of its own, so budgets kept in a worker's memory let N workers admit
N times a limit. Here ``serve`` makes, before it forks its workers, one anonymous shared
mapping and one process-shared lock (a POSIX semaphore), which every worker (and every worker
granian forks later to replace one) inherits. The mapping holds a table of cells per kind of
budget, a 64-bit key and its GCRA theoretical arrival time, found by open addressing; a spend
reads and writes its key's cell under the lock. A worker remembers where each of its keys'
cells is, so a spend is one lock, one clock read, one read and one write of 16 bytes. The
clock is ``CLOCK_MONOTONIC``, one for the whole machine.

A worker killed while it holds the lock leaves it taken: the next spend waits ``STALE_LOCK_S``
(no spend holds it for more than microseconds, or a thread switch), then takes it over and
says so in the log.

A table holds ``SLOTS`` keys per kind; a key whose budget is whole again frees its cell. Should
every cell a key may use hold a live budget, the one nearest to whole is taken over, which can
admit that key's requests early: with 65,536 cells, only under far more live keys than that.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import mmap
import multiprocessing
import struct
from collections.abc import Callable
from time import monotonic

from limits import RateLimitItem

log = logging.getLogger(__name__)

KINDS = ("token", "auth-failure")
SLOTS = 1 << 16
_MASK = SLOTS - 1
_PROBES = 8
_CELL = struct.Struct("=Qd")  # key (0: never used), theoretical arrival time (monotonic s)
_unpack, _pack = _CELL.unpack_from, _CELL.pack_into
STALE_LOCK_S = 0.5
_REMEMBERED = 100_000  # cell positions a worker remembers per kind before starting afresh


class MachineTable:
    """The shared mapping and its lock, made once by ``serve``'s supervisor and handed to the
    workers it forks (``processes/inheritance.py``)."""

    def __init__(self) -> None:
        self.map = mmap.mmap(-1, len(KINDS) * SLOTS * _CELL.size)  # MAP_SHARED, anonymous
        self.lock = multiprocessing.get_context("fork").Lock()

    def acquire(self) -> None:
        if not self.lock.acquire(True, STALE_LOCK_S):
            self.took_over()

    def release(self) -> None:
        with contextlib.suppress(ValueError):  # released already: taken over from a slow holder
            self.lock.release()

    @staticmethod
    def took_over() -> None:
        log.warning(
            "the rate budgets' lock was held for %.1f s (a worker died holding it): taking it over",
            STALE_LOCK_S,
        )

    def find(self, kind: int, key: int, now: float) -> tuple[int, float]:
        """The key's cell and its arrival time; for a new key, a cell never used, else the one
        used longest ago (whole, if any is), and ``now`` (a whole budget). Called with the
        lock held.

        A whole cell is free to take, but its key may still be in use: taking the first one
        made two live keys that share a first cell take it from each other on every request,
        each time finding its cell afresh: with many callers, a good share of all requests.
        """
        base = kind * SLOTS
        oldest, oldest_arrival = -1, float("inf")
        for probe in range(_PROBES):
            offset = (base + ((key + probe) & _MASK)) * _CELL.size
            held, arrival = _unpack(self.map, offset)
            if held == key:
                return offset, arrival
            if arrival < oldest_arrival:  # an unused cell's is 0: older than any
                oldest, oldest_arrival = offset, arrival
        return oldest, now


class MachineBudget:
    """A budget kept in the machine table, with ``Budget``'s interface.

    ``spend`` is on every request's path, so its common case (a key whose cell this worker
    knows) is written out flat: the lock, the clock, one unpack and one pack.
    """

    def __init__(
        self, table: MachineTable, kind: str, item: RateLimitItem, key_of: Callable[[str], int]
    ) -> None:
        period = float(item.get_expiry())
        self._table = table
        self._map = table.map
        self._lock = table.lock
        self._kind = KINDS.index(kind)
        self._interval = period / item.amount
        self._tolerance = period - self._interval
        self._key_of = key_of
        self._cells: dict[str, tuple[int, int]] = {}  # key -> (cell key, where its cell was)

    async def wait(self, key: str) -> float:
        return self._use(key, spend=False)

    async def spend(self, key: str) -> float:
        remembered = self._cells.get(key)
        if remembered is None:
            return self._use(key, spend=True)
        number, offset = remembered
        lock = self._lock
        if not lock.acquire(True, STALE_LOCK_S):
            self._table.took_over()
        try:
            now = monotonic()
            held: int
            arrival: float
            held, arrival = _unpack(self._map, offset)
            if held == number:
                if arrival < now:
                    arrival = now
                wait = arrival - self._tolerance - now
                if wait > 0:
                    return wait
                _pack(self._map, offset, number, arrival + self._interval)
                return 0.0
        finally:
            try:  # noqa: SIM105 (a context manager would cost every request more)
                lock.release()
            except ValueError:  # released already: the lock was taken over from a slow holder
                pass
        return self._use(key, spend=True)  # the cell went to another key: look again

    def _use(self, key: str, *, spend: bool) -> float:
        """GCRA on the key's cell, found afresh: 0 if a spend fits (made if ``spend``), else
        the wait."""
        number = self._key_of(key)
        table = self._table
        table.acquire()
        try:
            now = monotonic()
            offset, arrival = table.find(self._kind, number, now)
            if arrival < now:
                arrival = now
            wait = arrival - self._tolerance - now
            if wait > 0:
                return wait
            if spend:
                _pack(self._map, offset, number, arrival + self._interval)
        finally:
            table.release()
        if spend:  # a cell of its own now: remember where
            if len(self._cells) >= _REMEMBERED:
                self._cells.clear()
            self._cells[key] = (number, offset)
        return 0.0


def hex_key(text: str) -> int:
    """A token hash (hex SHA-256) as a cell key: its first 64 bits, never 0."""
    return int(text[:16], 16) or 1


def text_key(text: str) -> int:
    """Any other key (a client address) as a cell key: a 64-bit BLAKE2b of it, never 0."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") or 1
