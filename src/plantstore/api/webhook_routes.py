"""The ``/webhooks`` routes, for Starlette's router (``app.py`` lists them)."""

from __future__ import annotations

from starlette.routing import Route

from . import webhooks

ROUTES = [
    Route("/webhooks", webhooks.webhooks_collection, methods=["GET", "POST"]),
    Route("/webhooks/{id}", webhooks.delete_webhook, methods=["DELETE"]),
    Route("/webhooks/{id}/deliveries", webhooks.list_deliveries, methods=["GET"]),
    Route(
        "/webhooks/{id}/deliveries/{delivery_id}/redeliver",
        webhooks.redeliver_one,
        methods=["POST"],
    ),
    Route("/webhooks/{id}/redeliver", webhooks.redeliver_failed, methods=["POST"]),
]
