"""Sandbox mode, for a docs site's "Try it": a visitor gets a token for a fresh user of its own
with a small quota, limited per client address (``issuer``, ``routes``); once it expires the
user and everything it owns are deleted in small background steps (``purge``)."""
