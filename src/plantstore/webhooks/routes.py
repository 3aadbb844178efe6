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

from ..auth.bearer import Authenticator
from ..errors import BadRequest, NotFound, QuotaExceeded
from ..http.parsing import (
    check_content_type,
    decode_strict,
    parse_limit,
    parse_path_id,
    query_params,
    read_body,
    single_param,
)
from ..http.responses import API_HEADERS, encoder, json_response
from ..http.routing import Route
from ..settings import Settings
from .addresses import check_webhook_url
from .dispatcher import Dispatcher
from .events import EVENT_TYPES, events_bits, events_of, rfc3339
from .schemas import (
    Delivery,
    Redelivered,
    Webhook,
    WebhookCreated,
    new_webhook_decoder,
    redeliver_since_decoder,
)
from .signing import new_secret
from .store import STATE_NAMES, DeliveryRecord, Subscription, WebhookStore

DELIVERIES_PAGE_CAP = 100


class WebhookRoutes:
    """The ``/webhooks`` handlers; ``start`` hands them the store and the dispatcher."""

    def __init__(self, settings: Settings) -> None:
        self._allow_private = settings.webhook_allow_private
        self._cap = settings.webhook_max_subscriptions
        self._max_body_bytes = settings.max_body_bytes
        self._body_timeout = settings.body_timeout

    def start(
        self, webhooks: WebhookStore, authenticator: Authenticator, dispatcher: Dispatcher
    ) -> None:
        self._webhooks = webhooks
        self._authenticate = authenticator.authenticate
        self._dispatcher = dispatcher

    def routes(self) -> list[Route]:
        return [
            Route("GET", "/webhooks", self.list),
            Route("POST", "/webhooks", self.create),
            Route("DELETE", "/webhooks/{id}", self.delete),
            Route("GET", "/webhooks/{id}/deliveries", self.list_deliveries),
            Route("POST", "/webhooks/{id}/deliveries/{delivery_id}/redeliver", self.redeliver_one),
            Route("POST", "/webhooks/{id}/redeliver", self.redeliver_failed),
        ]

    async def create(self, request: Request) -> Response:
        caller = await self._authenticate(request)
        new = decode_strict(await self._json_body(request), new_webhook_decoder, "NewWebhook")
        await check_webhook_url(new.url, self._allow_private)
        events = list(EVENT_TYPES) if isinstance(new.events, msgspec.UnsetType) else new.events
        secret = new_secret()
        created = await self._webhooks.create_subscription(
            caller.user_id, new.url, events_bits(events), secret, self._cap
        )
        if created is None:
            raise QuotaExceeded(
                f"you already hold the most webhooks allowed ({self._cap} subscriptions)"
            )
        body = WebhookCreated(
            created.subscription_id, created.url, events_of(created.events), secret
        )
        return json_response(encoder.encode(body))

    async def list(self, request: Request) -> Response:
        caller = await self._authenticate(request)
        found = await self._webhooks.list_subscriptions(user_id=caller.user_id)
        return json_response(encoder.encode([_listed(subscription) for subscription in found]))

    async def delete(self, request: Request) -> Response:
        caller = await self._authenticate(request)
        subscription_id = _path_id(request, "id")
        if not await self._webhooks.delete_subscription(caller.user_id, subscription_id):
            raise NotFound(f"you have no webhook with id {subscription_id}")
        return Response(status_code=204, headers=API_HEADERS)

    async def list_deliveries(self, request: Request) -> Response:
        caller = await self._authenticate(request)
        subscription_id = _path_id(request, "id")
        limit = parse_limit(
            single_param(query_params(request.scope["query_string"]), "limit"),
            DELIVERIES_PAGE_CAP,
        )
        found = await self._webhooks.list_deliveries(caller.user_id, subscription_id, limit)
        if found is None:
            raise NotFound(f"you have no webhook with id {subscription_id}")
        return json_response(encoder.encode([_delivery(record) for record in found]))

    async def redeliver_one(self, request: Request) -> Response:
        caller = await self._authenticate(request)
        subscription_id = _path_id(request, "id")
        delivery_id = _path_id(request, "delivery_id")
        if not await self._webhooks.redeliver(caller.user_id, subscription_id, delivery_id):
            raise NotFound(f"webhook {subscription_id} has no delivery with id {delivery_id}")
        self._dispatcher.wake()
        return json_response(encoder.encode(Redelivered(1)), status=202)

    async def redeliver_failed(self, request: Request) -> Response:
        caller = await self._authenticate(request)
        body_bytes = await self._json_body(request)  # 415 and 413 before a malformed id
        subscription_id = _path_id(request, "id")
        body = decode_strict(body_bytes, redeliver_since_decoder, "body")
        since = _parse_time(body.since)
        count = await self._webhooks.redeliver_failed(caller.user_id, subscription_id, since)
        if count is None:
            raise NotFound(f"you have no webhook with id {subscription_id}")
        self._dispatcher.wake()
        return json_response(encoder.encode(Redelivered(count)), status=202)

    async def _json_body(self, request: Request) -> bytes:
        check_content_type(request.headers.getlist("content-type"))
        return await read_body(request, self._max_body_bytes, self._body_timeout)


def _path_id(request: Request, name: str) -> int:
    """A decimal int64, as ``/plants`` reads its id: 400 if not; any that is not the
    caller's (0 and negatives included) is a 404."""
    return parse_path_id(request.path_params[name], name)


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
        record.event_type,
        record.plant_id,
        rfc3339(record.occurred_at),
        STATE_NAMES[record.state],
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
