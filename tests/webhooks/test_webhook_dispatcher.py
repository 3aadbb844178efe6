"""The dispatcher in process, over a real store and a real receiver on loopback: what it costs
a busy server with nothing to deliver, and that it still delivers while the server is busy."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any, cast

from plantstore.ops import metrics
from plantstore.plants.store import PlantRecord
from plantstore.webhooks.dispatcher import BUSY_REQUESTS, Dispatcher
from plantstore.webhooks.store import WebhookStore
from tests.fixtures.calls import run_cli
from tests.webhooks.test_webhook_store import new_subscription, with_stores
from tests.webhooks.webhook_receiver import receiver

EVENTS = 20


class CountingStore:
    """The real store, counting the dispatcher's due checks."""

    def __init__(self, store: WebhookStore) -> None:
        self._store = store
        self.due_checks = 0

    async def any_due(self, now: float) -> bool:
        self.due_checks += 1
        return await self._store.any_due(now)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_busy_server_with_nothing_due_checks_at_the_idle_rate_and_still_delivers(
    db_url: str,
) -> None:
    run_cli(db_url, "token", "create", "alice")
    secret = "whsec_" + base64.b64encode(bytes(range(32))).decode()

    async def work(store: Any, webhooks: WebhookStore) -> tuple[int, int]:
        [token] = await store.tokens.list_tokens("alice")
        counting = CountingStore(webhooks)
        dispatcher = Dispatcher(
            cast(WebhookStore, counting),
            retry_schedule="0s,1s",
            retention="30d",
            allow_private=True,
            concurrency=64,
            endpoint_concurrency=8,
        )
        for _ in range(BUSY_REQUESTS):  # as if that many requests were being served
            metrics.TALLY.started()
        try:
            await dispatcher.start()
            await asyncio.sleep(2.0)  # busy, no subscription: 100 looks of the governor
            idle_checks = counting.due_checks
            with receiver() as hook:
                await new_subscription(webhooks, token.user_id, hook.url, 3, secret)
                for plant_id in range(1, EVENTS + 1):
                    await store.plants.create_plant(token.user_id, PlantRecord(plant_id, "F", None))
                deadline = time.monotonic() + 30
                while len(hook.snapshot()) < EVENTS and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                delivered = len({m.headers["webhook-id"] for m in hook.snapshot()})
        finally:
            await dispatcher.stop()
            for _ in range(BUSY_REQUESTS):
                metrics.TALLY.finished()
        return idle_checks, delivered

    idle_checks, delivered = with_stores(db_url, work)
    # At the idle poll (every 0.5 s) about 5; at the governor's pace (every 20 ms) about 100.
    assert idle_checks <= 12
    assert delivered == EVENTS  # busy all along, and every event went out


def test_stop_ends_the_dispatcher_even_when_it_is_woken_at_that_moment(db_url: str) -> None:
    """A wake-up that lands as ``stop`` cancels the claim loop (an attempt finishing as the
    server stops) must not keep the loop running: the server's stop would wait for ever."""

    async def work(store: Any, webhooks: WebhookStore) -> bool:
        dispatcher = Dispatcher(
            webhooks,
            retry_schedule="0s",
            retention="30d",
            allow_private=True,
            concurrency=4,
            endpoint_concurrency=2,
        )
        await dispatcher.start()
        await asyncio.sleep(0.2)  # the claim loop found nothing and waits to be woken
        dispatcher.wake()
        try:
            async with asyncio.timeout(5):
                await dispatcher.stop()
        except TimeoutError:
            return False
        return True

    assert with_stores(db_url, work)
