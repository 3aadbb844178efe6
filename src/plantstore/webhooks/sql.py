"""SQL both webhook stores run as written (``?`` placeholders; PostgreSQL's are numbered).

States in SQL are the numbers of ``store``: 0 due, 1 delivered, 2 failed.
"""

from __future__ import annotations

import re
from typing import Any

from .store import (
    DELIVERED,
    DUE,
    FAILED,
    FAILING_DAYS_BEFORE_DISABLE,
    AttemptResult,
    ClaimedDelivery,
    Outcome,
    SecretPair,
)

SUBSCRIPTION_COLUMNS = (
    "s.id, s.user_id, u.name, s.url, s.events, s.enabled, s.disabled_reason, s.created_at"
)
SUBSCRIPTIONS = (
    f"SELECT {SUBSCRIPTION_COLUMNS} FROM webhook_subscriptions s "  # noqa: S608 (constant columns)
    "JOIN users u ON u.id = s.user_id"
)
DELIVERY_COLUMNS = (
    "id, msg_id, event_type, plant_id, state, attempts, occurred_at, next_attempt_at, "
    "last_status, last_error, finished_at"
)
LIST_DELIVERIES = (
    f"SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries "  # noqa: S608 (constant columns)
    "WHERE subscription_id = ? ORDER BY id DESC LIMIT ?"
)
OWNS = "SELECT 1 FROM webhook_subscriptions WHERE id = ? AND user_id = ?"
DELETE = "DELETE FROM webhook_subscriptions WHERE user_id = ? AND id = ?"
SET_ENABLED = (
    "UPDATE webhook_subscriptions SET enabled = ?, disabled_reason = ?, failing_since = NULL "
    "WHERE id = ?"
)
ROTATE = (
    "UPDATE webhook_subscriptions SET previous_secret = secret, previous_secret_until = ?, "
    "secret = ? WHERE id = ?"
)
REDELIVER = (
    "UPDATE webhook_deliveries SET state = 0, next_attempt_at = ?, finished_at = NULL "
    "WHERE id = ? AND subscription_id = ? AND user_id = ?"
)
REDELIVER_FAILED = (
    "UPDATE webhook_deliveries SET state = 0, next_attempt_at = ?, finished_at = NULL "
    "WHERE subscription_id = ? AND state = 2 AND occurred_at >= ?"
)
SECRETS = (
    "SELECT id, url, secret, previous_secret, previous_secret_until "
    "FROM webhook_subscriptions WHERE id IN ({})"
)
CLAIMED_COLUMNS = (
    "id, subscription_id, msg_id, event_type, occurred_at, plant_id, name, tag, attempts, "
    "next_attempt_at"
)
# Only for a delivery still there (its subscription may have been deleted meanwhile).
INSERT_ATTEMPT = (
    "INSERT INTO webhook_attempts (delivery_id, attempted_at, status, error, duration) "
    "SELECT id, CAST(? AS DOUBLE PRECISION), CAST(? AS INTEGER), CAST(? AS TEXT), "
    "CAST(? AS DOUBLE PRECISION) FROM webhook_deliveries WHERE id = ?"
)
# A result holds only while its claim's lease does: still due, with the lease the claim set
# (another claim after the lease, a redelivery, a disabling all change one or the other).
UPDATE_DELIVERY = (
    "UPDATE webhook_deliveries SET state = ?, attempts = attempts + 1, next_attempt_at = ?, "
    "last_status = ?, last_error = ?, finished_at = ? "
    "WHERE id = ? AND state = 0 AND next_attempt_at = ?"
)
RELEASE_DELIVERY = (
    "UPDATE webhook_deliveries SET next_attempt_at = ? "
    "WHERE id = ? AND state = 0 AND next_attempt_at = ?"
)
SUCCEEDED = "UPDATE webhook_subscriptions SET failing_since = NULL WHERE id = ?"
FAILING = "UPDATE webhook_subscriptions SET failing_since = coalesce(failing_since, ?) WHERE id = ?"
DISABLE = (
    "UPDATE webhook_subscriptions SET enabled = ?, disabled_reason = ? WHERE id = ? AND enabled"
)
DISABLE_LONG_FAILING = (
    "UPDATE webhook_subscriptions SET enabled = ?, disabled_reason = ? "
    "WHERE id = ? AND enabled AND failing_since <= ?"
)
LONG_FAILING_REASON = f"failing for {FAILING_DAYS_BEFORE_DISABLE} days"
GONE_REASON = "the endpoint answered 410 Gone"
# A disabled subscription's due deliveries fail at once (re-enabling does not send them; the
# user's redeliver does), so no claim or due check walks them and retention prunes them.
DISABLED_ERROR = "the subscription was disabled"
FAIL_DUE_OF = (
    "UPDATE webhook_deliveries SET state = 2, last_error = ?, finished_at = ? "
    "WHERE state = 0 AND subscription_id = ?"
)
# ... and any left by a race (an event queued as its subscription was being disabled).
# (This and PRUNE_ATTEMPTS are SQLite's spelling; PostgreSQL's own is in ``postgres``.)
FAIL_DUE_OF_DISABLED = (
    "UPDATE webhook_deliveries SET state = 2, last_error = ?, finished_at = ? "
    "WHERE id IN (SELECT d.id FROM webhook_deliveries d "
    "JOIN webhook_subscriptions s ON s.id = d.subscription_id "
    "WHERE d.state = 0 AND NOT s.enabled LIMIT ?)"
)
# Pruning goes in bounded steps: attempts by their time index; deliveries (no index on when
# they finished) a chunk of ids at a time, oldest first, until a chunk is all newer events.
PRUNE_ATTEMPTS = (
    "DELETE FROM webhook_attempts WHERE id IN "
    "(SELECT id FROM webhook_attempts WHERE attempted_at < ? ORDER BY attempted_at LIMIT ?)"
)
DELIVERY_CHUNK = (
    "SELECT max(id), min(occurred_at), count(*) FROM "
    "(SELECT id, occurred_at FROM webhook_deliveries WHERE id > ? ORDER BY id LIMIT ?) chunk"
)
PRUNE_DELIVERIES = (
    "DELETE FROM webhook_deliveries WHERE id > ? AND id <= ? AND state <> 0 AND finished_at < ?"
)
ANY_DUE = (
    "SELECT 1 FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription_id "
    "WHERE d.state = 0 AND d.next_attempt_at <= ? AND s.enabled LIMIT 1"
)
OLDEST_DUE = (
    "SELECT min(d.occurred_at) FROM webhook_deliveries d "
    "JOIN webhook_subscriptions s ON s.id = d.subscription_id "
    "WHERE d.state = 0 AND s.enabled"
)


def numbered(query: str) -> str:
    """PostgreSQL's ``$1, $2, …`` for each ``?`` in turn."""
    counter = iter(range(1, 10_000))
    return re.sub(r"\?", lambda _: f"${next(counter)}", query)


class RecordRows:
    """The parameter rows ``record`` runs, grouped by statement."""

    def __init__(self, results: list[AttemptResult], now: float) -> None:
        self.attempts: list[tuple[object, ...]] = []
        self.deliveries: list[tuple[object, ...]] = []
        self.released: list[tuple[object, ...]] = []
        self.succeeded: list[tuple[object, ...]] = []
        self.failing: list[tuple[object, ...]] = []
        self.gone: list[tuple[bool, str, int]] = []
        self.check_long_failing: list[tuple[bool, str, int, float]] = []
        self.now = now
        long_ago = now - FAILING_DAYS_BEFORE_DISABLE * 86400
        for result in results:
            if result.outcome is Outcome.RELEASED:
                self.released.append(
                    (result.next_attempt_at, result.delivery_id, result.lease_until)
                )
                continue
            self._attempted(result, long_ago)

    def _attempted(self, result: AttemptResult, long_ago: float) -> None:
        finished = result.outcome is not Outcome.RETRY
        state = {Outcome.DELIVERED: DELIVERED, Outcome.RETRY: DUE}.get(result.outcome, FAILED)
        self.attempts.append(
            (
                result.attempted_at,
                result.status,
                result.error,
                result.duration,
                result.delivery_id,
            )
        )
        self.deliveries.append(
            (
                state,
                result.next_attempt_at,
                result.status,
                result.error,
                result.attempted_at if finished else None,
                result.delivery_id,
                result.lease_until,
            )
        )
        if result.outcome is Outcome.DELIVERED:
            self.succeeded.append((result.subscription_id,))
            return
        self.failing.append((result.attempted_at, result.subscription_id))
        if result.outcome is Outcome.GONE:
            self.gone.append((False, GONE_REASON, result.subscription_id))
        self.check_long_failing.append(
            (False, LONG_FAILING_REASON, result.subscription_id, long_ago)
        )

    def statements(self) -> list[tuple[str, list[tuple[object, ...]]]]:
        """In order: the failure record is updated before it is checked."""
        return [
            (INSERT_ATTEMPT, self.attempts),
            (UPDATE_DELIVERY, self.deliveries),
            (RELEASE_DELIVERY, self.released),
            (SUCCEEDED, sorted(set(self.succeeded))),
            (FAILING, self.failing),
        ]

    def disables(self) -> list[tuple[str, tuple[object, ...], int]]:
        """Run one at a time, after ``statements``: each that disables its subscription (the
        last parameter is its id) is followed by ``FAIL_DUE_OF`` for it."""
        gone = [(DISABLE, row, row[2]) for row in sorted(set(self.gone))]
        long_failing = [
            (DISABLE_LONG_FAILING, row, row[2]) for row in sorted(set(self.check_long_failing))
        ]
        return [*gone, *long_failing]

    def fail_due_of(self, subscription_id: int) -> tuple[object, ...]:
        return (DISABLED_ERROR, self.now, subscription_id)


def claimed_delivery(row: Any, targets: dict[int, tuple[str, SecretPair]]) -> ClaimedDelivery:
    """A claimed row (``CLAIMED_COLUMNS``: the event's fields, then the lease) with its
    subscription's URL and secrets, from ``targets`` by subscription id."""
    url, secrets = targets[row[1]]
    delivery_id, subscription_id, msg_id, event_type, occurred_at, plant_id = row[:6]
    name, tag, attempts, lease_until = row[6:]
    return ClaimedDelivery(
        delivery_id,
        subscription_id,
        msg_id,
        event_type,
        occurred_at,
        plant_id,
        name,
        tag,
        attempts,
        url,
        secrets,
        lease_until,
    )
