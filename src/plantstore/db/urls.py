"""What a ``PLANTSTORE_DATABASE_URL`` names: a SQLite file or a PostgreSQL database.

Parsed in one place so that settings, migrations and stores agree on it, and so that a
password in the URL is never printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

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
    """Refuse a URL the driver would misread. The reason never quotes the URL's parts: a
    password holding ``/`` or ``@`` moves the parser's idea of the port into it."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (parsing the port is the check)
    except ValueError:
        raise ValueError(
            f"malformed PostgreSQL URL {redacted(url)}: percent-encode any of "
            "@ : / ? # % in the user name or password (e.g. %40 for @)"
        ) from None
    if parts.fragment:
        raise ValueError(
            f"malformed PostgreSQL URL {redacted(url)}: it takes no #fragment "
            "(percent-encode a # in the password as %23)"
        )


def redacted(url: str) -> str:
    """Return ``url`` with any password replaced by ``***``, for logs, banners and errors.

    Whatever the password holds (``/``, ``?``, ``#``, ``@``, ``%``), everything from the
    colon after the user name to the URL's last ``@`` is hidden: that may hide more than the
    password (an ``@`` in the query), never less.
    """
    scheme, separator, rest = url.partition("://")
    userinfo, at, after = rest.rpartition("@")
    if not separator or not at:
        return url
    user, colon, _ = userinfo.partition(":")
    if not colon:
        return url  # a user name and no password
    return f"{scheme}://{user}:***@{after}"
