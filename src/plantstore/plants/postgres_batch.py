"""Group commit for PostgreSQL creates: the creates waiting at one moment share a transaction.

``quota.py``'s trigger counts each user's plants in ``users.plant_count``, and that
row's lock orders concurrent creates of one user, so the per-user quota holds across
instances. It also made every create of a user wait for the previous one's commit (a WAL
flush each): a busy client's creates ran one flush at a time, below a naive app's rate.

Here the creates that arrive while a batch is being written queue up and go together in
the next: one statement inserts them all (in ``(user, id)`` order, so instances batching at
once take user rows in one order and cannot deadlock), one commit flushes them. A batch
that hits the quota (the trigger aborts the statement) is written again one create at a
time, so each gets its own answer; so are creates the batch does not insert (the same id
twice in one batch, an id already taken, or one a racing instance took). A user
found at the quota has its creates written alone for the next ``_AT_QUOTA_SECONDS``, so a
client that keeps creating past its quota does not make every batch fail for the others.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from ..db.health import not_answering
from .quota import QUOTA_SQLSTATE
from .store import CreateOutcome, PlantRecord

_MAX_BATCH = 256
_AT_QUOTA_SECONDS = 1.0
# The rows this statement inserted. No read of the stored plants: such a join was planned
# once, on a small table, as a scan of it, and that plan then read the whole table for
# every batch. A create the statement did not insert (the id is taken, or a racing instance
# took it) is settled alone, by the one-create path.
# The quota's limit is set for the statement's own transaction, as in ``CREATE_PLANT``.
CREATE_MANY = """
WITH quota AS (SELECT set_config('plantstore.max_plants_per_user', $5, true))
INSERT INTO plants (user_id, id, name, tag)
SELECT user_id, id, name, tag
FROM quota, unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[])
    AS given (user_id, id, name, tag)
ORDER BY user_id, id
ON CONFLICT (user_id, id) DO NOTHING
RETURNING user_id, id
"""

Connection = Callable[[], AbstractAsyncContextManager[Any]]
CreateOne = Callable[[int, PlantRecord], Awaitable[CreateOutcome]]


@dataclass(slots=True)
class _Create:
    user_id: int
    plant: PlantRecord
    outcome: asyncio.Future[CreateOutcome] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class CreateBatcher:
    """Writes creates in batches on ``connection()``; ``create_one`` settles what a batch
    cannot."""

    def __init__(
        self, connection: Connection, create_one: CreateOne, timeout: float, quota: str
    ) -> None:
        """``timeout``: the longest a create waits for its answer, its turn included (then a
        503), as any other request waits for the database at most its budget. ``quota``: the
        per-user limit as the trigger reads it ('' for none)."""
        self._connection = connection
        self._quota = quota
        self._timeout = timeout
        self._create_one = create_one
        self._waiting: list[_Create] = []
        self._writing: asyncio.Task[None] | None = None
        self._at_quota: dict[int, float] = {}  # user id -> until when its creates go alone

    async def create(self, user_id: int, plant: PlantRecord) -> CreateOutcome:
        create = _Create(user_id, plant)
        self._waiting.append(create)
        loop = asyncio.get_running_loop()
        if self._writing is None:
            self._writing = loop.create_task(self._write_all())
        late = loop.call_later(self._timeout, _expire, create.outcome)
        try:
            return await create.outcome
        finally:
            late.cancel()

    async def _write_all(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting[:_MAX_BATCH], self._waiting[_MAX_BATCH:]
                await self._write(batch)
        finally:
            self._writing = None

    async def _write(self, batch: list[_Create]) -> None:
        first, repeats = _split_repeats(batch)
        at_quota = [self._is_at_quota(create.user_id) for create in first]
        alone = [create for create, held in zip(first, at_quota, strict=True) if held]
        first = [create for create, held in zip(first, at_quota, strict=True) if not held]
        try:
            unsettled = await self._insert(first) if len(first) > 1 else first
        except asyncpg.PostgresError as exc:
            if exc.sqlstate != QUOTA_SQLSTATE:
                _fail(batch, exc)
                return
            unsettled = first  # someone is at the quota: one by one, each its own answer
        except Exception as exc:  # an outage (a 503) or a fault: every create shares it
            _fail(batch, exc)
            return
        await asyncio.gather(*(self._settle_alone(create) for create in [*unsettled, *alone]))
        for create in repeats:
            await self._settle_alone(create)

    async def _insert(self, batch: list[_Create]) -> list[_Create]:
        """Insert the batch in one transaction; return the creates it could not settle."""
        columns = (
            [create.user_id for create in batch],
            [create.plant.plant_id for create in batch],
            [create.plant.name for create in batch],
            [create.plant.tag for create in batch],
        )
        async with self._connection() as connection, connection.transaction():
            rows = await connection.fetch(CREATE_MANY, *columns, self._quota)
        inserted = {(user_id, plant_id) for user_id, plant_id in rows}
        unsettled = []
        for create in batch:
            if (create.user_id, create.plant.plant_id) in inserted:
                _settle(create, CreateOutcome.CREATED)
            else:
                unsettled.append(create)  # its id is taken: the same plant, or a conflict
        return unsettled

    async def _settle_alone(self, create: _Create) -> None:
        try:
            outcome = await self._create_one(create.user_id, create.plant)
        except Exception as exc:
            _fail([create], exc)
            return
        if outcome is CreateOutcome.OVER_QUOTA:
            self._at_quota[create.user_id] = time.monotonic() + _AT_QUOTA_SECONDS
        _settle(create, outcome)

    def _is_at_quota(self, user_id: int) -> bool:
        until = self._at_quota.get(user_id)
        if until is None:
            return False
        if until > time.monotonic():
            return True
        del self._at_quota[user_id]
        return False


def _split_repeats(batch: list[_Create]) -> tuple[list[_Create], list[_Create]]:
    """The first create of each (user, id) in the batch, and the others (written after it)."""
    seen: set[tuple[int, int]] = set()
    first: list[_Create] = []
    repeats: list[_Create] = []
    for create in batch:
        key = (create.user_id, create.plant.plant_id)
        (repeats if key in seen else first).append(create)
        seen.add(key)
    return first, repeats


def _settle(create: _Create, outcome: CreateOutcome) -> None:
    if not create.outcome.done():  # its request may have gone away
        create.outcome.set_result(outcome)


def _expire(outcome: asyncio.Future[CreateOutcome]) -> None:
    if not outcome.done():  # still waiting for a batch before its own: the database is slow
        outcome.set_exception(not_answering())


def _fail(batch: list[_Create], exc: BaseException) -> None:
    for create in batch:
        if not create.outcome.done():
            create.outcome.set_exception(exc)
