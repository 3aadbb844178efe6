"""A write job of the SQLite writer, and how its outcome reaches whoever waits for it: a
caller's event loop in this process, or another process through ``relay`` (its ``Reply``)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import sqlite3
import time
from dataclasses import dataclass
from typing import Any, Protocol

from ...errors import StoreUnavailable
from ..health import not_answering
from .faults import environment_fault
from .ops import AnyOp


class Reply(Protocol):
    """Where a job submitted by another process is answered (``relay``'s view of it)."""

    def send(self, answers: list[tuple[int, Any, BaseException | None]]) -> None: ...


@dataclass(slots=True)
class Job:
    op: AnyOp  # its function, and whether it needs a savepoint or may wait for company
    args: tuple[Any, ...]
    loop: asyncio.AbstractEventLoop | None
    future: asyncio.Future[Any] | None
    reply: Reply | None = None  # another process's job: answered there, under ``number``
    number: int = 0
    deadline: float = math.inf  # monotonic (the same clock in every process of the machine)


Outcome = tuple[Job, Any, BaseException | None]  # a job, its result, or its error


def job_error(conn: sqlite3.Connection, exc: Exception) -> Exception:
    """A job's own error as its caller is told it. A fault of the environment is a 503; if
    SQLite undid the whole transaction for it, the batch cannot commit: raised for all."""
    fault = environment_fault(exc)
    if fault is None:
        return exc
    if not conn.in_transaction:
        raise fault
    return fault


def first_fault(outcomes: list[Outcome]) -> StoreUnavailable | None:
    return next((e for _, _, e in outcomes if isinstance(e, StoreUnavailable)), None)


def in_time(batch: list[Job]) -> list[Job]:
    """The jobs whose callers still wait; the others are answered (to a caller gone, so
    ignored) and not made: a caller answered 503 at its deadline is never written after."""
    now = time.monotonic()
    if all(job.deadline > now for job in batch):
        return batch
    late = not_answering()
    answer([(job, None, late) for job in batch if job.deadline <= now])
    return [job for job in batch if job.deadline > now]


SWEEP_S = 0.1  # how often waiting callers are looked at for their deadlines


class Deadlines:
    """This process's callers waiting for their writes, each answered 503 at its deadline by
    one sweep every ``SWEEP_S`` on their event loop (a little before it, never after), not a
    timer each: a timer and its cancel cost a create more than the rest of its bookkeeping."""

    def __init__(self) -> None:
        self._waiting: dict[asyncio.Future[Any], float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeping: asyncio.TimerHandle | None = None

    def watch(
        self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], deadline: float
    ) -> None:
        self._waiting[future] = deadline
        if self._sweeping is None or self._loop is not loop:
            self._loop = loop
            self._sweeping = loop.call_later(SWEEP_S, self._sweep)

    def _sweep(self) -> None:
        """Answer the callers whose deadline falls before the next sweep; forget the
        answered ones (here rather than as each is answered: one pass for all)."""
        due = time.monotonic() + SWEEP_S  # by the next sweep it would be past its deadline
        waiting = self._waiting
        for future in [future for future in waiting if future.done()]:
            del waiting[future]
        for future in [future for future, deadline in waiting.items() if deadline <= due]:
            del waiting[future]
            future.set_exception(not_answering())
        loop = self._loop
        self._sweeping = None
        if self._waiting and loop is not None and not loop.is_closed():
            self._sweeping = loop.call_later(SWEEP_S, self._sweep)


def answer(outcomes: list[Outcome]) -> None:
    """Hand results back to each caller's event loop, one wake-up per loop, and to each other
    process, one message per process."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
    by_reply: dict[Reply, list[tuple[int, Any, BaseException | None]]] = {}
    for outcome in outcomes:
        job = outcome[0]
        if job.loop is not None:
            by_loop.setdefault(job.loop, []).append(outcome)
        elif job.reply is not None:
            by_reply.setdefault(job.reply, []).append((job.number, outcome[1], outcome[2]))
    for loop, items in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop has nobody waiting
            loop.call_soon_threadsafe(_resolve, items)
    for reply, answers in by_reply.items():
        reply.send(answers)


def _resolve(items: list[Outcome]) -> None:
    for job, result, error in items:
        future = job.future
        if future is None or future.done():  # the caller went away
            continue
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
