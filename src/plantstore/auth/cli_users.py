"""``plantstore user list|disable|enable``: the users of both kinds, and shutting one out.

A user is named within its namespace: the operator's (users of ``token create``) or an
identity provider's issuer (users of JWTs). ``disable NAME`` finds NAME in whichever
namespace holds it; when two do, ``--issuer URL`` or ``--operator`` says which. A disabled
user's tokens, of either kind, are refused within a second, and work again once enabled.
"""

from __future__ import annotations

import json
from typing import Any

import click

from ..commandline import echo_table, settings_for, when, with_database
from ..db import Database
from .backends import token_store_for
from .store import OPERATOR, UserRecord


@click.group()
def user() -> None:
    """List users (operator-created and from an identity provider); disable or enable one."""


@user.command("list")
@click.option("--issuer", help="Only the users of this JWT issuer.")
@click.option("--operator", is_flag=True, help="Only the users created by 'token create'.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per user.")
@click.pass_context
def user_list(ctx: click.Context, issuer: str | None, operator: bool, as_json: bool) -> None:
    """List users with their namespace, plants, active tokens and state; users made by
    POST /sandbox/tokens show the issuer (sandbox)."""
    namespace = _namespace(issuer, operator)
    settings = settings_for(ctx)
    records = with_database(
        settings, lambda database: token_store_for(database).list_users(namespace)
    )
    if as_json:
        for record in records:
            click.echo(json.dumps(user_fields(record)))
        return
    header = ("ID", "USER", "ISSUER", "CREATED", "PLANTS", "TOKENS", "DISABLED")
    echo_table(header, [_row(record) for record in records])


def user_fields(record: UserRecord) -> dict[str, Any]:
    return {
        "id": record.user_id,
        "user": record.name,
        "issuer": record.issuer if record.from_provider else None,
        "created": when(record.created_at),
        "plants": record.plant_count,
        "active_tokens": None if record.from_provider else record.active_tokens,
        "disabled": when(record.disabled_at),
        # Sandbox users are in the operator's namespace but were made by visitors: marked, not
        # left out, so that an abusive one can still be found and disabled.
        "sandbox_expires": when(record.sandbox_expires_at),
    }


def jwt_user_rows(users: list[UserRecord], name: str | None) -> list[dict[str, Any]]:
    """A row per user of an identity provider: its tokens are the provider's, not stored
    here, so the row stands for all of them (``id`` null, ``created``: first seen)."""
    return [
        {
            "id": None,
            "user": record.name,
            "created": when(record.created_at),
            "expires": None,
            "last_used": None,
            "revoked": None,
            "label": "JWT",
            "issuer": record.issuer,
            "disabled": when(record.disabled_at),
        }
        for record in users
        if record.from_provider and name in (None, record.name)
    ]


def _row(record: UserRecord) -> tuple[str, ...]:
    fields = user_fields(record)
    if fields.pop("sandbox_expires") is not None:
        fields["issuer"] = "(sandbox)"
    elif fields["issuer"] is None:
        fields["issuer"] = "(operator)"
    if fields["active_tokens"] is None:
        fields["active_tokens"] = "JWT"
    return tuple("-" if value is None else str(value) for value in fields.values())


@user.command("disable")
@click.argument("name")
@click.option("--issuer", help="The user of this JWT issuer.")
@click.option("--operator", is_flag=True, help="The user created by 'token create'.")
@click.pass_context
def user_disable(ctx: click.Context, name: str, issuer: str | None, operator: bool) -> None:
    """Refuse NAME's tokens (pst_ and JWT) from now on; takes effect within a second."""
    _set_disabled(ctx, name, _namespace(issuer, operator), disabled=True)


@user.command("enable")
@click.argument("name")
@click.option("--issuer", help="The user of this JWT issuer.")
@click.option("--operator", is_flag=True, help="The user created by 'token create'.")
@click.pass_context
def user_enable(ctx: click.Context, name: str, issuer: str | None, operator: bool) -> None:
    """Accept NAME's tokens again."""
    _set_disabled(ctx, name, _namespace(issuer, operator), disabled=False)


def _namespace(issuer: str | None, operator: bool) -> str | None:
    if operator and issuer is not None:
        raise click.UsageError("give --issuer or --operator, not both")
    return OPERATOR if operator else issuer


def _set_disabled(ctx: click.Context, name: str, namespace: str | None, *, disabled: bool) -> None:
    settings = settings_for(ctx)

    async def change(database: Database) -> tuple[UserRecord, bool]:
        store = token_store_for(database)
        candidates = await store.list_users(namespace)
        if namespace and not any(record.name == name for record in candidates):
            # Issuers are matched exactly: "https://idp/" is not "https://idp".
            other = namespace.removesuffix("/") if namespace.endswith("/") else f"{namespace}/"
            if any(record.name == name for record in await store.list_users(other)):
                raise click.ClickException(
                    f"no user named '{name}' of issuer {namespace}, but there is one of "
                    f"{other} (the issuer must match exactly, trailing slash included)"
                )
        target = _one_user(candidates, name, namespace)
        return target, await store.set_user_disabled(target.user_id, disabled)

    target, changed = with_database(settings, change)
    where = f"of {target.issuer}" if target.from_provider else "(operator)"
    state = "disabled" if disabled else "enabled"
    click.echo(
        f"User '{name}' {where} {state}."
        if changed
        else f"User '{name}' {where} was {state} already."
    )


def _one_user(candidates: list[UserRecord], name: str, namespace: str | None) -> UserRecord:
    matches = [record for record in candidates if record.name == name]
    if not matches:
        where = {None: "", OPERATOR: " among the operator's users"}.get(
            namespace, f" of issuer {namespace}"
        )
        raise click.ClickException(f"no user named '{name}'{where}")
    if len(matches) > 1:
        issuers = ", ".join(record.issuer or "(operator)" for record in matches)
        raise click.ClickException(
            f"'{name}' is a user of several namespaces ({issuers}); "
            "say which with --issuer URL or --operator"
        )
    return matches[0]
