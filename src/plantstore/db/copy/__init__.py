"""``plantstore db copy``: a whole deployment carried from one database to another.

The copy is generic: it reads the source's tables from its catalog and moves their rows
verbatim (ids, hashes, secrets, counters) into a target whose schema Alembic has just made at
the source's revision, in one target transaction with the target's own triggers off, so the
target ends as the source was at one moment and nothing on it is derived twice.
"""

from __future__ import annotations

from .run import CopyError, CopyReport, TableCount, copy_database

__all__ = ["CopyError", "CopyReport", "TableCount", "copy_database"]
