"""The server under test: ``plantstore serve`` in its own process group, SIGKILLed (whole, or
one worker) and restarted on one port."""

from __future__ import annotations

import contextlib
import math
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from harness.procstat import running, writer_owner
from harness.servers import free_port
from plantstore.db.urls import sqlite_path

from .config import TortureConfig, TortureError

RATE_LIMIT_OFF = "1000000/second"  # the service's per-token limit must never interfere


def child_pids(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (granian's workers), from /proc."""
    children: set[int] = set()
    with contextlib.suppress(FileNotFoundError):  # the process itself is gone
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
                children.update(int(word) for word in (task / "children").read_text().split())
    return children


# granian stops the whole server ("Worker crash loop detected") when a worker it replaced dies
# again within 5.5 s; the killer leaves a replacement alone for longer than that.
REPLACEMENT_SPARED = 6.0


class Victim:
    """``plantstore serve`` in its own process group, killed and restarted on one port."""

    def __init__(self, config: TortureConfig) -> None:
        self._config = config
        self.log_path = config.workdir / "server.log"
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._replaced_at: dict[int, float] = {}  # replacement worker pid -> when it appeared

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spawn(self) -> subprocess.Popen[bytes]:
        self.starts += 1
        self._replaced_at.clear()
        args = ["--port", str(self.port), "--workers", str(self._config.workers)]
        env = {
            **os.environ,
            "PLANTSTORE_DATABASE_URL": self._config.database_url,
            "PLANTSTORE_RATE_LIMIT": RATE_LIMIT_OFF,
            # A restart may overlap a killed instance's last moments: no fixed metrics port.
            "PLANTSTORE_METRICS_ADDRESS": "off",
            **self._config.server_env,
        }
        with self.log_path.open("ab") as log:  # the child keeps its own descriptor
            log.write(f"=== start {self.starts} on port {self.port} ===\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                [sys.executable, "-m", "plantstore", "serve", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group: a kill reaches every worker
            )
        return self._process

    def start(self, timeout: float = 120.0) -> None:
        """Start and wait until /healthz answers; a start that exits is retried, the third
        time on another port (the old one may still be held by a dying worker)."""
        for attempt in range(4):
            if attempt >= 2:
                self.port = free_port()
            process = self.spawn()
            if self._wait_healthy(process, timeout):
                return
            time.sleep(0.2 * (attempt + 1))
        raise TortureError(f"plantstore serve would not start again:\n{self.log_tail()}")

    def _wait_healthy(self, process: subprocess.Popen[bytes], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while process.poll() is None:
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=2).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise TortureError(f"plantstore serve did not answer:\n{self.log_tail()}")
            time.sleep(0.02)
        return False

    def workers(self) -> set[int]:
        return set() if self._process is None else child_pids(self._process.pid)

    def killable_worker(self, rng: random.Random, owner: bool = False) -> int | None:
        """A worker granian will replace if killed now (one not itself just a replacement):
        on SQLite, the one that owns the machine's writer if ``owner``, else another if any."""
        now = time.monotonic()
        candidates = sorted(
            pid
            for pid in self.workers()
            if now - self._replaced_at.get(pid, -math.inf) > REPLACEMENT_SPARED
        )
        holder = self.writer_owner()
        if holder in candidates:
            others = [pid for pid in candidates if pid != holder]
            if owner or not others:
                return holder
            candidates = others
        return rng.choice(candidates) if candidates else None

    def writer_owner(self) -> int | None:
        """The worker that owns the SQLite writer (None on PostgreSQL)."""
        url = self._config.database_url
        if not url.startswith("sqlite:"):
            return None
        return writer_owner(sqlite_path(url))

    def kill_worker(self, pid: int, timeout: float = 60.0) -> None:
        """SIGKILL one worker, then wait until granian's replacement for it serves; the
        server's main process and other workers serve on meanwhile."""
        assert self._process is not None
        others = self.workers() - {pid}
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise TortureError(f"killing worker {pid} ended the server:\n{self.log_tail()}")
            workers = self.workers()
            replacements = workers - others - {pid}
            if pid not in workers and replacements and all(map(self._serving, replacements)):
                break
            if time.monotonic() > deadline:
                raise TortureError(f"worker {pid} was not replaced:\n{self.log_tail()}")
            time.sleep(0.01)
        if not others <= workers:
            raise TortureError(f"killing worker {pid} took others with it: {others - workers}")
        for replacement in replacements:
            self._replaced_at[replacement] = time.monotonic()

    def _serving(self, pid: int) -> bool:
        """Whether granian has logged the worker ``pid`` spawned and then started."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return False
        spawns = list(re.finditer(rf"Spawning worker-(\d+) with PID: {pid}\b", text))
        if not spawns:
            return False
        spawned = spawns[-1]  # the last: a pid of an earlier start may have been reused
        return f"Started worker-{spawned[1]}" in text[spawned.end() :]

    def kill_supervisor(self, timeout: float = 30.0) -> None:
        """SIGKILL the supervisor alone, then wait until its workers, which the kernel sends
        SIGTERM, have stopped: orphans serving on would fail the run."""
        if self._process is None:
            return
        workers = self.workers()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._process.pid, signal.SIGKILL)
        self._process.wait()
        deadline = time.monotonic() + timeout
        while any(running(pid) for pid in workers):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._process.pid, signal.SIGKILL)
                raise TortureError(f"workers {sorted(workers)} served on without their supervisor")
            time.sleep(0.01)
        self._process = None

    def kill(self) -> None:
        """SIGKILL the whole process group: no shutdown code runs anywhere."""
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        self._process = None

    def stop(self) -> None:
        """A clean stop: SIGTERM to the group, SIGKILL if it lingers."""
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGTERM)
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
        self._process = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
