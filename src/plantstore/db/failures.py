"""How a database failure is told: a store that cannot open, and one line about any failure."""

from __future__ import annotations


class StoreOpenError(Exception):
    """The database cannot be used: unreachable, or set up to lose acknowledged writes."""


def describe_failure(exc: BaseException) -> str:
    """One line about a database failure: its kind and first line, never a DSN or stack."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
