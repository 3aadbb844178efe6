"""Sandbox users: a quota of their own and an expiry after which the purge deletes them.

``users.max_plants`` is a user's own quota (NULL: the global ``PLANTSTORE_MAX_PLANTS_PER_USER``);
``users.sandbox_expires_at`` (Unix seconds, NULL for every user but a sandbox one) is when
the user and all it owns are to go, indexed so the purge finds the expired ones without a
scan. On PostgreSQL the quota trigger of 0004 is replaced by one that prefers the user's
own quota; it reads it from the row it already updates, so the check costs nothing more.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_POSTGRES_FUNCTION = """
CREATE OR REPLACE FUNCTION plantstore_count_plants() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    held bigint;
    own_quota bigint;
    quota bigint := nullif(current_setting('plantstore.max_plants_per_user', true), '')::bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE users SET plant_count = plant_count - 1 WHERE id = OLD.user_id;
        RETURN OLD;
    END IF;
    UPDATE users SET plant_count = plant_count + 1 WHERE id = NEW.user_id
        RETURNING plant_count, max_plants INTO held, own_quota;
    quota := coalesce(own_quota, quota);
    IF quota IS NOT NULL AND held > quota THEN
        RAISE EXCEPTION 'user % holds the most plants allowed (%)', NEW.user_id, quota
            USING ERRCODE = 'PSQ01';  -- the store answers it with a 403
    END IF;
    RETURN NEW;
END
$$
"""
# 0004's function, restored by the downgrade.
_POSTGRES_FUNCTION_0004 = """
CREATE OR REPLACE FUNCTION plantstore_count_plants() RETURNS trigger LANGUAGE plpgsql AS $$
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


def upgrade() -> None:
    op.add_column("users", sa.Column("max_plants", sa.BigInteger(), nullable=True))
    op.add_column("users", sa.Column("sandbox_expires_at", sa.Float(), nullable=True))
    op.create_index(
        "users_sandbox_expires_at",
        "users",
        ["sandbox_expires_at"],
        sqlite_where=sa.text("sandbox_expires_at IS NOT NULL"),
        postgresql_where=sa.text("sandbox_expires_at IS NOT NULL"),
    )
    if op.get_bind().dialect.name != "sqlite":
        op.execute(_POSTGRES_FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.execute(_POSTGRES_FUNCTION_0004)
    op.drop_index("users_sandbox_expires_at", "users")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("sandbox_expires_at")
        batch.drop_column("max_plants")
