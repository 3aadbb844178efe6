"""``plantstore serve``: granian serving the app factory, one worker per core by default, and
the metrics listener beside its supervisor; an address another process serves is refused."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import math
import os
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click
import structlog

from .. import __version__
from ..auth.cli import issue_first_token
from ..commandline import settings_for
from ..db.urls import redacted
from ..http.machine_budget import MachineTable
from ..ops.duty import machine_duty
from ..ops.logs import configure_logging, granian_logging
from ..ops.metrics_server import MULTIPROCESS_VARIABLE, serve_metrics
from .connections import connections_per_worker, raise_open_file_limit
from .health import recorded_address, runtime_directory

METRICS_VARIABLE = "PLANTSTORE_METRICS_ADDRESS"
MAX_HEADER_BYTES = 16 * 1024  # request line plus headers; granian (hyper) answers 431 past it


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
    chosen_metrics = METRICS_VARIABLE in os.environ  # before the settings are exported below
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
    for name, value in settings.model_dump().items():  # the workers read these back
        if value is not None:  # unset stays unset ("None" would be read back as a value)
            os.environ[f"PLANTSTORE_{name.upper()}"] = str(value)
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.http import HTTP1Settings
    from granian.log import LogLevels

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
    # A forked worker inherits this process's SIGTERM handler until granian installs its own,
    # 0.1 s later; a SIGTERM in between was lost, and that worker served on until killed.
    os.register_at_fork(
        before=_hold_stop_signals,
        after_in_parent=_release_stop_signals,
        after_in_child=_stop_signals_end_a_starting_worker,
    )
    if settings.workers > 1:  # one worker keeps its budgets in its own memory, as exactly
        MachineTable().share_with_workers()
    with (
        _metrics(settings.metrics_listen, runtime, chosen=chosen_metrics),
        _duty(settings.workers, runtime),
        recorded_address(settings, listen_ip),  # what `plantstore health` asks
    ):
        Granian(
            "plantstore.app:create_rsgi_app_from_env",
            factory=True,
            address=listen_ip,  # granian takes an IP address, not a name such as localhost
            port=settings.port,
            workers=settings.workers,
            interface=Interfaces.RSGI,  # the ASGI app over granian's own interface (rsgi.py)
            websockets=False,  # none are served: an upgrade request is a plain request
            loop=Loops.uvloop,  # measured ahead of asyncio; rloop breaks asyncpg's transports
            # HTTP/1 only: the header deadline then runs from the accept (connections.py)
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
        ).serve()


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


_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
_SUPERVISOR_PID = os.getpid()  # the hooks below act on forks of this process (workers) only
_held_mask: set[int | signal.Signals] = set()


def _hold_stop_signals() -> None:
    """Around each fork, the kernel holds stop signals: Python would drop one caught mid-fork."""
    if os.getpid() == _SUPERVISOR_PID:
        _held_mask.clear()
        _held_mask.update(signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS))


def _release_stop_signals() -> None:
    if os.getpid() == _SUPERVISOR_PID:
        signal.pthread_sigmask(signal.SIG_SETMASK, _held_mask)


def _stop_signals_end_a_starting_worker() -> None:
    """In a just-forked worker: a stop signal ends it, until granian's handler replaces this.

    Installed while the signals are still held, so one sent during the fork is delivered
    here, to this handler, once they are released.
    """
    if os.getppid() != _SUPERVISOR_PID:
        return  # a fork made by a worker, or by something else: not ours to change
    for stop in _STOP_SIGNALS:
        signal.signal(stop, _end_starting_worker)
    _stop_when_the_supervisor_dies()
    signal.pthread_sigmask(signal.SIG_SETMASK, _held_mask)


_PR_SET_PDEATHSIG = 1
# What the kernel sends a worker when its supervisor dies. Not SIGTERM itself: every thread
# of the worker inherits the setting and the kernel signals the worker once per thread, and
# granian's SIGTERM handler, called a third time while its stop is under way, blocks the
# worker's main thread for good. This one is turned into a single SIGTERM.
PARENT_DEATH_SIGNAL = signal.SIGUSR1


def _stop_when_the_supervisor_dies() -> None:
    """Have the kernel signal this worker if its supervisor dies (SIGKILLed, say), and stop
    on it as on SIGTERM, the graceful stop: an orphaned worker would serve on, holding the
    port its restarted service needs, while requests in flight finish and every acknowledged
    write stays. (Linux; granian forks its workers on its main thread, whose end is what
    the kernel watches.)"""
    prctl = getattr(ctypes.CDLL(None), "prctl", None)  # this process's own libc
    if prctl is None:
        return  # not Linux: an orphan serves on until stopped, as before
    signal.signal(PARENT_DEATH_SIGNAL, _supervisor_died)
    if prctl(_PR_SET_PDEATHSIG, int(PARENT_DEATH_SIGNAL), 0, 0, 0) != 0:
        return
    if os.getppid() != _SUPERVISOR_PID:  # it died before the kernel was told
        _supervisor_died()


_stopping_for_the_supervisor = False


def _supervisor_died(signum: int = 0, frame: object = None) -> None:
    """The parent-death signal, however many times it comes: one SIGTERM to this worker."""
    global _stopping_for_the_supervisor
    if not _stopping_for_the_supervisor:
        _stopping_for_the_supervisor = True
        os.kill(os.getpid(), signal.SIGTERM)


def _end_starting_worker(signum: int, frame: object) -> None:
    os._exit(0)  # nothing is open yet: the store opens after granian takes the signals over


@contextlib.contextmanager
def _duty(workers: int, runtime: Path) -> Iterator[None]:
    """With several workers, one of them at a time runs the machine's background jobs."""
    if workers == 1:
        yield
        return
    with machine_duty(runtime):
        yield


@contextlib.contextmanager
def _metrics(listen: tuple[str, int] | None, runtime: Path, *, chosen: bool) -> Iterator[None]:
    """``/metrics`` on its own address, fed by every worker through a fresh shared directory.

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
