"""What the webhook stores hold and hand over; each backend implements ``WebhookStore``.

States of a delivery: ``DUE`` (waiting for its next attempt, or claimed: a claim pushes
``next_attempt_at`` a lease ahead), ``DELIVERED``, ``FAILED`` (retries spent, or 410, or its
subscription was disabled while it waited). The lease a claim set is the claim's fence: a
result is written only while the delivery is still due with that very ``next_attempt_at``, so
a result that comes after its lease was taken over (by another claim, or a redelivery) is
dropped rather than overwriting a newer one.
"""

from __future__ import annotations

import enum
from typing import Literal, Protocol

import msgspec

from .events import EventType

DUE, DELIVERED, FAILED = 0, 1, 2
StateName = Literal["pending", "delivered", "failed"]
STATE_NAMES: dict[int, StateName] = {DUE: "pending", DELIVERED: "delivered", FAILED: "failed"}
FAILING_DAYS_BEFORE_DISABLE = 5


class Subscription(msgspec.Struct, frozen=True):
    subscription_id: int
    user_id: int
    user: str
    url: str
    events: int  # bits: 1 plant.created, 2 plant.deleted
    enabled: bool
    disabled_reason: str | None
    created_at: float


class SecretPair(msgspec.Struct, frozen=True):
    """A subscription's signing secrets: during a rotation the old one signs too."""

    secret: str
    previous: str | None
    previous_until: float | None

    def in_use(self, now: float) -> tuple[str, ...]:
        previous, until = self.previous, self.previous_until
        if previous is not None and until is not None and now < until:
            return (self.secret, previous)
        return (self.secret,)


class ClaimedDelivery(msgspec.Struct, frozen=True):
    """A due delivery this dispatcher holds a lease on, with what it needs to send it."""

    delivery_id: int
    subscription_id: int
    msg_id: str
    event_type: EventType  # the plant triggers write no other
    occurred_at: float
    plant_id: int
    name: str
    tag: str | None
    attempts: int  # made before this one
    url: str
    secrets: SecretPair
    lease_until: float  # the ``next_attempt_at`` the claim set: its fence


class Outcome(enum.Enum):
    DELIVERED = "delivered"
    RETRY = "retry"  # failed; due again at ``next_attempt_at``
    FAILED = "failed"  # failed for the last time
    GONE = "gone"  # 410: failed, and the subscription is disabled
    RELEASED = "released"  # not attempted (shutting down): due again at once


class AttemptResult(msgspec.Struct, frozen=True):
    delivery_id: int
    subscription_id: int
    outcome: Outcome
    attempted_at: float
    duration: float
    status: int | None
    error: str | None
    next_attempt_at: float
    lease_until: float  # the claim's fence (``ClaimedDelivery.lease_until``)


class DeliveryRecord(msgspec.Struct, frozen=True):
    delivery_id: int
    msg_id: str
    event_type: EventType
    plant_id: int
    state: int
    attempts: int
    occurred_at: float
    next_attempt_at: float
    last_status: int | None
    last_error: str | None
    finished_at: float | None


class WebhookStore(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def create_subscription(
        self, user_id: int, url: str, events: int, secret: str, cap: int | None = None
    ) -> Subscription | None:
        """Create a subscription; None, and nothing created, when the user already holds
        ``cap`` of them (counted in the same write)."""

    async def list_subscriptions(
        self, user_id: int | None = None, user: str | None = None
    ) -> list[Subscription]: ...

    async def get_subscription(self, subscription_id: int) -> Subscription | None: ...

    async def delete_subscription(self, user_id: int, subscription_id: int) -> bool: ...

    async def set_enabled(self, subscription_id: int, enabled: bool, reason: str | None) -> bool:
        """Enable (clearing the failure record) or disable; tell whether it exists."""

    async def rotate_secret(self, subscription_id: int, secret: str, keep_old_until: float) -> bool:
        """Sign with ``secret`` from now on, and with the current one too until then."""

    async def list_deliveries(
        self, user_id: int, subscription_id: int, limit: int
    ) -> list[DeliveryRecord] | None:
        """The newest deliveries first; None if the subscription is not the user's."""

    async def redeliver(self, user_id: int, subscription_id: int, delivery_id: int) -> bool:
        """Make one of the user's deliveries due now, whatever its state."""

    async def redeliver_failed(
        self, user_id: int, subscription_id: int, since: float
    ) -> int | None:
        """Make every failed delivery of events since ``since`` due now; None if not the user's."""

    async def any_due(self, now: float) -> bool:
        """A cheap read: is any delivery due? (Claims are writes; idle polls need not be.)"""

    async def claim(
        self, now: float, limit: int, per_subscription: int, busy: list[int], lease: float
    ) -> list[ClaimedDelivery]:
        """Lease up to ``limit`` due deliveries of enabled subscriptions, at most
        ``per_subscription`` of each and none of ``busy``, until ``now + lease``."""

    async def record(self, results: list[AttemptResult], now: float) -> None:
        """Store attempts' outcomes (those whose claim still holds its lease), and disable
        subscriptions gone or failing for 5 days, failing their due deliveries."""

    async def prune_attempts(self, before: float, limit: int) -> int:
        """Delete at most ``limit`` attempt records older than ``before``: one bounded step."""

    async def prune_deliveries(
        self, before: float, after_id: int, limit: int
    ) -> tuple[int, int | None]:
        """Look at the next ``limit`` deliveries by id after ``after_id`` and delete those
        finished before ``before``: how many, and the id to go on after (None: done)."""

    async def fail_disabled(self, now: float, limit: int) -> int:
        """Fail at most ``limit`` due deliveries of disabled subscriptions (a race's leftovers)."""

    async def oldest_due(self) -> float | None:
        """When the oldest undelivered event of an enabled subscription happened."""
