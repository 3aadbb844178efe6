"""What the copy asks of a source (a snapshot it reads in batches) and of a target (one
transaction it writes in), whichever engine each is."""

from __future__ import annotations

import graphlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Protocol

Row = tuple[object, ...]

# Alembic's own table is not copied: the target's schema is made at the source's revision.
ALEMBIC_TABLE = "alembic_version"
# Tables whose rows the migrations themselves make (the secrets, the auth generation): a fresh
# target holds them, and the copy replaces them with the source's.
MADE_BY_SCHEMA = frozenset({"secrets", "auth_generation"})


class Source(Protocol):
    """A database read as one consistent snapshot, while it may go on serving."""

    async def tables(self) -> Mapping[str, Sequence[str]]:
        """Each table's columns, Alembic's table left out."""
        ...

    async def references(self) -> Mapping[str, set[str]]:
        """Each table's foreign keys, as the tables they refer to."""
        ...

    async def count(self, table: str) -> int: ...
    def rows(self, table: str, columns: Sequence[str], batch: int) -> AsyncIterator[list[Row]]: ...
    async def sequence_floors(self) -> Mapping[str, int]:
        """For each table with a generated id, the last id its sequence handed out (0 if the
        engine reuses none, like SQLite, whose next id is the greatest plus one)."""
        ...

    async def close(self) -> None: ...


class Target(Protocol):
    """A database written in one transaction, committed only once every count matches."""

    async def count(self, table: str) -> int: ...
    async def begin(self) -> None: ...
    async def insert(self, table: str, columns: Sequence[str], rows: list[Row]) -> None: ...
    async def clear(self, table: str) -> None: ...
    async def continue_sequences(self, floors: Mapping[str, int]) -> None: ...
    async def commit(self) -> None: ...
    async def close(self) -> None: ...


def in_reference_order(references: Mapping[str, set[str]]) -> list[str]:
    """Tables ordered so that each comes after those it refers to (foreign keys)."""
    sorter = graphlib.TopologicalSorter(
        {table: {r for r in refs if r != table} for table, refs in references.items()}
    )
    return [table for table in sorter.static_order() if table in references]
