"""``/webhooks``: subscribe, list, unsubscribe, and look at or repeat deliveries.

The same precedence as ``/plants``: authentication (401), media type (415), size (413),
validation (400: the body and path ids), then the outcome (403 at the subscription cap,
404 for an id, well-formed, that is not the caller's).
"""

from __future__ import annotations

import datetime

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from ..errors import BadRequest, NotFound, QuotaExceeded
from ..schemas import encoder
from ..store.webhooks_base import STATE_NAMES, DeliveryRecord, Subscription, WebhookStore
from ..webhooks.addresses import check_webhook_url
from ..webhooks.events import EVENT_TYPES, events_bits, events_of, rfc3339
from ..webhooks.schemas import (
    Delivery,
    Redelivered,
    Webhook,
    WebhookCreated,
    new_webhook_decoder,
    redeliver_since_decoder,
)
from ..webhooks.signing import new_secret
from .parsing import (
    check_content_type,
    decode_strict,
    parse_limit,
    parse_plant_id,
    query_params,
    read_body,
    single_param,
)
from .responses import API_HEADERS, json_response
from .services import Services, services_of

DELIVERIES_PAGE_CAP = 100


async def webhooks_collection(request: Request) -> Response:
    if request.method == "POST":
        return await create_webhook(request)
    return await list_webhooks(request)


async def create_webhook(request: Request) -> Response:
    services = services_of(request)
    caller = await services.authenticator.authenticate(request)
    new = decode_strict(await _json_body(services, request), new_webhook_decoder, "NewWebhook")
    await check_webhook_url(new.url, services.settings.webhook_allow_private)
    events = list(EVENT_TYPES) if isinstance(new.events, msgspec.UnsetType) else new.events
    secret = new_secret()
    cap = services.settings.webhook_max_subscriptions
    created = await _webhooks(services).create_subscription(
        caller.user_id, new.url, events_bits(events), secret, cap
    )
    if created is None:
        raise QuotaExceeded(f"you already hold the most webhooks allowed ({cap} subscriptions)")
    body = WebhookCreated(created.subscription_id, created.url, events_of(created.events), secret)
    return json_response(encoder.encode(body))


async def list_webhooks(request: Request) -> Response:
    services = services_of(request)
    caller = await services.authenticator.authenticate(request)
    found = await _webhooks(services).list_subscriptions(user_id=caller.user_id)
    return json_response(encoder.encode([_listed(subscription) for subscription in found]))


async def delete_webhook(request: Request) -> Response:
    services = services_of(request)
    caller = await services.authenticator.authenticate(request)
    subscription_id = _path_id(request, "id")
    if not await _webhooks(services).delete_subscription(caller.user_id, subscription_id):
        raise NotFound(f"you have no webhook with id {subscription_id}")
    return Response(status_code=204, headers=API_HEADERS)


async def list_deliveries(request: Request) -> Response:
    services = services_of(request)
    caller = await services.authenticator.authenticate(request)
    subscription_id = _path_id(request, "id")
    limit = parse_limit(
        single_param(query_params(request.scope["query_string"]), "limit"), DELIVERIES_PAGE_CAP
    )
    found = await _webhooks(services).list_deliveries(caller.user_id, subscription_id, limit)
    if found is None:
        raise NotFound(f"you have no webhook with id {subscription_id}")
    return json_response(encoder.encode([_delivery(record) for record in found]))


async def redeliver_one(request: Request) -> Response:
    services = services_of(request)
    caller = await services.authenticator.authenticate(request)
    subscription_id = _path_id(request, "id")
    delivery_id = _path_id(request, "delivery_id")
    webhooks = _webhooks(services)
    if not await webhooks.redeliver(caller.user_id, subscription_id, delivery_id):
        raise NotFound(f"webhook {subscription_id} has no delivery with id {delivery_id}")
    _wake(services)
    return json_response(encoder.encode(Redelivered(1)), status=202)


async def redeliver_failed(request: Request) -> Response:
    services = services_of(request)
    caller = await services.authenticator.authenticate(request)
    body_bytes = await _json_body(services, request)  # 415 and 413 before a malformed id
    subscription_id = _path_id(request, "id")
    body = decode_strict(body_bytes, redeliver_since_decoder, "body")
    since = _parse_time(body.since)
    count = await _webhooks(services).redeliver_failed(caller.user_id, subscription_id, since)
    if count is None:
        raise NotFound(f"you have no webhook with id {subscription_id}")
    _wake(services)
    return json_response(encoder.encode(Redelivered(count)), status=202)


def _webhooks(services: Services) -> WebhookStore:
    assert services.webhooks is not None, "the lifespan opens the webhook store"
    return services.webhooks


def _wake(services: Services) -> None:
    if services.dispatcher is not None:
        services.dispatcher.wake()


async def _json_body(services: Services, request: Request) -> bytes:
    check_content_type(request.headers.get("content-type"))
    settings = services.settings
    return await read_body(request, settings.max_body_bytes, settings.body_timeout)


def _path_id(request: Request, name: str) -> int:
    """A decimal int64, as ``/plants`` reads its id: 400 if not; any that is not the
    caller's (0 and negatives included) is a 404."""
    return parse_plant_id(request.path_params[name], name)


def _parse_time(text: str) -> float:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None or "T" not in text.upper():
        raise BadRequest("`since` must be an RFC 3339 date-time with a time zone")
    return moment.timestamp()


def _listed(subscription: Subscription) -> Webhook:
    webhook = Webhook(
        subscription.subscription_id,
        subscription.url,
        events_of(subscription.events),
        subscription.enabled,
    )
    if not subscription.enabled and subscription.disabled_reason:
        webhook.disabled_reason = subscription.disabled_reason
    return webhook


def _delivery(record: DeliveryRecord) -> Delivery:
    delivery = Delivery(
        record.delivery_id,
        record.msg_id,
        record.event_type,  # type: ignore[arg-type]
        record.plant_id,
        rfc3339(record.occurred_at),
        STATE_NAMES[record.state],  # type: ignore[arg-type]
        record.attempts,
    )
    if record.state == 0:
        delivery.next_attempt_at = rfc3339(record.next_attempt_at)
    if record.finished_at is not None:
        delivery.finished_at = rfc3339(record.finished_at)
    if record.last_status is not None:
        delivery.last_status = record.last_status
    if record.last_error is not None:
        delivery.last_error = record.last_error
    return delivery
