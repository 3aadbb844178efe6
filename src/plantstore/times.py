"""Moments as the service writes them: RFC 3339, UTC, with ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(timestamp: float) -> str:
    """``2026-11-23T18:04:05Z``: whole seconds, rounded down (never past an expiry)."""
    return datetime.fromtimestamp(int(timestamp), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
