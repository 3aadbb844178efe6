"""Log setup: JSON lines when stdout is not a terminal, readable lines when it is."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import MutableMapping
from datetime import UTC, datetime
from typing import Any, BinaryIO

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
    """The logger for the one line per request: ``.info(event, **fields)``, to stdout.

    On a terminal it is structlog's console renderer. Off one it is ``JSONLines``: the same
    shape as the other records (JSON with ``timestamp``, ``level`` and ``logger``) at 3 µs a
    line, where structlog's bound logger took 7 and the stdlib logging path 25, on a request
    that costs 90 in all.
    """
    if sys.stdout.isatty():
        return structlog.wrap_logger(
            structlog.PrintLogger(sys.stdout),
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                _access_logger_name,
                structlog.dev.ConsoleRenderer(),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        )
    return JSONLines(sys.stdout.buffer, "plantstore.access")


class JSONLines:
    """Writes each ``info`` call as one JSON line.

    Lines are gathered while the event loop runs callbacks and written together when it gets
    to this one's turn (``call_soon``): one write for all the requests that finished in that
    pass, not a write and a flush each. Nothing waits longer than one pass of the loop.
    """

    def __init__(self, stream: BinaryIO, logger_name: str) -> None:
        self._stream = stream
        self._logger_name = logger_name
        self._pending: list[bytes] = []

    def info(self, event: str, **fields: Any) -> None:
        fields["event"] = event
        fields["level"] = "info"
        fields["logger"] = self._logger_name
        fields["timestamp"] = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        self._pending.append(msgspec.json.encode(fields))
        if len(self._pending) == 1:
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop running: write at once
                self.flush()

    def flush(self) -> None:
        lines, self._pending = self._pending, []
        if lines:
            self._stream.write(b"\n".join(lines) + b"\n")
            self._stream.flush()


def _access_logger_name(
    _: Any, __: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    event["logger"] = "plantstore.access"
    return event
