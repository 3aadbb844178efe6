"""The dispatcher: one asyncio task per serving process that claims due deliveries and
sends them, never holding a transaction while it waits on a receiver.

Claims lease deliveries for ``LEASE`` seconds, so a dispatcher that dies leaves its claims
to whoever claims after the lease. Concurrency is bounded overall (``webhook_concurrency``
claimed and unfinished) and per subscription (``webhook_endpoint_concurrency`` in flight,
eight times that claimed, so that one claim feeds a fast receiver for a while): a receiver
that hangs holds only its own slots. A claimed delivery whose lease would run out before its
attempt could finish (queued behind a hanging receiver) is not sent: it falls due again with
its lease, so another claim never races it. Results are written in batches, by one
recorder task, so on SQLite many results share one commit.

Requests come first: the dispatcher shares its process's event loop with the API. A governor
looks every 20 ms; while requests queue up (``BUSY_REQUESTS`` or more in flight), the
attempts it may hold are halved, down to one, and it claims once per look as long as claims
find work; when the queue clears, they grow back to ``webhook_concurrency``. A saturated
server so keeps most of its request rate and delivers at a trickle; the backlog goes out at
full speed as soon as the load eases (bench/webhooks_phase.py measures both). The deferral
is bounded: once the oldest undelivered event is ``MAX_DEFERRAL`` seconds old, the
dispatcher takes its full share again, so a server that is busy for good (or slow on a remote
database, where requests wait without using the CPU) still delivers. A claim that finds
nothing (no subscription anywhere, nothing due) sends the dispatcher back to its idle poll,
busy or not: a saturated server with nothing to deliver pays two cheap reads a second for
webhooks, not fifty (on PostgreSQL, each a pool connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

import structlog

from ..errors import StoreUnavailable
from ..formats import parse_duration, parse_schedule
from ..ops import metrics
from ..ops.logs import AccessLog
from ..settings import Settings
from .answer import TOTAL_TIMEOUT, Answer
from .attempt_log import log_attempt, origin
from .events import event_body
from .pruning import prune
from .retry import outcome_of, retry_delay
from .signing import signed_headers
from .store import AttemptResult, ClaimedDelivery, Outcome, WebhookStore

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("plantstore.webhooks")

IDLE_POLL = 0.5  # seconds between checks for due deliveries when there is nothing to do
QUEUE_FACTOR = 8  # claimed per subscription, per attempt it may have in flight
LEASE = 90.0  # seconds a claim is held: a dead dispatcher's claims wait this long
RECORD_TRIES = 3  # a batch of results that fails this often for a reason but an outage is dropped
LEASE_MARGIN = 5.0  # seconds an attempt must have in hand beyond its 15 s timeout
SHUTDOWN_GRACE = 2.0  # attempts in flight get this long to finish when the server stops
HOUSEKEEPING_EVERY = 5.0  # the oldest-undelivered gauge
PRUNE_EVERY = 3600.0
GOVERNOR_EVERY = 0.02  # seconds between looks at the requests in flight
BUSY_REQUESTS = 8  # this many requests in flight at once: the process has no room to spare
MAX_DEFERRAL = 30.0  # ... but an event this old is sent at full speed all the same


class Dispatcher:
    def __init__(
        self,
        store: WebhookStore,
        *,
        retry_schedule: str,
        retention: str,
        allow_private: bool,
        concurrency: int,
        endpoint_concurrency: int,
        lines: AccessLog | None = None,
    ) -> None:
        self._store = store
        self._lines = lines  # where attempt lines go; None: not logged (level above info)
        self._schedule = parse_schedule(retry_schedule)
        self._retention = parse_duration(retention)
        self._allow_private = allow_private
        self._capacity = concurrency
        self._allowed = concurrency  # the governor's share of it, just now
        self._oldest_age = 0.0  # seconds, as housekeeping last saw it
        self._endpoint_concurrency = endpoint_concurrency
        self._outstanding: dict[int, int] = {}  # per subscription: claimed, not finished
        self._gates: dict[int, asyncio.Semaphore] = {}
        self._attempts: set[asyncio.Task[None]] = set()
        self._results: list[AttemptResult] = []
        self._results_waiting = asyncio.Event()
        self._progress = asyncio.Event()  # an attempt finished, or someone woke us
        self._starved = False  # the last claim was held back by the governor's share
        self._session: aiohttp.ClientSession | None = None
        self._loops: list[asyncio.Task[None]] = []
        self._warned: set[int] = set()  # subscriptions whose refused receiver was logged

    async def start(self) -> None:
        self._loops = [
            asyncio.create_task(self._claim_loop(), name="webhook-claims"),
            asyncio.create_task(self._record_loop(), name="webhook-results"),
            asyncio.create_task(self._housekeeping_loop(), name="webhook-housekeeping"),
            asyncio.create_task(self._governor_loop(), name="webhook-governor"),
            asyncio.create_task(self._prune_loop(), name="webhook-pruning"),
        ]

    def wake(self) -> None:
        """Look for due deliveries now (after a local change may have queued some)."""
        self._progress.set()

    async def stop(self) -> None:
        """Stop claiming, let attempts in flight finish briefly, release the rest's leases,
        and write every result before the store closes."""
        claims, recorder, *others = self._loops
        for task in (claims, *others):
            task.cancel()
        await asyncio.gather(claims, *others, return_exceptions=True)
        if self._attempts:
            _, unfinished = await asyncio.wait(self._attempts, timeout=SHUTDOWN_GRACE)
            for task in unfinished:
                task.cancel()
            await asyncio.gather(*unfinished, return_exceptions=True)
        recorder.cancel()
        await asyncio.gather(recorder, return_exceptions=True)
        await self._flush()
        if self._session is not None:
            await self._session.close()

    async def _claim_loop(self) -> None:
        while True:
            try:
                claimed = await self._claim_once()
            except asyncio.CancelledError:
                raise
            except StoreUnavailable:
                claimed = None  # the store logs outages itself; try again at the next poll
            except Exception:
                log.exception("claiming webhook deliveries failed; trying again shortly")
                claimed = None
            if claimed and self._allowed < self._capacity:  # the API is busy: one claim per look
                await asyncio.sleep(GOVERNOR_EVERY)
                continue
            if claimed and self._starved:
                continue  # a full batch: there may be more, claim again at once
            self._progress.clear()
            # Not ``wait_for``: on Python 3.11 it swallows a cancellation that arrives as the
            # event is set, and ``stop`` would then wait for this loop for ever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(IDLE_POLL):
                    await self._progress.wait()

    async def _claim_once(self) -> int:
        """Claim what there is room for: how many came back. ``_starved`` tells whether the
        room ran out (none left, or a full batch came back)."""
        self._starved = False
        free = self._allowed - sum(self._outstanding.values())
        if free <= 0:
            self._starved = True
            return 0
        now = time.time()
        if not await self._store.any_due(now):
            return 0
        depth = self._endpoint_concurrency * QUEUE_FACTOR
        busy = [sub for sub, count in self._outstanding.items() if count >= depth]
        claimed = await self._store.claim(now, free, depth, busy, LEASE)
        for delivery in claimed:
            self._start_attempt(delivery)
        self._starved = len(claimed) == free
        return len(claimed)

    def _start_attempt(self, delivery: ClaimedDelivery) -> None:
        sub = delivery.subscription_id
        self._outstanding[sub] = self._outstanding.get(sub, 0) + 1
        task = asyncio.create_task(self._attempt(delivery, delivery.lease_until))
        self._attempts.add(task)
        task.add_done_callback(self._attempts.discard)

    async def _attempt(self, delivery: ClaimedDelivery, lease_until: float) -> None:
        sub = delivery.subscription_id
        try:
            gate = self._gates.setdefault(sub, asyncio.Semaphore(self._endpoint_concurrency))
            async with gate:
                if time.time() + TOTAL_TIMEOUT + LEASE_MARGIN > lease_until:
                    return  # too late to finish within the lease: it falls due with it
                result = await self._send(delivery)
        except asyncio.CancelledError:
            now = time.time()
            released = Outcome.RELEASED
            self._add_result(
                AttemptResult(
                    delivery.delivery_id,
                    sub,
                    released,
                    now,
                    0.0,
                    None,
                    None,
                    now,
                    delivery.lease_until,
                )
            )
            raise
        finally:
            self._outstanding[sub] -= 1
            if not self._outstanding[sub]:
                del self._outstanding[sub]
                self._gates.pop(sub, None)
            self._progress.set()
        self._add_result(result)

    async def _send(self, delivery: ClaimedDelivery) -> AttemptResult:
        from .client import new_session, post  # aiohttp loads with the first delivery

        if self._session is None:
            self._session = new_session(self._allow_private)
        now = time.time()
        body = event_body(
            delivery.event_type,
            delivery.occurred_at,
            delivery.plant_id,
            delivery.name,
            delivery.tag,
        )
        headers = signed_headers(delivery.secrets.in_use(now), delivery.msg_id, int(now), body)
        answer = await post(self._session, delivery.url, headers, body, self._allow_private)
        return self._judge(delivery, answer, now)

    def _judge(self, delivery: ClaimedDelivery, answer: Answer, now: float) -> AttemptResult:
        outcome = outcome_of(answer, delivery.attempts, self._schedule)
        next_at = now
        if outcome is Outcome.RETRY:
            next_at = now + retry_delay(answer, delivery.attempts, self._schedule, now)
        metrics.observe_attempt(outcome.value, answer.duration)
        if self._lines is not None:
            log_attempt(self._lines, delivery, answer, outcome)
        refused = (answer.error or "").startswith("refused")  # by the address rule
        if refused and delivery.subscription_id not in self._warned:
            self._refused_receiver(delivery, answer)
        return AttemptResult(
            delivery.delivery_id,
            delivery.subscription_id,
            outcome,
            now,
            answer.duration,
            answer.status,
            answer.error,
            next_at,
            delivery.lease_until,
        )

    def _refused_receiver(self, delivery: ClaimedDelivery, answer: Answer) -> None:
        """A warning, once per subscription and process, where the address rule stops one.

        Said at delivery, not at start: a start would have to resolve every receiver's name,
        and a name may resolve elsewhere later. A subscription made while the rule was lifted
        (PLANTSTORE_WEBHOOK_ALLOW_PRIVATE) is otherwise only retried until it fails.
        """
        self._warned.add(delivery.subscription_id)
        structlog.get_logger(log.name).warning(
            f"webhook subscription {delivery.subscription_id} is not delivered: "
            f"{answer.error}. Only a server with PLANTSTORE_WEBHOOK_ALLOW_PRIVATE=true "
            "delivers to loopback, private and other non-global addresses",
            subscription_id=delivery.subscription_id,
            origin=origin(delivery.url),
        )

    def _add_result(self, result: AttemptResult) -> None:
        self._results.append(result)
        self._results_waiting.set()

    async def _record_loop(self) -> None:
        failures = 0
        while True:
            await self._results_waiting.wait()
            self._results_waiting.clear()
            try:
                await self._flush()
            except asyncio.CancelledError:
                raise
            except StoreUnavailable:
                await asyncio.sleep(IDLE_POLL)  # kept until the database is back
                self._results_waiting.set()
            except Exception:
                failures += 1
                if failures >= RECORD_TRIES:  # not an outage: give up on these, not on all
                    log.exception("recording webhook results failed; their leases will expire")
                    self._results.clear()
                    failures = 0
                await asyncio.sleep(IDLE_POLL)
                self._results_waiting.set()
            else:
                failures = 0

    async def _flush(self) -> None:
        """Write the results gathered so far; on failure keep them for the next try (their
        leases also expire, so at worst a delivered event is sent again)."""
        results, self._results = self._results, []
        if results:
            try:
                await self._store.record(results, time.time())
            except BaseException:
                self._results[:0] = results
                raise

    async def _governor_loop(self) -> None:
        while True:
            await asyncio.sleep(GOVERNOR_EVERY)
            queued = metrics.TALLY.in_flight >= BUSY_REQUESTS
            if queued and self._oldest_age < MAX_DEFERRAL:
                self._allowed = max(1, self._allowed // 2)
            elif self._allowed < self._capacity:
                self._allowed = min(self._capacity, self._allowed * 2)
                if self._starved:  # a claim wanted more room than it had: it has more now
                    self._progress.set()

    async def _housekeeping_loop(self) -> None:
        while True:
            try:
                oldest = await self._store.oldest_due()
                self._oldest_age = 0.0 if oldest is None else time.time() - oldest
                metrics.WEBHOOK_OLDEST_UNDELIVERED.set(self._oldest_age)
            except asyncio.CancelledError:
                raise
            except StoreUnavailable:
                pass  # logged by the store
            except Exception:
                log.exception("webhook housekeeping failed")
            await asyncio.sleep(HOUSEKEEPING_EVERY)

    async def _prune_loop(self) -> None:
        """Every ``PRUNE_EVERY``, in bounded steps with rests between (see ``pruning``)."""
        while True:
            try:
                now = time.time()
                run = await prune(self._store, now - self._retention, now)
                if run.rows:
                    log.info(
                        "pruned %d webhook records older than the retention (%d steps, "
                        "the longest %.1f ms)",
                        run.rows,
                        run.steps,
                        run.longest_step_s * 1000,
                    )
            except asyncio.CancelledError:
                raise
            except StoreUnavailable:
                pass  # logged by the store
            except Exception:
                log.exception("pruning webhook records failed")
            await asyncio.sleep(PRUNE_EVERY)


def new_dispatcher(
    store: WebhookStore, settings: Settings, lines: AccessLog | None = None
) -> Dispatcher:
    return Dispatcher(
        store,
        retry_schedule=settings.webhook_retry_schedule,
        retention=settings.webhook_retention,
        allow_private=settings.webhook_allow_private,
        concurrency=settings.webhook_concurrency,
        endpoint_concurrency=settings.webhook_endpoint_concurrency,
        lines=lines,
    )
