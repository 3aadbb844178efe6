"""The supervisor: makes what the workers share, then has granian fork, watch and stop them.

Each worker's app comes from ``worker_app(inheritance)``, called in the worker once granian
has forked it: the settings travel as an object, inherited through the fork, never through
the environment.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import click
import structlog

from ..http.machine_budget import MachineTable
from ..ops.logs import granian_logging
from ..ops.metrics_server import MULTIPROCESS_VARIABLE, serve_metrics
from ..settings import Settings
from .duty import machine_duty
from .forks import WorkerForks
from .inheritance import Inheritance

METRICS_VARIABLE = "PLANTSTORE_METRICS_ADDRESS"
MAX_HEADER_BYTES = 16 * 1024  # request line plus headers; granian (hyper) answers 431 past it
WorkerApp = Callable[[Inheritance], Any]  # the RSGI app a worker serves


def supervise(
    settings: Settings,
    listen_ip: str,
    runtime: Path,
    worker_app: WorkerApp,
    *,
    connections: int,
    chosen_metrics: bool,
) -> None:
    """Serve with ``settings.workers`` workers on ``listen_ip`` until stopped.

    ``runtime``: the directory for the files the workers share (the duty's lock, the metrics
    samples); ``connections``: how many each worker holds at most; ``chosen_metrics``: the
    metrics address was the operator's (one that cannot be listened on stops the start).
    """
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.http import HTTP1Settings
    from granian.log import LogLevels

    WorkerForks().install()
    with (
        _metrics(settings.metrics_listen, runtime, chosen=chosen_metrics),
        _duty(settings.workers, runtime) as duty,
    ):
        shared = settings.workers > 1  # one worker keeps its budgets in its memory, as exactly
        inheritance = Inheritance(settings, MachineTable() if shared else None, duty)
        Granian(
            "plantstore.app:worker_app",  # its name in granian's lines; loaded as below
            address=listen_ip,  # granian takes an IP address, not a name such as localhost
            port=settings.port,
            workers=settings.workers,
            interface=Interfaces.RSGI,  # the ASGI app over granian's own interface (rsgi.py)
            websockets=False,  # none are served: an upgrade request is a plain request
            loop=Loops.uvloop,  # measured ahead of asyncio; rloop breaks asyncpg's transports
            # HTTP/1 only: the header deadline then runs from the accept (cli/connections.py)
            http=HTTPModes.http1,
            backpressure=connections,
            http1_settings=HTTP1Settings(
                header_read_timeout=int(settings.header_timeout * 1000),
                max_buffer_size=MAX_HEADER_BYTES,  # a longer head is refused (431) unread
            ),
            workers_kill_timeout=math.ceil(settings.shutdown_timeout),
            respawn_failed_workers=True,  # a worker that died is replaced; the rest serve on
            log_level=LogLevels(settings.log_level),
            log_dictconfig=granian_logging(),  # its lines through this log, as JSON off a terminal
        ).serve(target_loader=partial(_load, worker_app, inheritance))


def _load(worker_app: WorkerApp, inheritance: Inheritance, target: str) -> Any:
    """granian's loader, called in each worker it forks (``target`` is the name above)."""
    return worker_app(inheritance)


@contextlib.contextmanager
def _duty(workers: int, runtime: Path) -> Iterator[Path | None]:
    """With several workers, one of them at a time runs the machine's background jobs."""
    if workers == 1:
        yield None
        return
    with machine_duty(runtime) as duty:
        yield duty


@contextlib.contextmanager
def _metrics(listen: tuple[str, int] | None, runtime: Path, *, chosen: bool) -> Iterator[None]:
    """``/metrics`` on its own address, fed by every worker through a fresh shared directory
    (prometheus_client finds it in its own environment variable, which the workers inherit).

    An address the operator chose that cannot be listened on stops ``serve``; the shipped
    default taken (by another plantstore on the machine, say) is said in the log, and this
    one serves without a metrics listener.
    """
    if listen is None:
        yield
        return
    host, port = listen
    with tempfile.TemporaryDirectory(prefix="plantstore-metrics-", dir=runtime) as directory:
        try:
            serve_metrics(host, port, directory)
        except OSError as exc:
            # The workers still write their samples to the directory (prometheus_client is
            # imported in multiprocess mode by now): nobody serves them.
            if chosen:
                raise click.ClickException(
                    f"cannot serve metrics on {host}:{port} ({exc.strerror}); "
                    f"set {METRICS_VARIABLE} to another address, or to off"
                ) from None
            structlog.get_logger("plantstore").warning(
                f"metrics not served: the default metrics address {host}:{port} is taken "
                f"({exc.strerror}; another plantstore on this machine?); serving without them. "
                f"Set {METRICS_VARIABLE} to give this server an address of its own",
                metrics_address=f"{host}:{port}",
            )
        try:
            yield
        finally:
            del os.environ[MULTIPROCESS_VARIABLE]
