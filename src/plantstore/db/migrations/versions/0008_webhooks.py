"""Webhook subscriptions, their deliveries (the outbox) and each delivery's attempts.

Triggers on ``plants`` write one delivery per enabled subscription of the plant's owner that
wants the event, in the statement's own transaction: an event exists iff its change was
committed, on both backends, whatever path wrote the plant (the SQLite writer's group
commit, PostgreSQL's batched insert). With no subscription a change costs one indexed lookup.

A delivery holds the event as it was at the change (type, time, id, name, tag) and its
``webhook-id`` (``msg_`` and random hex), so retries send the same body and id. A delivery
is due when ``state = 0`` and ``next_attempt_at`` has passed; claiming it pushes
``next_attempt_at`` a lease ahead, so a crashed dispatcher's claims fall due again by
themselves. Every table goes with its user (``ON DELETE CASCADE``).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
CREATED, DELETED = 1, 2  # bits of webhook_subscriptions.events

# SQLite 3.40 has no unixepoch('subsec'); julianday gives the same to the millisecond.
_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_SQLITE_TRIGGER = """
CREATE TRIGGER plants_webhook_{name} AFTER {op} ON plants BEGIN
    INSERT INTO webhook_deliveries (subscription_id, user_id, msg_id, event_type, occurred_at,
        plant_id, name, tag, state, attempts, next_attempt_at)
    SELECT id, user_id, 'msg_' || lower(hex(randomblob(12))), '{event}', {now},
        {row}.id, {row}.name, {row}.tag, 0, 0, {now}
    FROM webhook_subscriptions
    WHERE user_id = {row}.user_id AND enabled = 1 AND (events & {bit}) != 0;
END
"""

# One call per statement, not per row: PostgreSQL's batched create inserts many plants in
# one statement, and the plants it changed are joined with their owners' subscriptions at
# once (a transition table). With no subscription that is one empty join a statement.
_POSTGRES_FUNCTION = """
CREATE FUNCTION plantstore_queue_webhooks() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bit integer := CASE TG_OP WHEN 'DELETE' THEN 2 ELSE 1 END;
    event text := CASE TG_OP WHEN 'DELETE' THEN 'plant.deleted' ELSE 'plant.created' END;
BEGIN
    INSERT INTO webhook_deliveries (subscription_id, user_id, msg_id, event_type, occurred_at,
        plant_id, name, tag, state, attempts, next_attempt_at)
    SELECT s.id, s.user_id, 'msg_' || replace(gen_random_uuid()::text, '-', ''), event,
        extract(epoch FROM clock_timestamp()), changed.id, changed.name, changed.tag, 0, 0,
        extract(epoch FROM clock_timestamp())
    FROM changed JOIN webhook_subscriptions s ON s.user_id = changed.user_id
    WHERE s.enabled AND (s.events & bit) != 0;
    RETURN NULL;
END
$$
"""
_POSTGRES_TRIGGERS = (
    """
    CREATE TRIGGER plants_webhooks_created AFTER INSERT ON plants
        REFERENCING NEW TABLE AS changed
        FOR EACH STATEMENT EXECUTE FUNCTION plantstore_queue_webhooks()
    """,
    """
    CREATE TRIGGER plants_webhooks_deleted AFTER DELETE ON plants
        REFERENCING OLD TABLE AS changed
        FOR EACH STATEMENT EXECUTE FUNCTION plantstore_queue_webhooks()
    """,
)


def _user_id() -> sa.Column[int]:
    return sa.Column(
        "user_id", sa.BigInteger(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
    )


def upgrade() -> None:
    op.create_table(
        "webhook_subscriptions",
        sa.Column("id", _ID, primary_key=True),
        _user_id(),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("events", sa.Integer(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("previous_secret", sa.Text(), nullable=True),
        sa.Column("previous_secret_until", sa.Float(), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.Column("failing_since", sa.Float(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_index("webhook_subscriptions_user_id", "webhook_subscriptions", ["user_id"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", _ID, primary_key=True),
        sa.Column(
            "subscription_id",
            sa.BigInteger(),
            sa.ForeignKey("webhook_subscriptions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        _user_id(),
        # Random (96 bits on SQLite, a v4 UUID on PostgreSQL) and never looked up, so not
        # indexed: a unique index on random keys dirtied a page of its own for nearly every
        # event, three quarters of the pages a create with one subscriber wrote to the WAL.
        sa.Column("msg_id", sa.Text(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("occurred_at", sa.Float(), nullable=False),
        sa.Column("plant_id", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("tag", sa.Text(), nullable=True),
        sa.Column("state", sa.SmallInteger(), nullable=False),  # 0 due, 1 delivered, 2 failed
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.Float(), nullable=False),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
    )
    op.create_index(
        "webhook_deliveries_due",
        "webhook_deliveries",
        ["next_attempt_at"],
        sqlite_where=sa.text("state = 0"),
        postgresql_where=sa.text("state = 0"),
    )
    op.create_index(
        "webhook_deliveries_by_subscription", "webhook_deliveries", ["subscription_id", "id"]
    )
    op.create_index("webhook_deliveries_user_id", "webhook_deliveries", ["user_id"])
    op.create_table(
        "webhook_attempts",
        sa.Column("id", _ID, primary_key=True),
        sa.Column(
            "delivery_id",
            sa.BigInteger(),
            sa.ForeignKey("webhook_deliveries.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("attempted_at", sa.Float(), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("duration", sa.Float(), nullable=False),
    )
    op.create_index("webhook_attempts_delivery", "webhook_attempts", ["delivery_id"])
    op.create_index("webhook_attempts_attempted_at", "webhook_attempts", ["attempted_at"])
    if op.get_bind().dialect.name == "sqlite":
        for name, when, event, row, bit in (
            ("created", "INSERT", "plant.created", "NEW", CREATED),
            ("deleted", "DELETE", "plant.deleted", "OLD", DELETED),
        ):
            op.execute(
                _SQLITE_TRIGGER.format(
                    name=name, op=when, event=event, row=row, bit=bit, now=_SQLITE_NOW
                )
            )
    else:
        op.execute(_POSTGRES_FUNCTION)
        for trigger in _POSTGRES_TRIGGERS:
            op.execute(trigger)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER plants_webhook_created")
        op.execute("DROP TRIGGER plants_webhook_deleted")
    else:
        op.execute("DROP TRIGGER plants_webhooks_created ON plants")
        op.execute("DROP TRIGGER plants_webhooks_deleted ON plants")
        op.execute("DROP FUNCTION plantstore_queue_webhooks()")
    op.drop_table("webhook_attempts")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_subscriptions")
