"""Log setup: JSON lines when stdout is not a terminal, readable lines when it is."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import msgspec
import structlog


def configure_logging(level: str) -> None:
    """Route stdlib and structlog records through one structlog formatter on stdout."""
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer()
        if sys.stdout.isatty()
        else structlog.processors.JSONRenderer()
    )
    shared: list[structlog.types.Processor] = [
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("alembic").setLevel(logging.WARNING)  # per-start migration chatter
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def access_logger() -> Any:
    """A lean structlog logger for the one line per request, straight to stdout.

    It skips the stdlib logging machinery the other records go through (about 25 µs a line)
    but writes the same shape: JSON with ``timestamp``, ``level`` and ``logger`` off a
    terminal, a readable line on one.
    """
    shared: list[structlog.types.Processor] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _access_logger_name,
    ]
    if sys.stdout.isatty():
        return structlog.wrap_logger(
            structlog.PrintLogger(sys.stdout),
            processors=[*shared, structlog.dev.ConsoleRenderer()],
            wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        )
    return structlog.wrap_logger(
        structlog.BytesLogger(sys.stdout.buffer),
        processors=[*shared, structlog.processors.JSONRenderer(serializer=_json_bytes)],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
    )


def _access_logger_name(
    _: Any, __: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    event["logger"] = "plantstore.access"
    return event


def _json_bytes(event: Any, **_: Any) -> bytes:
    """msgspec's encoder (about 1 µs a line); structlog also passes ``default=``, unneeded."""
    return msgspec.json.encode(event)
