"""PostgreSQL store: asyncpg with a pool, plain parameterised SQL, for several instances.

Every statement runs in autocommit (or one short transaction) and PostgreSQL flushes its
WAL before answering the commit, so an acknowledged write is on disk. Creates waiting at the
same moment share one transaction and one flush (``postgres_batch``): the quota trigger's
row lock would otherwise give each create of a user a flush of its own.

While the database is unreachable every call fails within ``connect_timeout +
statement_timeout`` with ``StoreUnavailable`` (503), never a hang; the pool reconnects by
itself once the database is back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from ..errors import StoreUnavailable
from . import sandbox_postgres
from .base import CreateOutcome, PlantRecord, StoreOpenError, TokenRecord, describe_failure
from .postgres_batch import CreateBatcher
from .postgres_users import PostgresUsers, insert_token

log = logging.getLogger(__name__)

_FIRST_TOKEN_LOCK = 0x706C616E7474  # advisory-lock key for "issue the first token once"
_OUTAGE_SQLSTATE_CLASSES = frozenset({"08", "53", "57"})  # connection, resources, shutdown
_READ_ONLY_SQLSTATE = "25006"  # a standby that has not been promoted yet

_TOKEN_COLUMNS = (
    "tokens.id, users.name, users.id, tokens.created_at, tokens.expires_at, "
    "tokens.last_used_at, tokens.revoked_at, tokens.label, users.disabled_at"
)
_FIND_TOKEN = (
    f"SELECT {_TOKEN_COLUMNS} FROM tokens JOIN users ON users.id = tokens.user_id "  # noqa: S608 (constant columns)
    "WHERE tokens.token_hash = $1"
)
_LIST_TOKENS = f"SELECT {_TOKEN_COLUMNS} FROM tokens JOIN users ON users.id = tokens.user_id"  # noqa: S608 (constant columns)
# One round trip: insert, or else read the row that was already there. A row committed by a
# racing create after this statement's snapshot is neither; ``_create_plant`` reads again.
_CREATE_PLANT = """
WITH inserted AS (
    INSERT INTO plants (user_id, id, name, tag) VALUES ($1, $2, $3, $4)
    ON CONFLICT (user_id, id) DO NOTHING
    RETURNING name, tag
)
SELECT true, name, tag FROM inserted
UNION ALL
SELECT false, name, tag FROM plants WHERE user_id = $1 AND id = $2
"""
_QUOTA_SQLSTATE = "PSQ01"  # raised by migration 0004's trigger at the quota
_FIND_PLANT = "SELECT false, name, tag FROM plants WHERE user_id = $1 AND id = $2"
_LIST_FIRST = "SELECT id, name, tag FROM plants WHERE user_id = $1 ORDER BY id LIMIT $2"
_LIST_AFTER = "SELECT id, name, tag FROM plants WHERE user_id = $1 AND id > $2 ORDER BY id LIMIT $3"


def is_outage(exc: BaseException) -> bool:
    """Tell whether ``exc`` means the database cannot serve now, as opposed to a bug."""
    if isinstance(exc, OSError | TimeoutError | asyncpg.InterfaceError):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        sqlstate = str(exc.sqlstate or "")
        return sqlstate[:2] in _OUTAGE_SQLSTATE_CLASSES or sqlstate == _READ_ONLY_SQLSTATE
    return False


async def _keep_session(connection: asyncpg.Connection) -> None:
    """Reset nothing when a connection goes back to the pool (asyncpg still rolls back an
    open transaction): our sessions hold no LISTEN, cursor, SET or session lock to undo,
    and the default reset query would be a second round trip on every request."""


class _OutageLog:
    """One warning per interval while the database is away, not one per refused request."""

    def __init__(self, interval: float = 5.0) -> None:
        self._interval = interval
        self._last = -interval
        self._refused = 0

    def note(self, exc: BaseException) -> None:
        self._refused += 1
        now = time.monotonic()
        if now - self._last >= self._interval:
            log.warning(
                "database unavailable (%d requests answered 503 in the last %.0f s): %s",
                self._refused,
                min(now - self._last, self._interval),
                describe_failure(exc),
            )
            self._last, self._refused = now, 0


class PostgresStore(PostgresUsers):
    """The shared backend: any number of processes and instances may use one database."""

    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int = 10,
        connect_timeout: float = 1.0,
        statement_timeout: float = 1.0,
        allow_unsafe_durability: bool = False,
        max_plants_per_user: int | None = None,
    ) -> None:
        self._dsn = dsn
        self._max_plants = max_plants_per_user
        self._pool_size = pool_size
        self._connect_timeout = connect_timeout
        self._statement_timeout = statement_timeout
        self._budget = connect_timeout + statement_timeout
        self._allow_unsafe_durability = allow_unsafe_durability
        self._pool: asyncpg.Pool | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._outage_log = _OutageLog()
        self._creates = CreateBatcher(self._connection, self._create_one)

    async def open(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(
                self._dsn,
                min_size=0,  # no floor to restore (and warn about) while the database is away
                max_size=self._pool_size,
                timeout=self._connect_timeout,
                command_timeout=self._statement_timeout,
                server_settings=self._server_settings(),
                reset=_keep_session,
            )
            await self._check_durability()
        except StoreOpenError:
            await self.close()
            raise
        except Exception as exc:
            await self.close()
            cause = exc.__cause__ if isinstance(exc, StoreUnavailable) else exc
            raise StoreOpenError(
                f"cannot open the database: {describe_failure(cause or exc)}"
            ) from None

    def _server_settings(self) -> dict[str, str]:
        settings = {
            "application_name": "plantstore",
            "statement_timeout": str(int(self._statement_timeout * 1000)),
        }
        if not self._allow_unsafe_durability:
            settings["synchronous_commit"] = "on"  # whatever the database's default is
        if self._max_plants is not None:  # read by migration 0004's trigger
            settings["plantstore.max_plants_per_user"] = str(self._max_plants)
        return settings

    async def _check_durability(self) -> None:
        """Refuse a server that would acknowledge commits it has not made durable."""
        fsync, synchronous_commit = await self._fetchrow(
            "SELECT current_setting('fsync'), current_setting('synchronous_commit')"
        )
        unsafe = [
            f"{name}={value}"
            for name, value, safe in (
                ("fsync", fsync, fsync == "on"),
                ("synchronous_commit", synchronous_commit, synchronous_commit != "off"),
            )
            if not safe
        ]
        if not unsafe:
            return
        problem = f"PostgreSQL runs with {', '.join(unsafe)}, so a crash loses acknowledged writes"
        if not self._allow_unsafe_durability:
            raise StoreOpenError(
                f"{problem}; turn it on, or set PLANTSTORE_ALLOW_UNSAFE_DURABILITY=true to accept that"
            )
        log.warning("%s (allowed by PLANTSTORE_ALLOW_UNSAFE_DURABILITY)", problem)

    async def close(self) -> None:
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), timeout=self._budget)
            except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                pool.terminate()

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[asyncpg.pool.PoolConnectionProxy]:
        """A pooled connection, with every failure of the database turned into a 503."""
        if self._pool is None:
            raise RuntimeError("the store is not open")
        pool = self._pool
        try:
            async with asyncio.timeout(self._budget), pool.acquire() as connection:
                yield connection
        except Exception as exc:
            if not is_outage(exc):
                raise
            # After an outage, connect afresh instead of reusing connections that died.
            await pool.expire_connections()
            self._outage_log.note(exc)
            raise StoreUnavailable() from exc

    async def _fetchrow(self, query: str, *args: object) -> asyncpg.Record:
        async with self._connection() as connection:
            row = await connection.fetchrow(query, *args)
        assert row is not None, query
        return row

    async def ping(self) -> None:
        async with self._connection() as connection:
            await connection.fetchval("SELECT 1 FROM secrets LIMIT 1")

    async def cursor_key(self) -> bytes:
        (value,) = await self._fetchrow("SELECT value FROM secrets WHERE name = 'cursor_key'")
        return bytes.fromhex(value)

    async def create_plant(self, user_id: int, plant: PlantRecord) -> CreateOutcome:
        """Creates waiting together share one transaction (``postgres_batch``)."""
        return await self._creates.create(user_id, plant)

    async def _create_one(self, user_id: int, plant: PlantRecord) -> CreateOutcome:
        args = (user_id, plant.plant_id, plant.name, plant.tag)
        try:
            async with self._connection() as connection:
                row = await connection.fetchrow(_CREATE_PLANT, *args)
                while row is None:  # a racing create committed after our snapshot was taken
                    row = await connection.fetchrow(_FIND_PLANT, user_id, plant.plant_id)
                    if row is None:  # ...and was deleted again: try the insert once more
                        row = await connection.fetchrow(_CREATE_PLANT, *args)
        except asyncpg.PostgresError as exc:
            if exc.sqlstate == _QUOTA_SQLSTATE:
                return CreateOutcome.OVER_QUOTA
            raise
        created, name, tag = row
        if created:
            return CreateOutcome.CREATED
        same = name == plant.name and tag == plant.tag
        return CreateOutcome.UNCHANGED if same else CreateOutcome.CONFLICT

    async def list_plants(
        self, user_id: int, after_id: int | None, limit: int
    ) -> list[PlantRecord]:
        async with self._connection() as connection:
            if after_id is None:
                rows = await connection.fetch(_LIST_FIRST, user_id, limit)
            else:
                rows = await connection.fetch(_LIST_AFTER, user_id, after_id, limit)
        return [PlantRecord(row[0], row[1], row[2]) for row in rows]

    async def delete_plant(self, user_id: int, plant_id: int) -> bool:
        async with self._connection() as connection:
            status = await connection.execute(
                "DELETE FROM plants WHERE user_id = $1 AND id = $2", user_id, plant_id
            )
        return status == "DELETE 1"

    async def find_token(self, token_hash: str) -> TokenRecord | None:
        async with self._connection() as connection:
            row = await connection.fetchrow(_FIND_TOKEN, token_hash)
        return None if row is None else TokenRecord(*row)

    async def touch_token(self, token_id: int, when: float) -> None:
        task = asyncio.get_running_loop().create_task(self._touch(token_id, when))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _touch(self, token_id: int, when: float) -> None:
        try:
            async with self._connection() as connection:
                await connection.execute(
                    "UPDATE tokens SET last_used_at = $2 WHERE id = $1", token_id, when
                )
        except StoreUnavailable:
            pass  # 'last used' is best effort; the request itself was served

    async def create_token(
        self, user: str, token_hash: str, expires_at: float | None, label: str | None = None
    ) -> TokenRecord:
        async with self._connection() as connection, connection.transaction():
            return await _insert_token(connection, user, token_hash, expires_at, label)

    async def create_first_token(self, user: str, token_hash: str) -> TokenRecord | None:
        async with self._connection() as connection, connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock($1)", _FIRST_TOKEN_LOCK)
            if await connection.fetchval("SELECT 1 FROM tokens LIMIT 1") is not None:
                return None
            return await _insert_token(connection, user, token_hash, None, None)

    async def list_tokens(self, user: str | None) -> list[TokenRecord]:
        async with self._connection() as connection:
            if user is None:
                rows = await connection.fetch(f"{_LIST_TOKENS} ORDER BY tokens.id")
            else:
                rows = await connection.fetch(
                    f"{_LIST_TOKENS} WHERE users.issuer = '' AND users.name = $1 ORDER BY tokens.id",
                    user,
                )
        return [TokenRecord(*row) for row in rows]

    async def revoke_token(self, token_id: int) -> bool:
        async with self._connection() as connection:
            status = await connection.execute(
                "UPDATE tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
                token_id,
                time.time(),
            )
        return status == "UPDATE 1"

    async def create_sandbox_user(
        self, name: str, token_hash: str, expires_at: float, max_plants: int, label: str
    ) -> TokenRecord:
        async with self._connection() as connection:
            return await sandbox_postgres.create_sandbox_user(
                connection, name, token_hash, expires_at, max_plants, label
            )

    async def purge_expired_users(self, before: float, max_rows: int) -> tuple[int, float]:
        async with self._connection() as connection:
            started = time.perf_counter()
            deleted = await sandbox_postgres.purge_step(connection, before, max_rows)
            return deleted, time.perf_counter() - started


async def _insert_token(
    connection: asyncpg.pool.PoolConnectionProxy,
    user: str,
    token_hash: str,
    expires_at: float | None,
    label: str | None,
) -> TokenRecord:
    """Insert the user if new, then the token; the caller holds a transaction."""
    now = time.time()
    await connection.execute(
        "INSERT INTO users (name, created_at) VALUES ($1, $2) ON CONFLICT (issuer, name) DO NOTHING",
        user,
        now,
    )
    user_id = await connection.fetchval(
        "SELECT id FROM users WHERE issuer = '' AND name = $1", user
    )
    return await insert_token(connection, user_id, user, token_hash, now, expires_at, label)
