"""The per-user plant count, and on PostgreSQL the quota it enforces, as the database keeps
them on every insert and delete (a ``DatabaseRule``, which the migrations install).

Counting a user's plants on every create would read up to the whole quota (100,000 rows);
a counter on ``users`` costs one indexed update per insert or delete. On PostgreSQL the
insert trigger also enforces the quota: the counter's row lock orders concurrent creates of
one user, even across instances, so none slips past it. The limit is the user's own
(``users.max_plants``, a sandbox user's) or else ``plantstore.max_plants_per_user``, which
every create sets for its own transaction (``postgres.py``, ``postgres_batch.py``), never
the connection: a pooler in transaction mode hands connections between clients. SQLite has one writer, which checks the counter itself
before inserting (``sqlite.py``).
"""

from __future__ import annotations

from ..db.rules import DatabaseRule

QUOTA_SQLSTATE = "PSQ01"  # raised by the insert trigger at the quota; the store answers 403

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

PLANT_COUNTS = DatabaseRule(
    install={
        "sqlite": (
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
        ),
        "postgresql": (
            _POSTGRES_FUNCTION,
            """
CREATE TRIGGER plants_counted AFTER INSERT OR DELETE ON plants
    FOR EACH ROW EXECUTE FUNCTION plantstore_count_plants()
""",
        ),
    },
    remove={
        "sqlite": (
            "DROP TRIGGER IF EXISTS plants_counted_in",
            "DROP TRIGGER IF EXISTS plants_counted_out",
        ),
        "postgresql": (
            "DROP TRIGGER IF EXISTS plants_counted ON plants",
            "DROP FUNCTION IF EXISTS plantstore_count_plants()",
        ),
    },
)
