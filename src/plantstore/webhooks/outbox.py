"""The outbox: every plant change queues one delivery per enabled subscription of the plant's
owner that wants the event, in the change's own transaction (a ``DatabaseRule``, which the
migrations install).

Triggers rather than an enqueue in each store's write: an event exists iff its change was
committed, on both backends, whatever path wrote the plant (the SQLite writer's group
commit, PostgreSQL's batched insert, a racing instance), and the plants feature knows
nothing of webhooks. With no subscription a change costs one indexed lookup.

A delivery holds the event as it was at the change (type, time, id, name, tag) and its
``webhook-id``: ``msg_`` and 32 random hex digits on both backends, which retries repeat.
"""

from __future__ import annotations

from ..db.rules import DatabaseRule
from .events import EVENT_BITS, EventType

# SQLite 3.40 has no unixepoch('subsec'); julianday gives the same to the millisecond.
_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
# The bits are events.py's EVENT_BITS (the PostgreSQL function below spells them out).
_SQLITE_TRIGGER = """
CREATE TRIGGER plants_webhook_{name} AFTER {op} ON plants BEGIN
    INSERT INTO webhook_deliveries (subscription_id, user_id, msg_id, event_type, occurred_at,
        plant_id, name, tag, state, attempts, next_attempt_at)
    SELECT id, user_id, 'msg_' || lower(hex(randomblob(16))), '{event}', {now},
        {row}.id, {row}.name, {row}.tag, 0, 0, {now}
    FROM webhook_subscriptions
    WHERE user_id = {row}.user_id AND enabled = 1 AND (events & {bit}) != 0;
END
"""
_SQLITE_CHANGES: tuple[tuple[str, str, EventType, str], ...] = (
    ("created", "INSERT", "plant.created", "NEW"),
    ("deleted", "DELETE", "plant.deleted", "OLD"),
)
_SQLITE_TRIGGERS = tuple(
    _SQLITE_TRIGGER.format(
        name=name, op=change, event=event, row=row, bit=EVENT_BITS[event], now=_SQLITE_NOW
    )
    for name, change, event, row in _SQLITE_CHANGES
)

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

OUTBOX = DatabaseRule(
    install={
        "sqlite": _SQLITE_TRIGGERS,
        "postgresql": (_POSTGRES_FUNCTION, *_POSTGRES_TRIGGERS),
    },
    remove={
        "sqlite": (
            "DROP TRIGGER IF EXISTS plants_webhook_created",
            "DROP TRIGGER IF EXISTS plants_webhook_deleted",
        ),
        "postgresql": (
            "DROP TRIGGER IF EXISTS plants_webhooks_created ON plants",
            "DROP TRIGGER IF EXISTS plants_webhooks_deleted ON plants",
            "DROP FUNCTION IF EXISTS plantstore_queue_webhooks()",
        ),
    },
)
