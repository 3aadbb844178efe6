"""``plantstore webhook list|disable|enable|rotate-secret``: operators' view of subscriptions."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from ..auth.backends import token_store_for
from ..auth.store import OPERATOR
from ..commandline import echo_table, settings_for, when, with_database
from ..db import Database
from ..settings import Settings
from .backends import webhook_store_for
from .events import events_of
from .signing import new_secret
from .store import Subscription, WebhookStore

T = TypeVar("T")
ROTATION_OVERLAP = 24 * 3600.0  # the old secret keeps signing beside the new one this long


def _with_webhooks(settings: Settings, work: Callable[[WebhookStore], Awaitable[T]]) -> T:
    async def run(database: Database) -> T:
        webhooks = webhook_store_for(database)
        await webhooks.open()
        try:
            return await work(webhooks)
        finally:
            await webhooks.close()

    return with_database(settings, run)


def _change(
    ctx: click.Context, subscription_id: int, change: Callable[[WebhookStore], Awaitable[bool]]
) -> None:
    """Apply ``change`` to one subscription; a one-line error if there is no such one."""
    if not _with_webhooks(settings_for(ctx), change):
        raise click.ClickException(f"no webhook with id {subscription_id}")


@click.group()
def webhook() -> None:
    """Webhook subscriptions of every user."""


@webhook.command("list")
@click.argument("user", required=False)
@click.option("--issuer", help="Only the users of this JWT issuer.")
@click.option("--operator", is_flag=True, help="Only the users created by 'token create'.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per subscription.")
@click.pass_context
def webhook_list(
    ctx: click.Context, user: str | None, issuer: str | None, operator: bool, as_json: bool
) -> None:
    """List subscriptions (never their secrets), of USER or of everyone.

    A name may be a user of several namespaces (the operator's, and each JWT issuer's):
    the ISSUER column tells them apart, and --issuer URL or --operator keeps one."""
    if operator and issuer is not None:
        raise click.UsageError("give --issuer or --operator, not both")
    namespace = OPERATOR if operator else issuer
    settings = settings_for(ctx)

    async def listing(database: Database) -> list[tuple[Subscription, str]]:
        users = await token_store_for(database).list_users(namespace)
        issuers = {record.user_id: record.issuer for record in users}
        webhooks = webhook_store_for(database)
        await webhooks.open()
        try:
            found = await webhooks.list_subscriptions(user=user)
        finally:
            await webhooks.close()
        return [
            (subscription, issuers[subscription.user_id])
            for subscription in found
            if subscription.user_id in issuers and (user is None or subscription.user == user)
        ]

    found = with_database(settings, listing)
    if as_json:
        for subscription, issuer in found:
            click.echo(json.dumps({**_fields(subscription), "issuer": issuer or None}))
        return
    header = ("ID", "USER", "ISSUER", "URL", "EVENTS", "ENABLED", "CREATED", "DISABLED BECAUSE")
    echo_table(header, [_row(subscription, owner) for subscription, owner in found])


def _row(subscription: Subscription, issuer: str) -> tuple[str, ...]:
    """The table's cells; ISSUER as ``plantstore user list`` shows it."""
    cells = [_cell(value) for value in _fields(subscription).values()]
    cells.insert(2, issuer if issuer != OPERATOR else "(operator)")
    return tuple(cells)


def _fields(subscription: Subscription) -> dict[str, Any]:
    return {
        "id": subscription.subscription_id,
        "user": subscription.user,
        "url": subscription.url,
        "events": events_of(subscription.events),
        "enabled": subscription.enabled,
        "created": when(subscription.created_at),
        "disabled_reason": None if subscription.enabled else subscription.disabled_reason,
    }


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


@webhook.command("disable")
@click.argument("subscription_id", type=int)
@click.pass_context
def webhook_disable(ctx: click.Context, subscription_id: int) -> None:
    """Stop delivering to a subscription; its undelivered events are marked failed (the
    user can redeliver them once it is enabled again)."""
    reason = "disabled by an operator"
    _change(ctx, subscription_id, lambda w: w.set_enabled(subscription_id, False, reason))
    click.echo(f"Webhook {subscription_id} disabled.")


@webhook.command("enable")
@click.argument("subscription_id", type=int)
@click.pass_context
def webhook_enable(ctx: click.Context, subscription_id: int) -> None:
    """Deliver to a subscription again (its failure record starts afresh)."""
    _change(ctx, subscription_id, lambda w: w.set_enabled(subscription_id, True, None))
    click.echo(f"Webhook {subscription_id} enabled.")


@webhook.command("rotate-secret")
@click.argument("subscription_id", type=int)
@click.pass_context
def webhook_rotate_secret(ctx: click.Context, subscription_id: int) -> None:
    """Issue a new signing secret; the old one keeps signing beside it for 24 hours."""
    secret = new_secret()
    until = time.time() + ROTATION_OVERLAP
    _change(ctx, subscription_id, lambda w: w.rotate_secret(subscription_id, secret, until))
    click.echo(
        f"Webhook {subscription_id} signs with this new secret; the old one also signs until "
        f"{when(until)}. Give it to the receiver now; it is not shown again:"
    )
    click.echo(secret)
