"""A rule the database itself keeps on every change, written by the feature it belongs to.

Some rules must hold however a row is written (the SQLite writer's group commit, PostgreSQL's
batched insert, a racing instance): each plant counted for its owner's quota, each change
queued for its owner's webhook subscriptions in the change's own transaction. They are
triggers, and their SQL lives in the feature (``plants/quota.py``, ``webhooks/outbox.py``),
both dialects side by side, so that neither drifts from the other unseen. A migration
installs a rule; since installing drops the previous version first, a changed rule is a new
migration that installs it again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Dialect = str  # SQLAlchemy's name for it: "sqlite" or "postgresql"


@dataclass(frozen=True, slots=True)
class DatabaseRule:
    """``install`` and ``remove``: the statements per dialect, run in order. ``remove`` runs
    first on every install and tolerates a rule not installed yet (``IF EXISTS``)."""

    install: dict[Dialect, tuple[str, ...]]
    remove: dict[Dialect, tuple[str, ...]]

    def install_with(self, execute: Callable[[str], object], dialect: Dialect) -> None:
        """Install this version of the rule (a migration passes ``op.execute``)."""
        self.remove_with(execute, dialect)
        for statement in self.install[dialect]:
            execute(statement)

    def remove_with(self, execute: Callable[[str], object], dialect: Dialect) -> None:
        for statement in self.remove[dialect]:
            execute(statement)
