"""What every benchmark script needs: a real ``plantstore serve`` and wrk, each optionally
pinned to a core, and wrk's figures parsed."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pinned(command: list[str], cpus: str | None) -> list[str]:
    return command if cpus is None else ["taskset", "-c", cpus, *command]


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    base_url: str
    token: str

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait()


def start_server(database_url: str, log: Path, cpus: str | None, *args: str, **env: str) -> Server:
    """Start the service on a fresh database; return it with its first-start token."""
    port = free_port()
    environment = {**os.environ, "PLANTSTORE_DATABASE_URL": database_url, **env}
    command = [sys.executable, "-m", "plantstore", "serve", "--port", str(port), *args]
    with log.open("wb") as out:
        process = subprocess.Popen(
            pinned(command, cpus),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(f"{base_url}/healthz", timeout=1)
            break
        except OSError:
            time.sleep(0.05)
    token = re.search(r"pst_[A-Za-z0-9_-]+", log.read_text())
    if token is None:
        raise RuntimeError(f"the server printed no token: {log.read_text()}")
    return Server(process, base_url, token.group(0))


@dataclass
class WrkResult:
    rate: float
    p50: str
    p99: str
    errors: int


def run_wrk(
    url: str, token: str, seconds: int, connections: int, cpus: str | None, script: str | None
) -> WrkResult:
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency"]
    command += ["-H", f"Authorization: Bearer {token}"]
    if script is not None:
        command += ["-s", str(HERE / script)]
    output = subprocess.run(
        pinned([*command, url], cpus),
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PLANTSTORE_BENCH_TOKEN": token},
    ).stdout
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    if rate is None:
        raise RuntimeError(f"wrk printed no rate: {output}")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    p50 = re.search(r"^\s+50%\s+(\S+)", output, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", output, re.M)
    return WrkResult(
        float(rate.group(1)),
        p50.group(1) if p50 else "?",
        p99.group(1) if p99 else "?",
        int(errors.group(1)) if errors else 0,
    )
