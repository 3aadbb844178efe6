"""Signed webhooks for plant changes: subscriptions, signing, the SSRF guard and dispatch."""
