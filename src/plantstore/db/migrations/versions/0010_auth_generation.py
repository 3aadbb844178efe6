"""A counter that moves whenever a token or a user stops being what a cache remembers.

Each serving process keeps the tokens it has looked up. Instead of forgetting them every
half second (with many callers, nearly every request looked its token up again), it reads
this one row every half second and forgets them all when it moved. Triggers move it for any
path that revokes, re-times, moves or deletes a token, or disables or deletes a user: the
commands, the sandbox purge, a statement typed by hand.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_WATCHED = (
    ("tokens", "revoked_at, expires_at, user_id, token_hash"),
    ("users", "disabled_at"),
)
_BUMP = "UPDATE auth_generation SET value = value + 1"
_POSTGRES_FUNCTION = f"""
CREATE FUNCTION plantstore_auth_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {_BUMP};
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "auth_generation",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
    )
    op.execute("INSERT INTO auth_generation (id, value) VALUES (1, 0)")
    if op.get_bind().dialect.name == "sqlite":
        for table, columns in _WATCHED:
            op.execute(
                f"CREATE TRIGGER {table}_auth_changed AFTER UPDATE OF {columns} ON {table} "
                f"BEGIN {_BUMP}; END"
            )
            op.execute(
                f"CREATE TRIGGER {table}_auth_deleted AFTER DELETE ON {table} BEGIN {_BUMP}; END"
            )
        return
    op.execute(_POSTGRES_FUNCTION)
    for table, columns in _WATCHED:
        op.execute(
            f"CREATE TRIGGER {table}_auth_changed AFTER UPDATE OF {columns} OR DELETE "
            f"ON {table} FOR EACH STATEMENT EXECUTE FUNCTION plantstore_auth_changed()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for table, _ in _WATCHED:
            op.execute(f"DROP TRIGGER {table}_auth_changed")
            op.execute(f"DROP TRIGGER {table}_auth_deleted")
    else:
        for table, _ in _WATCHED:
            op.execute(f"DROP TRIGGER {table}_auth_changed ON {table}")
        op.execute("DROP FUNCTION plantstore_auth_changed()")
    op.drop_table("auth_generation")
