"""``plantstore health``: is the server of this database ready? For a container's health
check, which cannot know the port: ``--port`` on the command line is not in its environment.

``plantstore serve`` records the address it serves in a small file in the temporary
directory, named after its database; ``health`` reads it and asks ``/readyz`` there. The
same directory holds the server's other runtime files (the duty lock, the metrics
directory), never the database's: where no temporary directory is writable (a read-only
root without a tmpfs on /tmp), Python's fallback would be the working directory, the
database's volume in the image, so ``serve`` stops instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import ipaddress
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click

from ..db.urls import backend_of, sqlite_path
from ..settings import Settings, SettingsError, load_settings

READY_TIMEOUT_S = 2.0  # under the image's HEALTHCHECK --timeout


def runtime_directory() -> Path:
    """The writable temporary directory (``$TMPDIR``, /tmp, ...), never the working one."""
    directory = tempfile.gettempdir()
    named = [os.environ.get(name) for name in ("TMPDIR", "TEMP", "TMP")]
    usual = ["/tmp", "/var/tmp", "/usr/tmp"]  # noqa: S108 (Python's own list, read not written)
    candidates = {os.path.realpath(d) for d in [*named, *usual] if d}
    if os.path.realpath(directory) not in candidates:  # Python's last resort, the working one
        raise click.ClickException(
            "no writable temporary directory (/tmp is read-only?): "
            "mount a tmpfs on /tmp (--tmpfs /tmp) or set TMPDIR"
        )
    return Path(directory)


def address_file(database_url: str, directory: Path | None = None) -> Path:
    """Where the server of ``database_url`` records its address (a SQLite file by its
    absolute path, so a relative URL names one file from any working directory)."""
    key = database_url
    if backend_of(database_url) == "sqlite":
        key = str(sqlite_path(database_url).resolve())
    digest = hashlib.blake2b(key.encode(), digest_size=8).hexdigest()
    return (directory or runtime_directory()) / f"plantstore-serve-{digest}.json"


@contextlib.contextmanager
def recorded_address(settings: Settings, listen_ip: str) -> Iterator[None]:
    """While ``serve`` runs, the URL of its ``/readyz`` (a wildcard address through loopback)."""
    ip = ipaddress.ip_address(listen_ip)
    if ip.is_unspecified:
        ip = ipaddress.ip_address("::1" if ip.version == 6 else "127.0.0.1")
    path = address_file(settings.database_url)
    partial = path.with_suffix(f".{os.getpid()}")
    partial.write_text(json.dumps({"host": str(ip), "port": settings.port, "pid": os.getpid()}))
    os.replace(partial, path)  # a reader sees the old file or the new one, never half
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text()).get("pid") == os.getpid():  # not a newer server's
                path.unlink()


@click.command()
@click.pass_context
def health(ctx: click.Context) -> None:
    """Exit 0 if this database's server answers 200 on /readyz, else 1 (one line why)."""
    try:
        settings = load_settings(database_url=ctx.find_root().obj["database_url"])
        recorded = json.loads(address_file(settings.database_url).read_text())
        host, port = str(recorded["host"]), int(recorded["port"])
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise click.ClickException(f"no server recorded its address ({exc})") from None
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/readyz"
    connection = http.client.HTTPConnection(host, port, timeout=READY_TIMEOUT_S)
    try:
        connection.request("GET", "/readyz")
        status = connection.getresponse().status
    except (OSError, http.client.HTTPException) as exc:
        raise click.ClickException(f"{url}: {exc}") from None
    finally:
        connection.close()
    if status != 200:
        raise click.ClickException(f"{url} answered {status}")
