"""The rules the database keeps on every plant change are the features' own: after the
migrations, the triggers and functions a database holds are, word for word, what
``plants/quota.py`` and ``webhooks/outbox.py`` define (so a rule changed without a migration
that installs it fails here), and installing a rule again (as that migration does) leaves it
working, once."""

from __future__ import annotations

import contextlib
import re
import sqlite3
from pathlib import Path

import pytest

from plantstore.db.migrate import upgrade
from plantstore.db.rules import DatabaseRule
from plantstore.plants.quota import PLANT_COUNTS
from plantstore.webhooks.outbox import OUTBOX
from tests import pg
from tests.fixtures.backends import new_database_url, run_sql

RULES = {"plant counts": PLANT_COUNTS, "outbox": OUTBOX}


@pytest.fixture
def fresh_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    url = new_database_url(backend, tmp_path, request)
    upgrade(url)
    return url


def installed(url: str) -> set[str]:
    """Each trigger's SQL (SQLite), or each plantstore function's body (PostgreSQL)."""
    if url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db:
            found = db.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'")
            return {str(sql) for (sql,) in found}
    [rows] = pg.run_sql(url, "SELECT prosrc FROM pg_proc WHERE proname LIKE 'plantstore_%'")
    return {str(body) for (body,) in rows}


def defined(rule: DatabaseRule, dialect: str) -> set[str]:
    """What installing ``rule`` creates, as the database keeps it."""
    if dialect == "sqlite":
        return {statement.strip() for statement in rule.install[dialect]}
    bodies = (re.search(r"\$\$(.*)\$\$", s, re.S) for s in rule.install[dialect])
    return {body.group(1) for body in bodies if body}


@pytest.mark.parametrize("rule", RULES.values(), ids=RULES.keys())
def test_the_database_holds_the_features_rules_word_for_word(
    fresh_url: str, rule: DatabaseRule
) -> None:
    dialect = "sqlite" if fresh_url.startswith("sqlite") else "postgresql"
    assert defined(rule, dialect)  # something to compare
    assert defined(rule, dialect) <= installed(fresh_url)


def test_a_rule_installed_again_still_queues_and_counts_once(fresh_url: str) -> None:
    dialect = "sqlite" if fresh_url.startswith("sqlite") else "postgresql"
    for rule in RULES.values():
        rule.install_with(lambda statement: run_sql(fresh_url, statement), dialect)
    for statement in (
        "INSERT INTO users (name, created_at) VALUES ('alice', 0)",
        "INSERT INTO webhook_subscriptions (user_id, url, events, secret, enabled, created_at) "
        "VALUES (1, 'https://hooks.example.com/', 3, 'whsec_x', true, 0)",
        "INSERT INTO plants (user_id, id, name, tag) VALUES (1, 7, 'Fern', NULL)",
        "DELETE FROM plants WHERE user_id = 1 AND id = 7",
        "INSERT INTO plants (user_id, id, name, tag) VALUES (1, 8, 'Aloe', NULL)",
    ):
        run_sql(fresh_url, statement)
    events = select(fresh_url, "SELECT event_type, msg_id FROM webhook_deliveries ORDER BY id")
    assert [event for event, _ in events] == ["plant.created", "plant.deleted", "plant.created"]
    assert all(re.fullmatch(r"msg_[0-9a-f]{32}", str(msg_id)) for _, msg_id in events)
    assert select(fresh_url, "SELECT plant_count FROM users") == [(1,)]


def select(url: str, query: str) -> list[tuple[object, ...]]:
    if url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db:
            return [tuple(row) for row in db.execute(query)]
    [rows] = pg.run_sql(url, query)
    return rows
