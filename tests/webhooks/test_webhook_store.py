"""The webhook store on each backend, driven directly: the outbox triggers, claims and leases,
5-day disabling and retention pruning (what a live test cannot wait days for)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from plantstore.db.migrate import upgrade
from plantstore.plants.store import PlantRecord
from plantstore.settings import Settings
from plantstore.webhooks import pruning
from plantstore.webhooks.backends import webhook_store_for
from plantstore.webhooks.postgres import FAIL_DUE_OF_DISABLED, PRUNE_ATTEMPTS
from plantstore.webhooks.pruning import prune
from plantstore.webhooks.store import (
    DELIVERED,
    DUE,
    FAILED,
    AttemptResult,
    ClaimedDelivery,
    Outcome,
    Subscription,
    WebhookStore,
)
from tests import pg
from tests.fixtures.backends import run_sql
from tests.fixtures.calls import run_cli
from tests.stores import Stores

T = TypeVar("T")
DAY = 86400.0


async def new_subscription(
    webhooks: WebhookStore, user_id: int, url: str, events: int, secret: str
) -> Subscription:
    """A subscription made without a cap (which always makes one)."""
    created = await webhooks.create_subscription(user_id, url, events, secret)
    assert created is not None
    return created


def with_stores(db_url: str, work: Callable[..., Awaitable[T]]) -> T:
    async def run() -> T:
        store = Stores(Settings(database_url=db_url, connect_timeout=5, statement_timeout=5))
        await store.open()
        webhooks = webhook_store_for(store.database)
        await webhooks.open()
        try:
            return await work(store, webhooks)
        finally:
            await webhooks.close()
            await store.close()

    upgrade(db_url)
    return asyncio.run(run())


def test_triggers_queue_one_delivery_per_wanting_subscription(db_url: str) -> None:
    run_cli(db_url, "token", "create", "alice")
    run_cli(db_url, "token", "create", "bob")

    async def work(store: Stores, webhooks: WebhookStore) -> None:
        tokens = await store.tokens.list_tokens(None)
        alice = next(t.user_id for t in tokens if t.user == "alice")
        bob = next(t.user_id for t in tokens if t.user == "bob")
        both = await new_subscription(webhooks, alice, "http://a.example/", 3, "whsec_x")
        deletes = await new_subscription(webhooks, alice, "http://b.example/", 2, "whsec_y")
        await new_subscription(webhooks, bob, "http://c.example/", 3, "whsec_z")
        off = await new_subscription(webhooks, alice, "http://d.example/", 3, "whsec_w")
        await webhooks.set_enabled(off.subscription_id, False, "test")
        await store.plants.create_plant(alice, PlantRecord(1, "Fern", None))
        await store.plants.create_plant(alice, PlantRecord(1, "Fern", None))
        await store.plants.delete_plant(alice, 1)
        assert [
            (d.event_type, d.plant_id)
            for d in await webhooks.list_deliveries(alice, both.subscription_id, 10) or []
        ] == [
            ("plant.deleted", 1),
            ("plant.created", 1),  # the repeated create stored nothing, so it queued nothing
        ]
        assert [
            d.event_type
            for d in await webhooks.list_deliveries(alice, deletes.subscription_id, 10) or []
        ] == ["plant.deleted"]
        assert await webhooks.list_deliveries(alice, off.subscription_id, 10) == []
        assert await webhooks.list_deliveries(bob, both.subscription_id, 10) is None

    with_stores(db_url, work)


def test_claims_lease_and_failing_for_five_days_disables(db_url: str) -> None:
    run_cli(db_url, "token", "create", "alice")

    async def work(store: Stores, webhooks: WebhookStore) -> None:
        [token] = await store.tokens.list_tokens("alice")
        sub = await new_subscription(webhooks, token.user_id, "http://a.example/", 3, "whsec_x")
        await store.plants.create_plant(token.user_id, PlantRecord(1, "Fern", "t"))
        now = time.time()
        [claimed] = await webhooks.claim(now, 10, 10, [], 90.0)
        assert (claimed.plant_id, claimed.name, claimed.tag, claimed.attempts) == (
            1,
            "Fern",
            "t",
            0,
        )
        assert claimed.url == "http://a.example/"
        assert claimed.lease_until == now + 90.0
        assert await webhooks.claim(now, 10, 10, [], 90.0) == []  # leased
        [again] = await webhooks.claim(now + 91, 10, 10, [], 90.0)
        assert again.delivery_id == claimed.delivery_id  # ... until the lease runs out
        failed_at = now + 100
        retry = AttemptResult(
            again.delivery_id,
            sub.subscription_id,
            Outcome.RETRY,
            failed_at,
            0.1,
            500,
            None,
            failed_at + 5,
            again.lease_until,
        )
        await webhooks.record([retry], failed_at)
        assert (await webhooks.get_subscription(sub.subscription_id)).enabled  # type: ignore[union-attr]
        later = failed_at + 5 * DAY + 1
        [last] = await webhooks.claim(later, 10, 10, [], 90.0)
        retry = AttemptResult(
            last.delivery_id,
            sub.subscription_id,
            Outcome.RETRY,
            later,
            0.1,
            500,
            None,
            later + 5,
            last.lease_until,
        )
        await webhooks.record([retry], later)
        after = await webhooks.get_subscription(sub.subscription_id)
        assert after is not None
        assert not after.enabled
        assert after.disabled_reason == "failing for 5 days"
        [delivery] = await webhooks.list_deliveries(token.user_id, sub.subscription_id, 10) or []
        assert (delivery.attempts, delivery.last_status) == (2, 500)
        # Disabled: its due delivery failed with it, so no claim or due check walks it.
        assert (delivery.state, delivery.last_error) == (FAILED, "the subscription was disabled")

    with_stores(db_url, work)


def test_old_attempts_and_finished_deliveries_are_pruned(db_url: str) -> None:
    run_cli(db_url, "token", "create", "alice")

    async def work(store: Stores, webhooks: WebhookStore) -> None:
        [token] = await store.tokens.list_tokens("alice")
        sub = await new_subscription(webhooks, token.user_id, "http://a.example/", 3, "whsec_x")
        for plant_id in (1, 2):
            await store.plants.create_plant(token.user_id, PlantRecord(plant_id, "F", None))
        now = time.time()
        first, second = await webhooks.claim(now, 10, 10, [], 90.0)
        old = now - 40 * DAY
        await webhooks.record(
            [
                AttemptResult(
                    first.delivery_id,
                    sub.subscription_id,
                    Outcome.DELIVERED,
                    old,
                    0.1,
                    200,
                    None,
                    old,
                    first.lease_until,
                ),
                AttemptResult(
                    second.delivery_id,
                    sub.subscription_id,
                    Outcome.RETRY,
                    now,
                    0.1,
                    503,
                    None,
                    now + 5,
                    second.lease_until,
                ),
            ],
            now,
        )
        run = await prune(webhooks, now - 30 * DAY)
        assert run.rows == 2  # the old attempt and its finished delivery
        remaining = await webhooks.list_deliveries(token.user_id, sub.subscription_id, 10) or []
        assert [d.delivery_id for d in remaining] == [second.delivery_id]

    with_stores(db_url, work)


def result(
    claimed: ClaimedDelivery, outcome: Outcome, at: float, status: int | None = 200
) -> AttemptResult:
    return AttemptResult(
        claimed.delivery_id,
        claimed.subscription_id,
        outcome,
        at,
        0.1,
        status,
        None,
        at + 5 if outcome is Outcome.RETRY else at,
        claimed.lease_until,
    )


def test_a_result_that_lost_its_lease_does_not_overwrite_a_newer_one(db_url: str) -> None:
    run_cli(db_url, "token", "create", "alice")

    async def work(store: Stores, webhooks: WebhookStore) -> None:
        [token] = await store.tokens.list_tokens("alice")
        user = token.user_id
        sub = await new_subscription(webhooks, user, "http://a.example/", 3, "whsec_x")

        async def states() -> dict[int, tuple[int, int]]:
            found = await webhooks.list_deliveries(user, sub.subscription_id, 10) or []
            return {d.delivery_id: (d.state, d.attempts) for d in found}

        await store.plants.create_plant(user, PlantRecord(1, "F", None))
        now = time.time()
        [first] = await webhooks.claim(now, 10, 10, [], 90.0)
        [second] = await webhooks.claim(now + 91, 10, 10, [], 90.0)  # the lease taken over
        delivery = first.delivery_id
        # The first claim's late results (a 2xx, a shutdown's release) change nothing.
        await webhooks.record([result(first, Outcome.DELIVERED, now + 95)], now + 95)
        await webhooks.record([result(first, Outcome.RELEASED, now + 95)], now + 95)
        assert (await states())[delivery] == (DUE, 0)
        assert await webhooks.claim(now + 100, 10, 10, [], 90.0) == []  # still the second's
        await webhooks.record([result(second, Outcome.DELIVERED, now + 100)], now + 100)
        assert (await states())[delivery] == (DELIVERED, 1)
        # ... nor can a failure of the first come after and overwrite the delivery.
        await webhooks.record([result(first, Outcome.FAILED, now + 101, 500)], now + 101)
        assert (await states())[delivery] == (DELIVERED, 1)

        # A redelivery asked for while an attempt is in flight is not lost to its result.
        await store.plants.create_plant(user, PlantRecord(2, "G", None))
        now = time.time()
        [attempt] = await webhooks.claim(now, 10, 10, [], 90.0)
        assert await webhooks.redeliver(user, sub.subscription_id, attempt.delivery_id)
        await webhooks.record([result(attempt, Outcome.FAILED, now + 1, 500)], now + 1)
        assert (await states())[attempt.delivery_id] == (DUE, 0)
        [redelivery] = await webhooks.claim(time.time() + 1, 10, 10, [], 90.0)
        assert redelivery.delivery_id == attempt.delivery_id

    with_stores(db_url, work)


def test_disabling_a_subscription_fails_its_due_deliveries(db_url: str) -> None:
    run_cli(db_url, "token", "create", "alice")

    async def work(store: Stores, webhooks: WebhookStore) -> None:
        [token] = await store.tokens.list_tokens("alice")
        user = token.user_id
        gone = await new_subscription(webhooks, user, "http://a.example/", 3, "whsec_x")
        off = await new_subscription(webhooks, user, "http://b.example/", 3, "whsec_y")
        for plant_id in (1, 2):
            await store.plants.create_plant(user, PlantRecord(plant_id, "F", None))
        now = time.time()
        answered = [c for c in await webhooks.claim(now, 1, 1, [], 90.0)]
        assert [c.subscription_id for c in answered] == [gone.subscription_id]
        await webhooks.record([result(answered[0], Outcome.GONE, now, 410)], now)
        assert await webhooks.set_enabled(off.subscription_id, False, "by an operator")
        for sub in (gone, off):
            found = await webhooks.list_deliveries(user, sub.subscription_id, 10) or []
            assert len(found) == 2
            assert {d.state for d in found} == {FAILED}
        later = now + DAY
        assert not await webhooks.any_due(later)
        assert await webhooks.oldest_due() is None
        assert await webhooks.claim(later, 10, 10, [], 90.0) == []
        # Re-enabled, it does not send them; the user's redeliver does.
        assert await webhooks.set_enabled(off.subscription_id, True, None)
        assert await webhooks.claim(later, 10, 10, [], 90.0) == []
        assert await webhooks.redeliver_failed(user, off.subscription_id, now - DAY) == 2
        assert len(await webhooks.claim(later, 10, 10, [], 90.0)) == 2

    with_stores(db_url, work)


def test_pruning_many_rows_goes_in_bounded_steps_and_keeps_newer_ones(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_cli(db_url, "token", "create", "alice")
    monkeypatch.setattr(pruning, "STEP_ROWS", 50)
    old_count, new_count = 420, 30
    now = time.time()
    old = now - 40 * DAY

    async def make(store: Stores, webhooks: WebhookStore) -> int:
        [token] = await store.tokens.list_tokens("alice")
        sub = await new_subscription(webhooks, token.user_id, "http://a.example/", 3, "x")
        for start in range(1, old_count + new_count + 1, 50):
            await asyncio.gather(
                *(
                    store.plants.create_plant(token.user_id, PlantRecord(i, "F", None))
                    for i in range(start, min(start + 50, old_count + new_count + 1))
                )
            )
        return sub.subscription_id

    subscription_id = with_stores(db_url, make)
    # The first ones' events happened, were delivered and attempted 40 days ago; one old event
    # is still due (retrying), and the newer ones delivered now.
    run_sql(
        db_url,
        f"UPDATE webhook_deliveries SET occurred_at = {old}, state = {DELIVERED}, "
        f"finished_at = {old} WHERE plant_id <= {old_count}",
    )
    run_sql(db_url, f"UPDATE webhook_deliveries SET state = {DUE} WHERE plant_id = 7")
    run_sql(
        db_url,
        f"UPDATE webhook_deliveries SET state = {DELIVERED}, finished_at = {now} "
        f"WHERE plant_id > {old_count}",
    )
    run_sql(
        db_url,
        "INSERT INTO webhook_attempts (delivery_id, attempted_at, status, duration) "
        f"SELECT id, CASE WHEN plant_id <= {old_count} THEN {old} ELSE {now} END, 200, 0.1 "
        "FROM webhook_deliveries",
    )

    async def work(store: Stores, webhooks: WebhookStore) -> None:
        [token] = await store.tokens.list_tokens("alice")
        run = await prune(webhooks, now - 30 * DAY)
        # old_count attempts, then old_count - 1 deliveries (not the one still due)
        assert run.rows == 2 * old_count - 1
        assert run.steps >= (2 * old_count) // 50  # none bigger than a step's rows
        left = await webhooks.list_deliveries(token.user_id, subscription_id, 1000) or []
        assert sorted(d.plant_id for d in left) == [7, *range(old_count + 1, old_count + 31)]
        assert (await prune(webhooks, now - 30 * DAY)).rows == 0

    with_stores(db_url, work)


def test_a_user_purged_takes_subscriptions_and_deliveries_along(db_url: str) -> None:
    run_cli(db_url, "token", "create", "alice")

    async def work(store: Stores, webhooks: WebhookStore) -> None:
        [token] = await store.tokens.list_tokens("alice")
        await new_subscription(webhooks, token.user_id, "http://a.example/", 3, "whsec_x")
        await store.plants.create_plant(token.user_id, PlantRecord(1, "F", None))

    with_stores(db_url, work)
    purge = ("DELETE FROM plants", "DELETE FROM tokens", "DELETE FROM users")
    if db_url.startswith("sqlite:///"):  # as the service's connections are: foreign keys on
        with contextlib.closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as conn:
            conn.execute("PRAGMA foreign_keys = ON")
            for statement in purge:
                conn.execute(statement)
            conn.commit()
    else:
        for statement in purge:
            run_sql(db_url, statement)

    async def check(store: Stores, webhooks: WebhookStore) -> None:
        assert await webhooks.list_subscriptions() == []
        assert await webhooks.oldest_due() is None
        assert await webhooks.claim(time.time() + DAY, 10, 10, [], 90.0) == []

    with_stores(db_url, check)


@pytest.mark.parametrize(
    ("statement", "arguments"),
    [(PRUNE_ATTEMPTS, "1.0, 1000"), (FAIL_DUE_OF_DISABLED, "'disabled', 1.0, 1000")],
    ids=["prune attempts", "fail due of disabled"],
)
def test_bounded_steps_read_no_whole_table_whatever_their_plan(
    postgres: pg.PostgresServer, statement: str, arguments: str
) -> None:
    """A step that deletes or fails a chunk chosen by a subquery reads the chunk, not the
    table, in the plan PostgreSQL keeps for it: as ``id IN (subquery)``, that plan scanned
    every attempt ever kept, for every step of a prune."""
    url = postgres.create_database()
    upgrade(url)
    plan = pg.generic_plan(url, statement, arguments)
    assert "Seq Scan on webhook_attempts" not in plan, plan
    assert "Seq Scan on webhook_deliveries" not in plan, plan
