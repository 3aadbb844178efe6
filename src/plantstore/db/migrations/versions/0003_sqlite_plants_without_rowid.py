"""On SQLite, plants live in their primary-key B-tree (``WITHOUT ROWID``).

A rowid table kept ``(user_id, id)`` in a separate index, so every listed plant cost a
second B-tree lookup. Clustered by the key, a listed plant is one lookup, the file is smaller
and an insert updates one B-tree, not two.
PostgreSQL has no such table kind and is left as it is.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_PLANTS_TABLE = """
CREATE TABLE {name} (
    user_id BIGINT NOT NULL REFERENCES users (id),
    id BIGINT NOT NULL,
    name TEXT NOT NULL,
    tag TEXT,
    PRIMARY KEY (user_id, id)
){options}
"""


def upgrade() -> None:
    _rebuild_plants(" WITHOUT ROWID")


def downgrade() -> None:
    _rebuild_plants("")


def _rebuild_plants(options: str) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute(_PLANTS_TABLE.format(name="plants_rebuilt", options=options))
    op.execute(
        "INSERT INTO plants_rebuilt (user_id, id, name, tag) SELECT user_id, id, name, tag FROM plants"
    )
    op.execute("DROP TABLE plants")
    op.execute("ALTER TABLE plants_rebuilt RENAME TO plants")
