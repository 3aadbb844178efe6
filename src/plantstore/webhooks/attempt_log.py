"""One access-style log line per webhook attempt, without secrets.

Lines go through the access log's writer (``logs.JSONLines``: gathered and written together),
not through ``logging``: a backlog is sent at thousands of attempts a second on the API's own
core, and a ``logging`` record cost about as much as the HTTP attempt itself.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ..ops.logs import AccessLog, AttemptLine
from .answer import Answer
from .store import ClaimedDelivery, Outcome


def log_attempt(
    lines: AccessLog, delivery: ClaimedDelivery, answer: Answer, outcome: Outcome
) -> None:
    """Where (``scheme://host:port`` only: receivers such as Slack or Zapier put secrets in
    the path and the query, and credentials are refused anyway), what, and how long."""
    lines.write(
        AttemptLine(
            webhook_id=delivery.msg_id,
            origin=origin(delivery.url),
            subscription_id=delivery.subscription_id,
            attempt=delivery.attempts + 1,
            status=answer.status,
            error=answer.error,
            outcome=outcome.value,
            duration_ms=round(answer.duration * 1000, 1),
        )
    )


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: no credentials, path, query or fragment."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "-"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{f':{port}' if port else ''}"
