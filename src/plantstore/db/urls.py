"""What a ``PLANTSTORE_DATABASE_URL`` names: a SQLite file or a PostgreSQL database.

Parsed in one place so that settings, migrations and stores agree on it, and so that a
password in the URL is never printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

Backend = Literal["sqlite", "postgresql"]

_SQLITE_PREFIX = "sqlite:///"
_POSTGRES_SCHEMES = ("postgresql", "postgres")
# libpq's target_session_attrs, as asyncpg takes them: which of several hosts to use.
SESSION_ATTRS = ("any", "primary", "standby", "prefer-standby", "read-write", "read-only")
WRITABLE_SESSION_ATTRS = ("any", "primary", "read-write")


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
    password holding ``/`` or ``@`` moves the parser's idea of the port into it.

    Several hosts are written as libpq writes them, ``host1:port1,host2:port2``."""
    try:
        parts = urlsplit(url)
        for host in postgres_hosts(url):
            urlsplit(f"postgresql://{host}").port  # noqa: B018 (parsing the port is the check)
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
    attrs = session_attrs(url)
    if attrs is not None and attrs not in SESSION_ATTRS:
        raise ValueError(
            f"PostgreSQL URL {redacted(url)}: target_session_attrs must be one of "
            f"{', '.join(SESSION_ATTRS)}"
        )


def postgres_hosts(url: str) -> list[str]:
    """The ``host:port`` entries of a PostgreSQL URL (one, or several separated by commas)."""
    netloc = url.partition("://")[2].partition("/")[0].partition("?")[0]
    hosts = netloc.rpartition("@")[2]
    return hosts.split(",") if hosts else []


def session_attrs(url: str) -> str | None:
    """The URL's ``target_session_attrs``, if it gives one."""
    values = parse_qs(urlsplit(url).query).get("target_session_attrs")
    return values[-1] if values else None


def for_writes(url: str) -> str:
    """``url`` as the service uses it: with several hosts and no ``target_session_attrs``,
    ``read-write``, so that the service follows the host that accepts writes (libpq's own
    default, ``any``, would stay on a standby that answers first).

    A URL that asks for a standby or a read-only session is refused: the service writes."""
    if backend_of(url) != "postgresql":
        return url
    attrs = session_attrs(url)
    if attrs is None and len(postgres_hosts(url)) > 1:
        parts = urlsplit(url)
        query = "&".join(
            filter(None, [parts.query, urlencode({"target_session_attrs": "read-write"})])
        )
        return urlunsplit(parts._replace(query=query))
    if attrs is not None and attrs not in WRITABLE_SESSION_ATTRS:
        raise ValueError(
            f"PostgreSQL URL {redacted(url)}: plantstore writes, so target_session_attrs must be "
            f"{', '.join(WRITABLE_SESSION_ATTRS)} (read-write follows a promoted standby)"
        )
    return url


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
