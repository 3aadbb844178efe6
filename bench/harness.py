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
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1_000.0, "m": 60_000.0, "h": 3_600_000.0}


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
    """A port nothing listens on, so runs never collide with a server left running."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


@dataclass
class ScheduleLatency:
    """Latency from each request's due time, not its send (``scheduled.lua``), in ms."""

    matched: int  # answers that echoed the request's origin
    unmatched: int  # answers without it: their latency is unknown
    late: int  # requests sent more than 1 ms after their slot
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float


@dataclass
class WrkResult:
    requests: int
    seconds: float
    rate: float
    p50_ms: float  # wrk's own percentiles: from each request's send
    p99_ms: float
    errors: int  # non-2xx/3xx responses
    socket_errors: int
    schedule: ScheduleLatency | None = None  # paced runs only

    @property
    def good_rate(self) -> float:
        """Answers that were 2xx/3xx, per second: a fast error earns no credit."""
        return max(0, self.requests - self.errors) / self.seconds if self.seconds else 0.0

    @property
    def p50(self) -> str:
        return f"{self.p50_ms:.2f}ms"

    @property
    def p99(self) -> str:
        return f"{self.p99_ms:.2f}ms"


def run_wrk(
    url: str,
    token: str,
    seconds: int,
    connections: int,
    cpus: str | None,
    script: str | None,
    env: Mapping[str, str] | None = None,
) -> WrkResult:
    """One wrk run (one thread, ``--latency``); script parameters travel in ``env``."""
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency"]
    command += ["-H", f"Authorization: Bearer {token}"]
    if script is not None:
        command += ["-s", str(HERE / script)]
    output = subprocess.run(
        pinned([*command, url], cpus),
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PLANTSTORE_BENCH_TOKEN": token, **(env or {})},
    ).stdout
    return parse_wrk(output)


def parse_wrk(output: str) -> WrkResult:
    """wrk's summary as numbers; latencies in milliseconds."""
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    total = re.search(r"(\d+) requests in ([\d.]+)(\w+)", output)
    if rate is None or total is None:
        raise RuntimeError(f"wrk printed no rate: {output}")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    sockets = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    return WrkResult(
        requests=int(total.group(1)),
        seconds=_duration_ms(total.group(2), total.group(3)) / 1_000,
        rate=float(rate.group(1)),
        p50_ms=_percentile_ms(output, "50"),
        p99_ms=_percentile_ms(output, "99"),
        errors=int(errors.group(1)) if errors else 0,
        socket_errors=sum(int(n) for n in sockets.groups()) if sockets else 0,
        schedule=_schedule(output),
    )


def _schedule(output: str) -> ScheduleLatency | None:
    """The ``schedule:`` line ``scheduled.lua``'s done() prints, if there is one."""
    line = next((ln for ln in output.splitlines() if ln.startswith("schedule: ")), None)
    if line is None:
        return None
    fields = dict(part.split("=", 1) for part in line.removeprefix("schedule: ").split())
    us = {key.removesuffix("_us"): float(value) / 1_000 for key, value in fields.items()}
    return ScheduleLatency(
        matched=int(fields["matched"]),
        unmatched=int(fields["unmatched"]),
        late=int(fields["late"]),
        p50_ms=us["p50"],
        p90_ms=us["p90"],
        p99_ms=us["p99"],
        p999_ms=us["p999"],
        max_ms=us["max"],
    )


def _percentile_ms(output: str, percent: str) -> float:
    match = re.search(rf"^\s+{percent}%\s+([\d.]+)(\w+)", output, re.M)
    return _duration_ms(match.group(1), match.group(2)) if match else float("nan")


def _duration_ms(number: str, unit: str) -> float:
    return float(number) * _UNIT_MS[unit]
