"""``plantstore serve``: the settings checked, the address checked free, then the supervisor
(``processes/``) serving the app with one worker per core by default."""

from __future__ import annotations

import errno
import os
import socket
from typing import Any

import click
import structlog

from .. import __version__
from ..auth.cli import issue_first_token
from ..commandline import settings_for
from ..db.urls import redacted
from ..ops.logs import configure_logging
from ..processes.inheritance import Inheritance
from ..processes.supervisor import METRICS_VARIABLE, supervise
from .connections import connections_per_worker, raise_open_file_limit
from .health import recorded_address, runtime_directory


@click.command()
@click.option("--host", help="Address to listen on [env PLANTSTORE_HOST, default 127.0.0.1]")
@click.option("--port", type=int, help="Port to listen on [env PLANTSTORE_PORT, default 8000]")
@click.option(
    "--workers",
    type=int,
    help="Worker processes [env PLANTSTORE_WORKERS, default: one per core, at most 8]",
)
@click.pass_context
def serve(ctx: click.Context, host: str | None, port: int | None, workers: int | None) -> None:
    """Serve the API until interrupted."""
    chosen_metrics = METRICS_VARIABLE in os.environ
    listen: list[str] = []  # the address checked first: a refused serve makes no database
    settings = settings_for(
        ctx,
        lambda chosen: listen.append(_unserved_address(chosen.host, chosen.port)),
        host=host,
        port=port,
        workers=workers,
    )
    listen_ip = listen[0]
    runtime = runtime_directory()  # before anything is written: none may land in /data
    issue_first_token(settings)
    open_files = raise_open_file_limit()
    connections = connections_per_worker(open_files)
    configure_logging(settings.log_level)
    structlog.get_logger("plantstore").info(
        f"plantstore {__version__} serving http://{settings.host}:{settings.port}, "
        f"up to {connections:,} connections per worker",
        version=__version__,
        address=f"http://{settings.host}:{settings.port}",
        database=redacted(settings.database_url),
        workers=settings.workers,
        connections_per_worker=connections,
        open_file_limit=open_files,
    )
    with recorded_address(settings, listen_ip):  # what `plantstore health` asks
        supervise(
            settings,
            listen_ip,
            runtime,
            _worker_app,
            connections=connections,
            chosen_metrics=chosen_metrics,
        )


def _worker_app(inherited: Inheritance) -> Any:
    """What a worker serves. The service's modules are imported here, in the worker: after
    the supervisor chose the metrics directory (prometheus_client reads it as it is
    imported), and never for another command."""
    from ..app import worker_app

    return worker_app(inherited)


def _unserved_address(host: str, port: int) -> str:
    """The IP address ``host`` names, once it is sure that no other process serves its port.

    granian's workers each bind with SO_REUSEPORT, to share the port among themselves; the
    kernel lets any other socket with SO_REUSEPORT (another ``serve``, say) share it too, and
    splits the connections between the two unrelated services. A socket without it cannot be
    bound where another one listens (SO_REUSEADDR only lets it past connections left in
    TIME_WAIT), so binding one first tells whether the address is taken. It is closed at
    once: held bound, it would keep out only sockets without SO_REUSEADDR (not another
    ``serve``'s, which has it), and held listening it would keep granian's own out. So a
    server that binds the port between this check and granian's workers listening (a
    fraction of a second at start) is not noticed.
    """
    try:
        family, kind, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]  # the system's preferred address for a name (as clients resolving it try first)
    except OSError as exc:  # socket.gaierror: a name that does not resolve
        raise click.ClickException(f"cannot listen on {host}: {exc.strerror or exc}") from None
    except UnicodeError as exc:  # a name IDNA cannot encode
        raise click.ClickException(f"cannot listen on {host}: {exc}") from None
    ip = str(address[0])
    shown = f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"
    if port == 0:
        return ip  # any free port: none can be served already
    with socket.socket(family, kind) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise click.ClickException(
                    f"{shown} is already served by another process; "
                    "stop it or choose another --port"
                ) from None
            raise click.ClickException(f"cannot listen on {shown}: {exc.strerror}") from None
    return ip
