"""Each user's plant count, kept by triggers, so a create can enforce the per-user quota.

Counting a user's plants on every create would read up to the whole quota (100,000 rows);
a counter on ``users`` costs one indexed update per insert or delete. On PostgreSQL the
insert trigger also enforces the quota: the counter's row lock orders concurrent creates of
one user, even across instances, so none slips past it. The limit comes from the setting
``plantstore.max_plants_per_user`` (unset: no limit), which each create sets for its own
transaction (a pooler keeps that). SQLite has one writer, which checks the counter itself
before inserting.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_SQLITE_TRIGGERS = (
    """
    CREATE TRIGGER plants_counted_in AFTER INSERT ON plants BEGIN
        UPDATE users SET plant_count = plant_count + 1 WHERE id = NEW.user_id;
    END
    """,
    """
    CREATE TRIGGER plants_counted_out AFTER DELETE ON plants BEGIN
        UPDATE users SET plant_count = plant_count - 1 WHERE id = OLD.user_id;
    END
    """,
)

_POSTGRES_FUNCTION = """
CREATE FUNCTION plantstore_count_plants() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    held bigint;
    quota bigint := nullif(current_setting('plantstore.max_plants_per_user', true), '')::bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE users SET plant_count = plant_count - 1 WHERE id = OLD.user_id;
        RETURN OLD;
    END IF;
    UPDATE users SET plant_count = plant_count + 1 WHERE id = NEW.user_id
        RETURNING plant_count INTO held;
    IF quota IS NOT NULL AND held > quota THEN
        RAISE EXCEPTION 'user % holds the most plants allowed (%)', NEW.user_id, quota
            USING ERRCODE = 'PSQ01';  -- the store answers it with a 403
    END IF;
    RETURN NEW;
END
$$
"""
_POSTGRES_TRIGGER = """
CREATE TRIGGER plants_counted AFTER INSERT OR DELETE ON plants
    FOR EACH ROW EXECUTE FUNCTION plantstore_count_plants()
"""


def upgrade() -> None:
    op.add_column(
        "users", sa.Column("plant_count", sa.BigInteger(), nullable=False, server_default="0")
    )
    op.execute(
        "UPDATE users SET plant_count = "
        "(SELECT count(*) FROM plants WHERE plants.user_id = users.id)"
    )
    if op.get_bind().dialect.name == "sqlite":
        for trigger in _SQLITE_TRIGGERS:
            op.execute(trigger)
    else:
        op.execute(_POSTGRES_FUNCTION)
        op.execute(_POSTGRES_TRIGGER)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER plants_counted_in")
        op.execute("DROP TRIGGER plants_counted_out")
    else:
        op.execute("DROP TRIGGER plants_counted ON plants")
        op.execute("DROP FUNCTION plantstore_count_plants()")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("plant_count")
