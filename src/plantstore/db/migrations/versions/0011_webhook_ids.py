"""One shape of ``webhook-id`` on both backends: ``msg_`` and 32 hex digits.

PostgreSQL's triggers made it from a random UUID (32 hex digits), SQLite's from 12 random
bytes (24): a receiver or client that checked the shape saw two. SQLite's triggers now take
16 random bytes. Events already queued keep their ids, which retries must repeat.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

CREATED, DELETED = 1, 2  # bits of webhook_subscriptions.events
_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_SQLITE_TRIGGER = """
CREATE TRIGGER plants_webhook_{name} AFTER {op} ON plants BEGIN
    INSERT INTO webhook_deliveries (subscription_id, user_id, msg_id, event_type, occurred_at,
        plant_id, name, tag, state, attempts, next_attempt_at)
    SELECT id, user_id, 'msg_' || lower(hex(randomblob({id_bytes}))), '{event}', {now},
        {row}.id, {row}.name, {row}.tag, 0, 0, {now}
    FROM webhook_subscriptions
    WHERE user_id = {row}.user_id AND enabled = 1 AND (events & {bit}) != 0;
END
"""


def _sqlite_triggers(id_bytes: int) -> None:
    for name, when, event, row, bit in (
        ("created", "INSERT", "plant.created", "NEW", CREATED),
        ("deleted", "DELETE", "plant.deleted", "OLD", DELETED),
    ):
        op.execute(f"DROP TRIGGER plants_webhook_{name}")
        op.execute(
            _SQLITE_TRIGGER.format(
                name=name,
                op=when,
                event=event,
                row=row,
                bit=bit,
                now=_SQLITE_NOW,
                id_bytes=id_bytes,
            )
        )


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_triggers(16)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_triggers(12)
