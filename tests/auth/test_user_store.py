"""The users of identity providers in the store: made once however many callers race (two
store instances stand for two workers or instances), and apart from the operator's users."""

from __future__ import annotations

import asyncio

from plantstore.auth.store import OPERATOR
from plantstore.db.migrate import upgrade
from plantstore.settings import Settings
from tests.stores import Stores

ISSUER = "https://id.example.test"


async def opened(db_url: str) -> Stores:
    store = Stores(Settings(database_url=db_url, connect_timeout=5.0, statement_timeout=5.0))
    await store.open()
    return store


def test_racing_first_sights_make_one_user(db_url: str) -> None:
    upgrade(db_url)

    async def scenario() -> set[int]:
        stores = [await opened(db_url), await opened(db_url)]
        try:
            made = await asyncio.gather(
                *(stores[i % 2].tokens.create_user(ISSUER, "alice") for i in range(40))
            )
            return {record.user_id for record in made}
        finally:
            for store in stores:
                await store.close()

    assert len(asyncio.run(scenario())) == 1


def test_an_issuer_user_is_apart_from_the_operator_user_of_that_name(db_url: str) -> None:
    upgrade(db_url)

    async def scenario() -> tuple[int, int, int | None, list[tuple[str, str]]]:
        store = await opened(db_url)
        try:
            operator = await store.tokens.create_token("alice", "a" * 64, None)
            issued = await store.tokens.create_user(ISSUER, "alice")
            found = await store.tokens.find_user(ISSUER, "alice")
            listed = [(record.issuer, record.name) for record in await store.tokens.list_users()]
            return operator.user_id, issued.user_id, found.user_id if found else None, listed
        finally:
            await store.close()

    operator_id, issuer_id, found_id, listed = asyncio.run(scenario())
    assert operator_id != issuer_id
    assert found_id == issuer_id
    assert listed == [(OPERATOR, "alice"), (ISSUER, "alice")]


def test_disabling_is_reported_once_and_read_back(db_url: str) -> None:
    upgrade(db_url)

    async def scenario() -> list[object]:
        store = await opened(db_url)
        try:
            user = await store.tokens.create_user(ISSUER, "bob")
            steps: list[object] = [await store.tokens.set_user_disabled(user.user_id, True)]
            steps.append(await store.tokens.set_user_disabled(user.user_id, True))
            steps.append((await store.tokens.user_disabled_at(user.user_id)) is not None)
            steps.append(await store.tokens.set_user_disabled(user.user_id, False))
            steps.append(await store.tokens.user_disabled_at(user.user_id))
            return steps
        finally:
            await store.close()

    assert asyncio.run(scenario()) == [True, False, True, True, None]
