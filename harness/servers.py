"""A real ``plantstore serve`` (or any ASGI server) on a free port in its own session,
optionally pinned to a core: what the benchmarks, the trials and the tests all start."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# One benchmark token sends thousands of requests a second, and its user holds 351,000 plants:
# limits far above that keep the rate limiter and the quota check running (their cost is part
# of every figure) without ever refusing a request.
UNLIMITED = {
    "PLANTSTORE_RATE_LIMIT": "100000000/second",
    "PLANTSTORE_MAX_PLANTS_PER_USER": str(10**12),
}


def free_port() -> int:
    """A port nothing listens on, so runs never collide with a server left running; picked
    below the kernel's ephemeral range where there is room. A port the kernel hands out
    itself (``bind`` to 0) may go to an outgoing connection between the pick and the bind of
    a server started seconds later (a Patroni node's PostgreSQL was refused its port so)."""
    lowest, low = _port_range()
    for _ in range(50 if low > lowest else 0):
        port = random.randrange(lowest, low)
        if port in _HANDED_OUT:
            continue  # given to a caller whose server may not have bound it yet
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken: another
        _HANDED_OUT.add(port)
        return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_LOWEST = 10_000  # above the well-known services a machine runs (PostgreSQL, Redis...)
_HANDED_OUT: set[int] = set()  # this process's picks: never the same port twice


def _port_range() -> tuple[int, int]:
    """The ports this process picks from: all of them below the ephemeral range, or, in a
    test run split over pytest-xdist's workers, this worker's own slice of them (workers
    never pick the same port, each remembers only its own picks)."""
    lowest, low = _LOWEST, _ephemeral_low()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "").removeprefix("gw")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.isdigit() or count <= 1 or low <= lowest:
        return lowest, low
    width = (low - lowest) // count
    start = lowest + int(worker) * width
    return start, start + width


def _ephemeral_low() -> int:
    """The first port of the range the kernel picks outgoing connections' ports from."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def pinned(command: list[str], cpus: str | None) -> list[str]:
    """``command`` under taskset, so server and load generator never share a core."""
    return command if cpus is None else ["taskset", "-c", cpus, *command]


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    base_url: str
    token: str

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        """SIGTERM the whole session, so granian's workers go with their parent; SIGKILL it
        if that has not ended it in 15 s."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def launch(
    command: list[str],
    log: Path,
    cpus: str | None,
    env: Mapping[str, str],
    ready_path: str = "/healthz",
    cwd: Path | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start a server on a free port in its own session; return once it answers."""
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            pinned([*command, "--port", str(port)], cpus),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            cwd=cwd,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        if process.poll() is not None:
            raise RuntimeError(f"the server exited ({process.returncode}): {log.read_text()}")
        try:
            urllib.request.urlopen(f"{base_url}{ready_path}", timeout=1).read()
            return process, base_url
        except urllib.error.HTTPError:
            return process, base_url  # it answered: up
        except OSError:
            time.sleep(0.05)
    os.killpg(process.pid, signal.SIGTERM)
    raise RuntimeError(f"the server never answered: {log.read_text()}")


def start_server(database_url: str, log: Path, cpus: str | None, *args: str, **env: str) -> Server:
    """Start the service on a fresh database; return it with its first-start token."""
    command = [sys.executable, "-m", "plantstore", "serve", *args]
    environment = {"PLANTSTORE_DATABASE_URL": database_url, **UNLIMITED, **env}
    process, base_url = launch(command, log, cpus, environment)
    token = re.search(r"pst_[A-Za-z0-9_-]+", log.read_text())
    if token is None:
        raise RuntimeError(f"the server printed no token: {log.read_text()}")
    return Server(process, base_url, token.group(0))
