"""Signed webhooks for plant changes: subscriptions per user (``routes``, ``cli``), an outbox
written by the database in the change's own transaction (``store``, ``sqlite``,
``postgres``), and a dispatcher that claims due deliveries with leases and sends them,
signed per Standard Webhooks, at least once through crashes."""
