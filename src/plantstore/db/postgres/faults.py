"""Which PostgreSQL failures are faults of the environment, and the 503 that names each.

The database away, restarting, ending the service's connections, missing, refusing its
login, read-only (a standby not yet promoted) or out of disk: each is a 503 whose message
says which, never a host, a database name or a password. Anything else is a fault of ours.
"""

from __future__ import annotations

import asyncpg

from ...errors import StoreUnavailable

_NOT_ANSWERING = ("the database is not answering; retry shortly", "not_answering")
_UNREACHABLE = ("the database cannot be reached; retry shortly", "unreachable")
_RESTARTING = ("the database is restarting or ended the connection; retry shortly", "restarting")
_MISSING = ("the database does not exist; retry later", "database_missing")
_LOGIN = ("the database refuses the service's connections; retry later", "refused")
_READ_ONLY = ("the database does not take writes now (a standby); retry shortly", "read_only")
_DISK_FULL = ("the database's disk is full; retry later", "disk_full")
_RESOURCES = ("the database is out of resources; retry shortly", "resources")

# SQLSTATE classes (the first two characters) and codes: PostgreSQL's appendix A.
_BY_CLASS = {
    "08": _RESTARTING,  # connection exception
    "28": _LOGIN,  # invalid authorization
    "53": _RESOURCES,  # insufficient resources
    "57": _RESTARTING,  # operator intervention: admin or crash shutdown, cannot connect now
    "58": _NOT_ANSWERING,  # system error (an I/O error of the server)
}
_BY_CODE = {
    "3D000": _MISSING,  # invalid catalog name: the database was dropped
    "25006": _READ_ONLY,  # read-only transaction
    "53100": _DISK_FULL,
    "57014": _NOT_ANSWERING,  # query canceled: the statement timeout
}


def outage_of(exc: BaseException, connection_closed: bool = False) -> StoreUnavailable | None:
    """The 503 for ``exc`` if the database cannot serve now; None if it is a fault of ours.

    ``connection_closed``: the connection the failure came on has ended since, so whatever
    the client library said (asyncpg's "another operation is in progress" when a statement
    meets the end a server sent before it), the failure is the connection's.
    """
    if isinstance(exc, StoreUnavailable):
        return exc
    told: tuple[str, str] | None = None
    if isinstance(exc, TimeoutError):
        told = _NOT_ANSWERING
    elif isinstance(exc, OSError):
        told = _UNREACHABLE
    elif isinstance(exc, asyncpg.TargetServerAttributeNotMatched):
        told = _READ_ONLY  # every host answered, none takes writes yet (before a promotion)
    elif isinstance(exc, asyncpg.PostgresError):
        sqlstate = str(exc.sqlstate or "")
        told = _BY_CODE.get(sqlstate) or _BY_CLASS.get(sqlstate[:2])
    elif isinstance(exc, asyncpg.InterfaceError):
        told = _RESTARTING
    if told is None and connection_closed:
        told = _RESTARTING
    return None if told is None else StoreUnavailable(*told)
