"""What every benchmark script needs to run a server: a real ``plantstore serve`` (or any
ASGI server) on a free port in its own session, optionally pinned to a core, and a check that
durable files are on a real disk."""

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

HERE = Path(__file__).parent.parent  # bench/: the jobs, apps/, peers/, results/


# One benchmark token sends thousands of requests a second, and its user holds 351,000 plants:
# limits far above that keep the rate limiter and the quota check running (their cost is part
# of every figure) without ever refusing a request.
UNLIMITED = {
    "PLANTSTORE_RATE_LIMIT": "100000000/second",
    "PLANTSTORE_MAX_PLANTS_PER_USER": str(10**12),
}


MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})


def filesystem_type(path: Path) -> str:
    """The type of the filesystem ``path`` is on: its longest mount point in /proc/mounts."""
    resolved, best, kind = path.resolve(), "", "unknown"
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        mount = fields[1].replace("\\040", " ")
        inside = resolved == Path(mount) or Path(mount) in resolved.parents
        if inside and len(mount) >= len(best):  # a later mount on the same point hides earlier
            best, kind = mount, fields[2]
    return kind


def require_real_disk(directory: Path) -> None:
    """Refuse to measure durable writes on a memory filesystem, where an fsync is free."""
    kind = filesystem_type(directory)
    if kind in MEMORY_FILESYSTEMS:
        sys.exit(
            f"{directory} is on {kind}: fsync costs nothing there, so durable-write figures "
            "would be meaningless. Point the results at a real disk."
        )


def free_port() -> int:
    """A port nothing listens on, so runs never collide with a server left running; picked
    below the kernel's ephemeral range where there is room. A port the kernel hands out
    itself (``bind`` to 0) may go to an outgoing connection between the pick and the bind of
    a server started seconds later (a Patroni node's PostgreSQL was refused its port so)."""
    low = _ephemeral_low()
    for _ in range(50 if low > _LOWEST else 0):
        port = random.randrange(_LOWEST, low)
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
