"""The ``plantstore`` command: serve, token create|list|revoke, db upgrade|backup (and ``user``,
in ``cli_users``).

Every command migrates the database first, so any of them works on a fresh path. A bad
setting stops the command with one line (``Error: ...``), never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import click
import structlog

from . import __version__
from .cli_db import db_backup
from .database_url import redacted
from .durations import parse_duration
from .errors import PlantstoreError
from .logs import configure_logging
from .metrics_server import MULTIPROCESS_VARIABLE, serve_metrics
from .settings import Settings, SettingsError, load_settings
from .store import Store, StoreOpenError, TokenRecord, open_store
from .store.migrate import upgrade
from .times import rfc3339
from .tokens import hash_token, new_token

T = TypeVar("T")
_USER_NAME = re.compile(r"[^\s\x00-\x1f\x7f-\x9f]{1,128}")
_LABEL = re.compile(r"[^\x00-\x1f\x7f-\x9f]{1,128}")
DEFAULT_USER = "default"
MAX_HEADER_BYTES = 16 * 1024  # request line plus headers; granian (hyper) answers 431 past it


@click.group()
@click.version_option(__version__, prog_name="plantstore")
@click.option(
    "--database",
    "database_url",
    metavar="URL",
    help="sqlite:///relative.db, sqlite:////absolute.db or postgresql://user@host/db "
    "[env PLANTSTORE_DATABASE_URL]",
)
@click.pass_context
def main(ctx: click.Context, database_url: str | None) -> None:
    """The Plant Store API service and its operator commands."""
    ctx.obj = {"database_url": database_url}


def _settings(ctx: click.Context, **overrides: object) -> Settings:
    try:
        settings = load_settings(database_url=ctx.obj["database_url"], **overrides)
        upgrade(settings.database_url)
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None
    except StoreOpenError as exc:
        raise click.ClickException(str(exc)) from None
    return settings


def _with_store(settings: Settings, work: Callable[[Store], Awaitable[T]]) -> T:
    async def run() -> T:
        store = open_store(settings)
        await store.open()
        try:
            return await work(store)
        finally:
            await store.close()

    try:
        return asyncio.run(run())
    except (StoreOpenError, PlantstoreError) as exc:  # PlantstoreError: the database went away
        raise click.ClickException(str(exc)) from None


@main.command()
@click.option("--host", help="Address to listen on [env PLANTSTORE_HOST, default 127.0.0.1]")
@click.option("--port", type=int, help="Port to listen on [env PLANTSTORE_PORT, default 8000]")
@click.option(
    "--workers",
    type=int,
    help="Worker processes [env PLANTSTORE_WORKERS, default: one per core, at most 8]",
)
@click.pass_context
def serve(ctx: click.Context, host: str | None, port: int | None, workers: int | None) -> None:
    """Serve the API until interrupted."""
    settings = _settings(ctx, host=host, port=port, workers=workers)
    _issue_first_token(settings)
    for name, value in settings.model_dump().items():  # the workers read these back
        if value is not None:  # unset stays unset ("None" would be read back as a value)
            os.environ[f"PLANTSTORE_{name.upper()}"] = str(value)
    from granian import Granian
    from granian.constants import Interfaces, Loops
    from granian.http import HTTP1Settings

    configure_logging(settings.log_level)
    structlog.get_logger("plantstore").info(
        f"plantstore {__version__} serving http://{settings.host}:{settings.port}",
        version=__version__,
        address=f"http://{settings.host}:{settings.port}",
        database=redacted(settings.database_url),
        workers=settings.workers,
    )
    # A forked worker inherits this process's SIGTERM handler until granian installs its own,
    # 0.1 s later; a SIGTERM in between was lost, and that worker served on until killed.
    os.register_at_fork(
        before=_hold_stop_signals,
        after_in_parent=_release_stop_signals,
        after_in_child=_stop_signals_end_a_starting_worker,
    )
    with _metrics(settings.metrics_listen):
        Granian(
            "plantstore.app:create_app_from_env",
            factory=True,
            address=settings.host,
            port=settings.port,
            workers=settings.workers,
            interface=Interfaces.ASGI,
            loop=Loops.uvloop,  # measured ahead of asyncio; rloop breaks asyncpg's transports
            http1_settings=HTTP1Settings(
                header_read_timeout=int(settings.header_timeout * 1000),
                max_buffer_size=MAX_HEADER_BYTES,  # a longer head is refused (431) unread
            ),
            workers_kill_timeout=math.ceil(settings.shutdown_timeout),
            respawn_failed_workers=True,  # a worker that died is replaced; the rest serve on
        ).serve()


_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
_SUPERVISOR_PID = os.getpid()  # the hooks below act on forks of this process (workers) only
_held_mask: set[int | signal.Signals] = set()


def _hold_stop_signals() -> None:
    """Around each fork, the kernel holds stop signals: Python would drop one caught mid-fork."""
    if os.getpid() == _SUPERVISOR_PID:
        _held_mask.clear()
        _held_mask.update(signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS))


def _release_stop_signals() -> None:
    if os.getpid() == _SUPERVISOR_PID:
        signal.pthread_sigmask(signal.SIG_SETMASK, _held_mask)


def _stop_signals_end_a_starting_worker() -> None:
    """In a just-forked worker: a stop signal ends it, until granian's handler replaces this.

    Installed while the signals are still held, so one sent during the fork is delivered
    here, to this handler, once they are released.
    """
    if os.getppid() != _SUPERVISOR_PID:
        return  # a fork made by a worker, or by something else: not ours to change
    for stop in _STOP_SIGNALS:
        signal.signal(stop, _end_starting_worker)
    signal.pthread_sigmask(signal.SIG_SETMASK, _held_mask)


def _end_starting_worker(signum: int, frame: object) -> None:
    os._exit(0)  # nothing is open yet: the store opens after granian takes the signals over


@contextlib.contextmanager
def _metrics(listen: tuple[str, int] | None) -> Iterator[None]:
    """``/metrics`` on its own address, fed by every worker through a fresh shared directory."""
    if listen is None:
        yield
        return
    host, port = listen
    with tempfile.TemporaryDirectory(prefix="plantstore-metrics-") as directory:
        try:
            serve_metrics(host, port, directory)
        except OSError as exc:
            raise click.ClickException(
                f"cannot serve metrics on {host}:{port} ({exc.strerror}); "
                "set PLANTSTORE_METRICS_ADDRESS to another address, or to off"
            ) from None
        try:
            yield
        finally:
            del os.environ[MULTIPROCESS_VARIABLE]


def _issue_first_token(settings: Settings) -> None:
    token = new_token()

    async def issue(store: Store) -> str | None:
        record = await store.create_first_token(DEFAULT_USER, hash_token(token))
        return None if record is None else token

    issued = _with_store(settings, issue)
    if issued is not None:
        click.echo(f"No token existed, so one was issued for user '{DEFAULT_USER}' (shown once):")
        click.echo(f"    {issued}")


@main.group()
def token() -> None:
    """Issue, list and revoke bearer tokens."""


def _parse_duration(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError:
        raise click.BadParameter(
            "use a number and a unit: 90s, 15m, 12h, 30d or 2w", param_hint="--expires-in"
        ) from None


@token.command("create")
@click.argument("user")
@click.option("--expires-in", metavar="DURATION", help="e.g. 30d, 12h, 15m, 90s, 2w")
@click.option("--label", help="A note shown by 'token list', e.g. 'ci runner'")
@click.pass_context
def token_create(ctx: click.Context, user: str, expires_in: str | None, label: str | None) -> None:
    """Issue a token for USER; the token is printed once, alone on the last line."""
    if not _USER_NAME.fullmatch(user):
        raise click.BadParameter(
            "1-128 characters, no spaces or control characters", param_hint="USER"
        )
    if label is not None and not _LABEL.fullmatch(label):
        raise click.BadParameter("1-128 characters, no control characters", param_hint="--label")
    lifetime = _parse_duration(expires_in)
    settings = _settings(ctx.find_root())
    expires_at = None if lifetime is None else time.time() + lifetime
    secret = new_token()
    record = _with_store(
        settings, lambda store: store.create_token(user, hash_token(secret), expires_at, label)
    )
    click.echo(
        f"Token {record.token_id} for user '{user}', expires {_when(record.expires_at, 'never')}. "
        "Store it now; it is not shown again:"
    )
    click.echo(secret)


@token.command("list")
@click.argument("user", required=False)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per token.")
@click.pass_context
def token_list(ctx: click.Context, user: str | None, as_json: bool) -> None:
    """List tokens (never their secrets), of USER or of everyone, and the users of JWTs."""
    settings = _settings(ctx.find_root())

    from .cli_users import jwt_user_rows  # the user group's module imports this one

    async def listing(store: Store) -> list[dict[str, Any]]:
        tokens = [_token_fields(record) for record in await store.list_tokens(user)]
        return tokens + jwt_user_rows(await store.list_users(), user)

    rows_of_fields = _with_store(settings, listing)
    if as_json:
        for fields in rows_of_fields:
            click.echo(json.dumps(fields))
        return
    header: tuple[str, ...] = ("ID", "USER", "CREATED", "EXPIRES", "LAST USED", "REVOKED")
    header += ("LABEL", "ISSUER", "DISABLED")
    rows = [header] + [_token_row(fields) for fields in rows_of_fields]
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    for row in rows:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def _token_fields(record: TokenRecord) -> dict[str, Any]:
    return {
        "id": record.token_id,
        "user": record.user,
        "created": _when(record.created_at, None),
        "expires": _when(record.expires_at, None),
        "last_used": _when(record.last_used_at, None),
        "revoked": _when(record.revoked_at, None),
        "label": record.label,
        "issuer": None,
        "disabled": _when(record.user_disabled_at, None),
    }


def _token_row(fields: dict[str, Any]) -> tuple[str, ...]:
    return tuple("-" if value is None else str(value) for value in fields.values())


def _when(timestamp: float | None, missing: str | None) -> str | None:
    return missing if timestamp is None else rfc3339(timestamp)


@token.command("revoke")
@click.argument("token_id", type=int)
@click.pass_context
def token_revoke(ctx: click.Context, token_id: int) -> None:
    """Revoke a token by its id (see ``token list``); it stops working within a second."""
    settings = _settings(ctx.find_root())
    if not _with_store(settings, lambda store: store.revoke_token(token_id)):
        raise click.ClickException(f"no active token with id {token_id}")
    click.echo(f"Token {token_id} revoked.")


@main.group()
def db() -> None:
    """Database schema and backup commands."""


db.add_command(db_backup)


@db.command("upgrade")
@click.pass_context
def db_upgrade(ctx: click.Context) -> None:
    """Create the schema or bring it to the newest revision."""
    settings = _settings(ctx.find_root())
    click.echo(f"Database {settings.database_url} is at the newest schema revision.")


# The ``user`` group lives in a module of its own, which registers itself on ``main``.
from . import cli_users  # noqa: E402, F401
from .cli_webhooks import webhook  # noqa: E402 (it builds on the helpers above)

main.add_command(webhook)
