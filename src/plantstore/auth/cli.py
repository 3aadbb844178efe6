"""``plantstore token create|list|revoke``: bearer tokens an operator issues, shown once and
stored only as a hash; and the first token ``serve`` issues on an empty database."""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from typing import Any

import click

from ..commandline import echo_table, settings_for, when, with_database
from ..db import Database
from ..formats import parse_duration
from ..ops.logs import log_line
from ..settings import Settings
from .backends import token_store_for
from .cli_users import jwt_user_rows
from .store import TokenRecord
from .tokens import hash_token, new_token

_USER_NAME = re.compile(r"[^\s\x00-\x1f\x7f-\x9f]{1,128}")
_LABEL = re.compile(r"[^\x00-\x1f\x7f-\x9f]{1,128}")
DEFAULT_USER = "default"


def issue_first_token(settings: Settings) -> None:
    """Issue a token for user ``default`` if the database holds none, and print it once."""
    token = new_token()

    async def issue(database: Database) -> str | None:
        record = await token_store_for(database).create_first_token(DEFAULT_USER, hash_token(token))
        return None if record is None else token

    issued = with_database(settings, issue)
    if issued is None:
        return
    if sys.stdout.isatty():
        click.echo(f"No token existed, so one was issued for user '{DEFAULT_USER}' (shown once):")
        click.echo(f"    {issued}")
        return
    # Off a terminal stdout is the log, so the token is one JSON line of it, token included.
    # Not in a file only the service user reads instead: stdout is what every way of running
    # the service shows its operator (docker logs, journalctl), where a container's filesystem
    # may be read-only or thrown away and PostgreSQL gives no directory to put one in. The
    # cost: whoever reads the stored log can read it until it is revoked, which the docs say
    # to do once tokens of one's own exist. It is in the event once, alone between spaces as
    # before, so a script that takes the log's first word starting with pst_ still finds it.
    click.echo(
        log_line(
            f"No token existed, so one was issued for user '{DEFAULT_USER}'; it is shown once, "
            f"in this line only: {issued} (revoke it once you have tokens of your own)",
            "warning",  # a step for the operator, and shown whatever the log level
            "plantstore.auth",
            user=DEFAULT_USER,
        )
    )


@click.group()
def token() -> None:
    """Issue, list and revoke bearer tokens."""


def _parse_duration(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError:
        with contextlib.suppress(ValueError):  # well formed, so it is zero
            parse_duration(text, allow_zero=True)
            raise click.BadParameter(
                f"must be positive, not {text!r}: a token that expires at once is no use",
                param_hint="--expires-in",
            ) from None
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
    settings = settings_for(ctx)
    expires_at = None if lifetime is None else time.time() + lifetime
    secret = new_token()
    record = with_database(
        settings,
        lambda database: token_store_for(database).create_token(
            user, hash_token(secret), expires_at, label
        ),
    )
    click.echo(
        f"Token {record.token_id} for user '{user}', expires {when(record.expires_at, 'never')}. "
        "Store it now; it is not shown again:"
    )
    click.echo(secret)


@token.command("list")
@click.argument("user", required=False)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per token.")
@click.pass_context
def token_list(ctx: click.Context, user: str | None, as_json: bool) -> None:
    """List tokens (never their secrets), of USER or of everyone, and the users of JWTs."""
    settings = settings_for(ctx)

    async def listing(database: Database) -> list[dict[str, Any]]:
        store = token_store_for(database)
        tokens = [_token_fields(record) for record in await store.list_tokens(user)]
        return tokens + jwt_user_rows(await store.list_users(), user)

    rows_of_fields = with_database(settings, listing)
    if as_json:
        for fields in rows_of_fields:
            click.echo(json.dumps(fields))
        return
    header: tuple[str, ...] = ("ID", "USER", "CREATED", "EXPIRES", "LAST USED", "REVOKED")
    header += ("LABEL", "ISSUER", "DISABLED")
    echo_table(header, [_token_row(fields) for fields in rows_of_fields])


def _token_fields(record: TokenRecord) -> dict[str, Any]:
    return {
        "id": record.token_id,
        "user": record.user,
        "created": when(record.created_at),
        "expires": when(record.expires_at),
        "last_used": when(record.last_used_at),
        "revoked": when(record.revoked_at),
        "label": record.label,
        "issuer": None,
        "disabled": when(record.user_disabled_at),
    }


def _token_row(fields: dict[str, Any]) -> tuple[str, ...]:
    return tuple("-" if value is None else str(value) for value in fields.values())


@token.command("revoke")
@click.argument("token_id", type=int)
@click.pass_context
def token_revoke(ctx: click.Context, token_id: int) -> None:
    """Revoke a token by its id (see 'token list'); it stops working within a second."""
    settings = settings_for(ctx)
    if not with_database(
        settings, lambda database: token_store_for(database).revoke_token(token_id)
    ):
        raise click.ClickException(f"no active token with id {token_id}")
    click.echo(f"Token {token_id} revoked.")
