"""Users, hashed tokens, per-user plants, and the secret that signs paging cursors.

Revision ID: 0001
Revises:
Create Date: 2026-11-20
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("name", sa.Text(), nullable=False, unique=True),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("user_id", sa.BigInteger(), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.Column("last_used_at", sa.Float(), nullable=True),
        sa.Column("revoked_at", sa.Float(), nullable=True),
    )
    op.create_index("tokens_user_id", "tokens", ["user_id"])
    op.create_table(
        "plants",
        sa.Column("user_id", sa.BigInteger(), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("tag", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("user_id", "id"),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "secrets",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )
    op.execute(
        sa.text("INSERT INTO secrets (name, value) VALUES ('cursor_key', :value)").bindparams(
            value=secrets.token_hex(32)
        )
    )


def downgrade() -> None:
    op.drop_table("secrets")
    op.drop_table("plants")
    op.drop_index("tokens_user_id", "tokens")
    op.drop_table("tokens")
    op.drop_table("users")
