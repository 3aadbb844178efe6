"""The servers a measured run starts: ``plantstore serve`` as shipped (its limits far above
the load), the same with the abuse limits out of the way, and the bare reference app."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.servers import UNLIMITED, Server, free_port, launch

from .measure import LIST_10, Options
from .place import HERE


def start_service(
    options: Options,
    name: str,
    database_url: str,
    token: str,
    *args: str,
    pinned: bool = True,
    **env: str,
) -> Server:
    """``plantstore serve`` on ``database_url`` (its token already issued). Its metrics
    listener stays on, on a free port unless ``env`` names one: on the default port, anything
    else listening there (a test's server) would stop it from starting."""
    command = [sys.executable, "-m", "plantstore", "serve", *args]
    cpus = options.server_cpus if pinned else None
    environment = {
        "PLANTSTORE_DATABASE_URL": database_url,
        "PLANTSTORE_METRICS_ADDRESS": f"127.0.0.1:{free_port()}",
        **UNLIMITED,
        **env,
    }
    process, url = launch(command, options.workdir / f"{name}.log", cpus, environment)
    return Server(process, url, token)


# The bare reference app through each server interface granian offers.
# Import strings granian resolves from the repository root (its working directory).
REFERENCE_APPS = {
    "asgi": "bench.apps.reference_app:create_app",
    "rsgi": "bench.apps.reference_rsgi:create_app",
}
ECHO_APP = "bench.apps.reference_app:create_echo_app"


def start_reference(
    options: Options,
    token: str,
    interface: str = "asgi",
    *,
    echo: bool = False,
    workers: int = 1,
    pinned: bool = True,
) -> Server:
    """The bare reference app under the same granian, on the same core as the service (or,
    not ``pinned``, free on every core, as the workers phase runs it); ``echo``: its ASGI twin
    that returns X-Request-ID, for a paced run timed from the schedule."""
    granian = str(Path(sys.executable).parent / "granian")
    command = [granian, "--interface", interface, "--loop", options.reference_loop]
    command += ["--workers", str(workers)]
    command += ["--factory", ECHO_APP if echo else REFERENCE_APPS[interface]]
    many = f"-{workers}-workers" if workers > 1 else ""
    log = options.workdir / f"reference-{interface}{'-echo' if echo else ''}{many}.log"
    cpus = options.server_cpus if pinned else None
    process, url = launch(command, log, cpus, {}, ready_path=LIST_10, cwd=HERE.parent)
    return Server(process, url, token)


# The limits are for abuse, not for a benchmark: far above anything this machine reaches.
# (The bench user holds every plant the run deletes: well over the default plant quota.)
# Unknown settings are ignored, so these are harmless before the limits land.
UNLIMITED_RATE = "1000000/second"
LIMITS_OFF = {
    "PLANTSTORE_RATE_LIMIT": UNLIMITED_RATE,
    "PLANTSTORE_AUTH_FAILURE_LIMIT": UNLIMITED_RATE,
    "PLANTSTORE_MAX_PLANTS_PER_USER": str(10**12),
}


def serve_limits_off(options: Options, name: str, url: str, token: str, **env: str) -> Server:
    """``plantstore serve`` on ``url`` (its token already issued), pinned, with the limits
    out of the way (soak and slow clients); ``env`` adds settings."""
    command = [sys.executable, "-m", "plantstore", "serve"]
    environment = {"PLANTSTORE_DATABASE_URL": url, **LIMITS_OFF, **env}
    log = options.workdir / f"{name}.log"
    process, base_url = launch(command, log, options.server_cpus, environment)
    return Server(process, base_url, token)
