"""The rules the database keeps on every plant change, installed from the features that own
them: the plant count and quota (``plants/quota.py``) and the webhook outbox
(``webhooks/outbox.py``).

They are the rules 0007 and 0011 left, word for word: this migration changes no behaviour.
From here on a rule is changed in its feature, and a new migration installs it again.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

from plantstore.plants.quota import PLANT_COUNTS
from plantstore.webhooks.outbox import OUTBOX

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    for rule in (PLANT_COUNTS, OUTBOX):
        rule.install_with(op.execute, dialect)


def downgrade() -> None:
    pass  # 0011's rules are these same rules
