"""Log setup: JSON lines when stdout is not a terminal, readable lines when it is."""

from __future__ import annotations

import asyncio
import logging
import sys
from datetime import UTC, datetime
from typing import BinaryIO, Protocol

import msgspec
import structlog

ACCESS_LOGGER = "plantstore.access"
WEBHOOK_LOGGER = "plantstore.webhooks"


def granian_logging() -> dict[str, object]:
    """granian's ``log_dictconfig``: its loggers ("_granian" for its own lines, "granian.access")
    lose its plain-text handlers and hand their records up to the root logger, whose handler
    ``configure_logging`` set, so its start and stop lines are JSON too. granian merges this
    into its own config key by key (each key given replaces its whole entry) and then writes
    into it, so each server gets a fresh one."""
    return {
        "formatters": {},
        "handlers": {},
        "loggers": {
            "_granian": {"handlers": [], "propagate": True},
            "granian.access": {"handlers": [], "propagate": True},
        },
    }


def log_line(event: str, level: str, logger: str, **fields: object) -> str:
    """One record in the log's shape off a terminal, written whatever the log level."""
    stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    record = {**fields, "event": event, "level": level, "logger": logger, "timestamp": stamp}
    return msgspec.json.encode(record).decode()


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


class AccessLine(msgspec.Struct):
    """One request, as its access-log line shows it (fields in the order they are written)."""

    request_id: str
    method: str
    route: str
    status: int
    duration_ms: float
    user_id: int | None
    event: str = "request"
    level: str = "info"
    logger: str = ACCESS_LOGGER
    timestamp: str = ""


class AttemptLine(msgspec.Struct):
    """One webhook attempt. ``origin`` is ``scheme://host:port`` only: receivers keep secrets
    in the path and the query."""

    webhook_id: str
    origin: str
    subscription_id: int
    attempt: int
    status: int | None
    error: str | None
    outcome: str
    duration_ms: float
    event: str = "webhook attempt"
    level: str = "info"
    logger: str = WEBHOOK_LOGGER
    timestamp: str = ""


LogLine = AccessLine | AttemptLine


class AccessLog(Protocol):
    def write(self, line: LogLine) -> None: ...

    def flush(self) -> None:
        """Write out any lines still held."""


def access_logger() -> AccessLog:
    """Where the one line per request (and per webhook attempt) goes: stdout.

    On a terminal it is structlog's console renderer. Off one it is ``JSONLines``: the same
    shape as the other records (JSON with ``timestamp``, ``level`` and ``logger``).
    """
    if sys.stdout.isatty():
        return ConsoleLines()
    return JSONLines(sys.stdout.buffer)


class ConsoleLines:
    """Access lines for a person at a terminal, through structlog's console renderer."""

    def __init__(self) -> None:
        self._logger = structlog.wrap_logger(
            structlog.PrintLogger(sys.stdout),
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.dev.ConsoleRenderer(),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        )

    def write(self, line: LogLine) -> None:
        fields = msgspec.structs.asdict(line)
        for name in ("event", "level", "timestamp"):
            del fields[name]
        self._logger.info(line.event, **fields)

    def flush(self) -> None:
        """Nothing is held: each line is printed as it comes."""


class JSONLines:
    """Writes access lines as JSON, gathered for up to ``FLUSH_SECONDS``.

    A write per request, or even per pass of the event loop, was the kernel's work on the
    worker's core, a large share of a list request's CPU with the log on. Lines are
    kept instead and written together: one timestamp, one encoding call and one write when
    the first of them is ``FLUSH_SECONDS`` old or ``MAX_LINES`` are waiting, and at shutdown
    (``flush``). A line is late by at most that, and its ``timestamp`` is the flush's (so up
    to 50 ms after its request ended, shared by the lines written together); a process
    killed outright loses at most that much of its log, as with nginx's buffered access log.
    """

    FLUSH_SECONDS = 0.05
    MAX_LINES = 512

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._pending: list[LogLine] = []
        self._encoder = msgspec.json.Encoder()

    def write(self, line: LogLine) -> None:
        self._pending.append(line)
        waiting = len(self._pending)
        if waiting == 1:
            try:
                asyncio.get_running_loop().call_later(self.FLUSH_SECONDS, self.flush)
            except RuntimeError:  # no loop running: write at once
                self.flush()
        elif waiting >= self.MAX_LINES:
            self.flush()

    def flush(self) -> None:
        lines, self._pending = self._pending, []
        if lines:
            stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
            for line in lines:
                line.timestamp = stamp
            self._stream.write(self._encoder.encode_lines(lines))
            self._stream.flush()
