"""slowhttptest in the background, restarted like a reconnecting slowloris client, with a
sampler of the slow connections and the server's sockets once a second."""

from __future__ import annotations

import argparse
import csv
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness.procstat import open_files, process_tree, rss_mb, worker_pids
from harness.servers import Server, pinned

CONTENT_LENGTH_SLOW = 8_192  # slowhttptest -B's declared body: well under the 64 KiB limit
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def sockets_of(pids: list[int]) -> int:
    return open_files(pids, "socket:")


@dataclass(frozen=True)
class Attack:
    key: str
    label: str
    mode: tuple[str, ...]  # slowhttptest's mode flags


ATTACKS = (
    Attack(
        "slow_headers",
        "slowloris (-H): GET /plants, headers never finished",
        ("-H", "-t", "GET", "-x", "24"),
    ),
    Attack(
        "slow_body",
        f"slow body (-B): POST /plants, Content-Length {CONTENT_LENGTH_SLOW}, no token",
        ("-B", "-t", "POST", "-s", str(CONTENT_LENGTH_SLOW), "-x", "10"),
    ),
)


@dataclass
class AttackRun:
    """One slowhttptest process: how it ended and its per-second CSV."""

    started_s: float  # after the attack began
    ended_s: float
    exit_status: str
    rows: list[dict[str, int]]


@dataclass
class Point:
    t_s: float
    attacker_sockets: int  # slowhttptest's own descriptors: its connections, client side
    server_sockets: int  # every socket the server's processes hold (listeners, wrk, slow)
    worker_rss_mb: float


@dataclass
class Instance:
    """One live slowhttptest process."""

    process: subprocess.Popen[bytes]
    prefix: Path
    started_s: float
    peak: int = 0  # the most sockets it has held


class Attacker:
    """slowhttptest in the background. It opens each connection once, so when the server
    cuts them off (a header deadline) another instance is started as soon as the newest one,
    once full, falls below 90 % of its connections: like a slowloris client reconnecting.
    A sampler counts the slow connections (slowhttptest's sockets) and the server's sockets
    once a second."""

    def __init__(
        self,
        attack: Attack,
        server: Server,
        args: argparse.Namespace,
        workdir: Path,
        sample: bool = True,
        nice: bool = False,
    ) -> None:
        self.attack, self.server, self.args, self.workdir = attack, server, args, workdir
        self.target: int = args.slow_connections
        self.nice = nice  # yield the shared core to the load generator (see combined.py)
        self.stopping = threading.Event()
        self.started = time.monotonic()
        self.live: list[Instance] = []
        self.runs: list[AttackRun] = []
        self.points: list[Point] = []
        self.workers = worker_pids(server.pid)
        # The sampler reads every descriptor of the server: with thousands of connections
        # open that costs the machine enough to move the figures, so it can be left out.
        self._threads = [threading.Thread(target=self._keep_up, daemon=True)]
        if sample:
            self._threads.append(threading.Thread(target=self._sample, daemon=True))

    def command(self, prefix: Path) -> list[str]:
        args = self.args
        command = ["slowhttptest", *self.attack.mode, "-c", str(self.target)]
        command += ["-i", "10", "-r", "200", "-p", "3", "-l", str(args.seconds + 60)]
        command += ["-u", f"{self.server.base_url}/plants", "-g", "-o", str(prefix)]
        return pinned(["nice", "-n", "19", *command] if self.nice else command, args.attacker_cpus)

    def now(self) -> float:
        return time.monotonic() - self.started

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def held(self) -> int:
        """Slow connections open right now, over every live instance."""
        return sum(sockets_of([instance.process.pid]) for instance in list(self.live))

    def _spawn(self) -> None:
        prefix = self.workdir / f"{self.attack.key}-{len(self.runs) + len(self.live) + 1}"
        with prefix.with_suffix(".log").open("wb") as out:
            process = subprocess.Popen(self.command(prefix), stdout=out, stderr=subprocess.STDOUT)
        self.live.append(Instance(process, prefix, self.now()))

    def _finish(self, instance: Instance) -> None:
        self.live.remove(instance)
        log = instance.prefix.with_suffix(".log")
        self.runs.append(
            AttackRun(instance.started_s, self.now(), exit_status(log), read_csv(instance.prefix))
        )

    def _keep_up(self) -> None:
        self._spawn()
        while not self.stopping.wait(0.2):
            for instance in list(self.live):
                if instance.process.poll() is not None:
                    self._finish(instance)
            newest = self.live[-1] if self.live else None
            if newest is not None:
                newest.peak = max(newest.peak, sockets_of([newest.process.pid]))
            full = newest is not None and newest.peak >= 0.98 * self.target
            if newest is None or (full and self.held() < 0.9 * self.target):
                self._spawn()
        for instance in list(self.live):
            instance.process.send_signal(signal.SIGINT)  # it writes its CSV on the way
        for instance in list(self.live):
            try:
                instance.process.wait(10)
            except subprocess.TimeoutExpired:
                instance.process.kill()
                instance.process.wait()
            self._finish(instance)

    def _sample(self) -> None:
        while not self.stopping.is_set():
            tree = process_tree(self.server.pid)
            self.points.append(
                Point(round(self.now(), 1), self.held(), sockets_of(tree), rss_mb(self.workers))
            )
            self.stopping.wait(1.0)

    def wait_until_held(self, wanted: int, limit: float) -> float | None:
        """Seconds until slowhttptest holds ``wanted`` sockets; None if it never did."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.held() >= wanted:
                return self.now()
            time.sleep(0.2)
        return None

    def stop(self) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(30)


def exit_status(log: Path) -> str:
    text = _ANSI.sub("", log.read_text(errors="replace"))
    found = re.findall(r"Exit status:\s*(.+)", text)
    return found[-1].strip() if found else "unknown"


def read_csv(prefix: Path) -> list[dict[str, int]]:
    """slowhttptest's per-second states (columns as its version names them)."""
    path = prefix.with_suffix(".csv")
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return [
            {key.strip(): int(value) for key, value in row.items() if value and value.isdigit()}
            for row in csv.DictReader(handle)
        ]
