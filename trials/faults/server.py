"""A real ``plantstore serve`` process: started as an operator would (its own process group,
its output appended to one log), waited for, stopped with SIGTERM (SIGKILL for the group if
that does not end it), and its log counted in lines."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx

from harness.servers import free_port as free_port  # re-exported for the suite

from .config import FaultConfig

START_TIMEOUT = 40.0
STOP_TIMEOUT = 10.0


class ServerError(Exception):
    """The server did not start, or died."""


def server_environment(config: FaultConfig, database_url: str) -> dict[str, str]:
    """The caller's environment without its own PLANTSTORE_* settings, plus the suite's:
    no rate limits, no metrics listener, no access log (a fault's log lines are counted), and
    the short write deadline."""
    environment = {
        name: value for name, value in os.environ.items() if not name.startswith("PLANTSTORE_")
    }
    environment.update(
        PLANTSTORE_DATABASE_URL=database_url,
        PLANTSTORE_RATE_LIMIT="off",
        PLANTSTORE_AUTH_FAILURE_LIMIT="off",
        PLANTSTORE_METRICS_ADDRESS="off",
        PLANTSTORE_ACCESS_LOG="false",
        PLANTSTORE_WRITE_TIMEOUT=f"{config.write_timeout:g}",
    )
    return environment


def serve_command(config: FaultConfig, port: int) -> list[str]:
    return [
        config.python,
        "-m",
        "plantstore",
        "serve",
        "--port",
        str(port),
        "--workers",
        str(config.workers),
    ]


class Server:
    """One service at one address and database; ``start`` may be called again after ``stop``
    (the operator's restart), on the same port and log."""

    def __init__(self, config: FaultConfig, database_url: str, log_path: Path) -> None:
        self.config = config
        self.database_url = database_url
        self.log_path = log_path
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.token = ""

    def start(self) -> float:
        """Start and wait until every worker serves; return the monotonic time it was ready.
        A token printed by this start (a database without one) becomes ``token``."""
        log_from = self.log_size()
        with self.log_path.open("ab") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                serve_command(self.config, self.port),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=server_environment(self.config, self.database_url),
                cwd=self.log_path.parent,
                start_new_session=True,  # its own process group: a kill reaches every worker
            )
        deadline = time.monotonic() + START_TIMEOUT
        with httpx.Client(base_url=self.base_url, timeout=1) as http:
            while True:
                if self.process.poll() is not None:
                    raise ServerError(f"plantstore serve exited: {self.log_tail(log_from)}")
                if time.monotonic() > deadline:
                    self.stop()
                    raise ServerError(f"plantstore serve did not start: {self.log_tail(log_from)}")
                text = self.log_text(log_from)
                if self._workers_started(text):
                    with contextlib.suppress(httpx.TransportError):
                        if http.get("/healthz").status_code == 200:
                            break
                time.sleep(0.05)
        ready = time.monotonic()
        token = next((word for word in text.split() if word.startswith("pst_")), "")
        if token:
            self.token = token
        return ready

    def _workers_started(self, text: str) -> bool:
        started = set(re.findall(r"Started (worker-\d+)", text))  # granian's lines, as JSON
        return len(started) >= self.config.workers

    def stop(self) -> None:
        """SIGTERM, as an operator would; SIGKILL to the whole group if it lingers."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        kill_group(process.pid)

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def log_text(self, start: int = 0, end: int | None = None) -> str:
        try:
            data = self.log_path.read_bytes()
        except FileNotFoundError:
            return ""
        return data[start:end].decode(errors="replace")

    def log_lines(self, start: int, end: int) -> list[str]:
        return [line for line in self.log_text(start, end).splitlines() if line.strip()]

    def log_tail(self, start: int = 0) -> str:
        return self.log_text(start)[-3000:]


def kill_group(pgid: int) -> None:
    """SIGKILL what is left of a server's process group (orphaned workers) and wait for it
    to be gone, so that its files are closed (an unmount needs that)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
