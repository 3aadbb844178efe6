"""A write declared in a module nothing imports: the owner of the writer finds it by its name,
as one process finds another's (a CLI command that owns the writer, a worker's plant write)."""

from __future__ import annotations

import sqlite3

from plantstore.db.sqlite.ops import WriteOp


def twice(conn: sqlite3.Connection, value: int) -> int:
    return 2 * value


TWICE = WriteOp(twice)
