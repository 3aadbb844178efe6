"""Users belong to a namespace: the operator's ('') or an identity provider's issuer.

A JWT's caller is a user of its issuer, never the operator-created user of the same name, so
``users.name`` stops being unique on its own: ``(issuer, name)`` is. ``disabled_at`` lets an
operator shut a user out, whichever kind of token it brings.

SQLite cannot drop the inline UNIQUE of 0001, so the table is rebuilt in batch mode, which
reflects and copies every column it has (including any a later revision added). The plant
count triggers of 0004 name ``users``; with ``legacy_alter_table`` the rename does not
re-check them while the old table is gone.

Revision ID: 0006
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0004"
branch_labels = None
depends_on = None

_NAMING = {"uq": "uq_%(table_name)s_%(column_0_name)s"}


def upgrade() -> None:
    issuer = sa.Column("issuer", sa.Text(), nullable=False, server_default="")
    disabled_at = sa.Column("disabled_at", sa.Float(), nullable=True)
    if op.get_bind().dialect.name != "sqlite":
        op.add_column("users", issuer)
        op.add_column("users", disabled_at)
        op.drop_constraint("users_name_key", "users", type_="unique")
        op.create_unique_constraint("users_issuer_name", "users", ["issuer", "name"])
        return
    op.execute("PRAGMA legacy_alter_table = ON")
    with op.batch_alter_table("users", recreate="always", naming_convention=_NAMING) as batch:
        batch.add_column(issuer)
        batch.add_column(disabled_at)
        batch.drop_constraint("uq_users_name", type_="unique")
        batch.create_unique_constraint("users_issuer_name", ["issuer", "name"])
    op.execute("PRAGMA legacy_alter_table = OFF")


def downgrade() -> None:
    """Back to one namespace: fails if an issuer's user shares a name with another user."""
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint("users_issuer_name", "users", type_="unique")
        op.create_unique_constraint("users_name_key", "users", ["name"])
        op.drop_column("users", "disabled_at")
        op.drop_column("users", "issuer")
        return
    op.execute("PRAGMA legacy_alter_table = ON")
    with op.batch_alter_table("users", recreate="always") as batch:
        batch.drop_constraint("users_issuer_name", type_="unique")
        batch.create_unique_constraint("uq_users_name", ["name"])
        batch.drop_column("disabled_at")
        batch.drop_column("issuer")
    op.execute("PRAGMA legacy_alter_table = OFF")
