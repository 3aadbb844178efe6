"""What a ``PLANTSTORE_DATABASE_URL`` names: a SQLite file or a PostgreSQL database.

Parsed in one place so that settings, migrations and stores agree on it, and so that a
password in the URL is never printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

Backend = Literal["sqlite", "postgresql"]

_SQLITE_PREFIX = "sqlite:///"
_POSTGRES_SCHEMES = ("postgresql", "postgres")


def backend_of(url: str) -> Backend:
    """Name the backend ``url`` is for, or raise ValueError naming the accepted forms."""
    scheme = url.partition("://")[0]
    if scheme in _POSTGRES_SCHEMES:
        _check_postgres(url)
        return "postgresql"
    sqlite_path(url)
    return "sqlite"


def sqlite_path(url: str) -> Path:
    """Return the file a ``sqlite:///relative`` or ``sqlite:////absolute`` URL names."""
    if not url.startswith(_SQLITE_PREFIX):
        raise ValueError(
            "database URL must be sqlite:///relative.db, sqlite:////absolute/path.db or "
            "postgresql://user@host:port/database"
        )
    path = url[len(_SQLITE_PREFIX) :]
    if not path or path == ":memory:" or path.startswith("file:"):
        raise ValueError("database URL must name a file, e.g. sqlite:///data/plantstore.db")
    return Path(path)


def _check_postgres(url: str) -> None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (parsing the port is the check)
    except ValueError as exc:
        raise ValueError(f"malformed PostgreSQL URL: {exc}") from None
    if parts.fragment:
        raise ValueError("a PostgreSQL URL takes no #fragment")


def redacted(url: str) -> str:
    """Return ``url`` with any password replaced by ``***``, for logs and banners."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
