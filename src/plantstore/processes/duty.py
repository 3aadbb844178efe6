"""Background jobs once per machine: the worker that holds the machine's duty runs them.

Under ``plantstore serve`` with several workers, each worker would otherwise run its own
webhook dispatcher (so a receiver could get the per-subscription concurrency once per worker,
and the overall one would be multiplied too) and its own sandbox purge. ``serve`` makes one
lock file before it forks the workers; each worker tries to ``flock`` it, and the one that
holds it starts the jobs. The kernel drops the lock of a worker that dies, however it dies,
and another worker takes the duty over within ``TAKEOVER_POLL_S``. In a process of its own
(``--workers 1``, an app in a test) the jobs start at once. The supervisor hands each worker
the lock file's path in its ``Inheritance``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

log = logging.getLogger(__name__)

TAKEOVER_POLL_S = 1.0
Job = tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]  # start, stop


@contextlib.contextmanager
def machine_duty(directory: Path | None = None) -> Iterator[Path]:
    """Make the duty's lock file (in ``directory``, else the temporary one) for the workers
    about to be forked; remove it afterwards."""
    descriptor, name = tempfile.mkstemp(prefix="plantstore-duty-", dir=directory)
    os.close(descriptor)
    try:
        yield Path(name)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


class OncePerMachine:
    """Starts ``jobs`` once this process holds the machine's duty (the lock file ``duty``;
    None: at once), and stops them."""

    def __init__(self, jobs: list[Job], duty: Path | None) -> None:
        self._jobs = jobs
        self._duty = duty
        self._descriptor: int | None = None
        self._waiting: asyncio.Task[None] | None = None
        self._started = False

    @property
    def held(self) -> bool:
        return self._started

    async def start(self) -> None:
        if self._duty is None:
            await self._start_jobs()
            return
        self._descriptor = os.open(self._duty, os.O_RDWR)
        self._waiting = asyncio.get_running_loop().create_task(
            self._take_duty(), name="machine-duty"
        )

    async def stop(self) -> None:
        if self._waiting is not None:
            self._waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._waiting
        if self._started:
            for _, stop in reversed(self._jobs):
                await stop()
            self._started = False
        if self._descriptor is not None:
            os.close(self._descriptor)  # the lock goes with it
            self._descriptor = None

    async def _take_duty(self) -> None:
        assert self._descriptor is not None
        while True:
            try:
                fcntl.flock(self._descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                await asyncio.sleep(TAKEOVER_POLL_S)
                continue
            log.info("this worker runs the machine's background jobs (pid %d)", os.getpid())
            await self._start_jobs()
            return

    async def _start_jobs(self) -> None:
        for start, _ in self._jobs:
            await start()
        self._started = True
