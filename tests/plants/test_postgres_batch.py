"""PostgreSQL creates in batches (plants/postgres_batch.py): creates waiting together share one
transaction, and every one still gets the answer it would get alone."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from plantstore.db.migrate import upgrade
from plantstore.plants.postgres import (
    CREATE_PLANT,
    DELETE_PLANT,
    FIND_PLANT,
    LIST_AFTER,
    LIST_FIRST,
)
from plantstore.plants.postgres_batch import CREATE_MANY
from plantstore.plants.store import CreateOutcome, PlantRecord
from plantstore.settings import Settings
from tests import pg
from tests.stores import Stores

CREATED, UNCHANGED, CONFLICT = (
    CreateOutcome.CREATED,
    CreateOutcome.UNCHANGED,
    CreateOutcome.CONFLICT,
)


def open_store(postgres: pg.PostgresServer, **options: int) -> tuple[str, Stores]:
    url = postgres.create_database()
    upgrade(url)
    return url, Stores(Settings(database_url=url, **options))  # type: ignore[arg-type]


def test_racing_creates_stop_exactly_at_the_quota(postgres: pg.PostgresServer) -> None:
    url, store = open_store(postgres, max_plants_per_user=50)

    async def scenario() -> tuple[Counter[CreateOutcome], list[CreateOutcome]]:
        await store.open()
        try:
            user = await store.tokens.create_token("alice", "a" * 64, None)
            other = await store.tokens.create_token("zoe", "z" * 64, None)
            creates = (
                store.plants.create_plant(user.user_id, PlantRecord(i, "n", None))
                for i in range(200)
            )
            first = Counter(await asyncio.gather(*creates))
            # alice, now known to be at the quota, batched with a user who is not
            mixed = [
                store.plants.create_plant(user.user_id, PlantRecord(500 + i, "n", None))
                for i in range(5)
            ]
            mixed += [
                store.plants.create_plant(other.user_id, PlantRecord(i, "n", None))
                for i in range(5)
            ]
            return first, await asyncio.gather(*mixed)
        finally:
            await store.close()

    first, mixed = asyncio.run(scenario())
    assert first == {CREATED: 50, CreateOutcome.OVER_QUOTA: 150}
    assert mixed == [CreateOutcome.OVER_QUOTA] * 5 + [CREATED] * 5
    counts = pg.run_sql(url, "SELECT name, plant_count FROM users ORDER BY name")[0]
    assert counts == [("alice", 50), ("zoe", 5)]


def test_repeats_and_conflicts_within_one_batch(postgres: pg.PostgresServer) -> None:
    url, store = open_store(postgres)

    async def scenario() -> tuple[list[CreateOutcome], list[CreateOutcome]]:
        await store.open()
        try:
            user = (await store.tokens.create_token("bob", "b" * 64, None)).user_id
            first = [
                store.plants.create_plant(user, PlantRecord(7, "fern", "green")) for _ in range(4)
            ]
            first.append(store.plants.create_plant(user, PlantRecord(7, "fern", None)))  # differs
            first += [
                store.plants.create_plant(user, PlantRecord(i, "ivy", None)) for i in range(8, 40)
            ]
            batch = await asyncio.gather(*first)
            again = [  # odd ids as stored, even ids with another name
                store.plants.create_plant(user, PlantRecord(i, "ivy" if i % 2 else "moss", None))
                for i in range(8, 40)
            ]
            return batch, await asyncio.gather(*again)
        finally:
            await store.close()

    batch, again = asyncio.run(scenario())
    assert batch[:5] == [CREATED, UNCHANGED, UNCHANGED, UNCHANGED, CONFLICT]
    assert batch[5:] == [CREATED] * 32
    assert again == [CONFLICT if i % 2 == 0 else UNCHANGED for i in range(8, 40)]
    rows = pg.run_sql(url, "SELECT id, name, tag FROM plants WHERE id = 7")[0]
    assert rows == [(7, "fern", "green")]


def test_users_batched_together_each_get_their_own_plants(postgres: pg.PostgresServer) -> None:
    url, store = open_store(postgres)

    async def scenario() -> list[CreateOutcome]:
        await store.open()
        try:
            users = [
                (await store.tokens.create_token(n, n[0] * 64, None)).user_id for n in ("c", "d")
            ]
            return await asyncio.gather(
                *(
                    store.plants.create_plant(users[i % 2], PlantRecord(i // 2, f"p{i}", None))
                    for i in range(60)
                )
            )
        finally:
            await store.close()

    assert asyncio.run(scenario()) == [CREATED] * 60
    counts = pg.run_sql(url, "SELECT name, plant_count FROM users ORDER BY name")[0]
    assert counts == [("c", 30), ("d", 30)]


# Each plant statement with arguments of its parameters' types (a generic plan sees no values).
STATEMENTS = {
    "batch": (CREATE_MANY, "'{1}', '{7}', '{fern}', '{green}', '3'"),
    "create": (CREATE_PLANT, "1, 7, 'fern', 'green', '3'"),
    "find": (FIND_PLANT, "1, 7"),
    "list": (LIST_FIRST, "1, 10"),
    "list_after": (LIST_AFTER, "1, 7, 10"),
    "delete": (DELETE_PLANT, "1, 7"),
}


@pytest.mark.parametrize("name", STATEMENTS)
def test_no_plant_statement_scans_every_plant_whatever_its_plan(
    postgres: pg.PostgresServer, name: str
) -> None:
    """Each statement's plan, generic as a server's cached statement is, reads plants by key.

    The batch once joined the stored plants, and its cached plan, made on a small table,
    scanned all of them for every batch: creates fell to half their rate as the table grew.
    """
    statement, arguments = STATEMENTS[name]
    url, _ = open_store(postgres)
    plan = pg.generic_plan(url, statement, arguments)
    assert "Seq Scan on plants" not in plan, plan
    assert "plants_pkey" in plan or name == "batch", plan
