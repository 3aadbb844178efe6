"""Sandbox issuance counted where the tokens are: one row per token issued, under a keyed hash
of the client address (never the address), so the per-address limit holds across workers,
restarts and instances without Redis.

``sandbox_issues.address_key`` is an HMAC-SHA256 of the address with the secret
``sandbox_address_key`` made here; ``issued_at`` is Unix seconds. The purge drops rows older
than the limit's window.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sandbox_issues",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("address_key", sa.Text(), nullable=False),
        sa.Column("issued_at", sa.Float(), nullable=False),
    )
    op.create_index("sandbox_issues_by_address", "sandbox_issues", ["address_key", "issued_at"])
    op.create_index("sandbox_issues_by_time", "sandbox_issues", ["issued_at"])
    op.execute(
        sa.text(
            "INSERT INTO secrets (name, value) VALUES ('sandbox_address_key', :value)"
        ).bindparams(value=secrets.token_hex(32))
    )


def downgrade() -> None:
    op.execute("DELETE FROM secrets WHERE name = 'sandbox_address_key'")
    op.drop_index("sandbox_issues_by_time", "sandbox_issues")
    op.drop_index("sandbox_issues_by_address", "sandbox_issues")
    op.drop_table("sandbox_issues")
