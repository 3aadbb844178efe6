"""Durable creates/s with 32 concurrent connections, group commit on versus off.

Starts ``plantstore serve`` on a fresh SQLite file (server pinned to CPU 0), drives it with
wrk (pinned to CPU 1) and prints one row per mode. Every create is fsynced before its 200.

    .venv/bin/python bench/group_commit.py [--seconds 10] [--connections 32]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(directory: Path, group_commit: bool) -> tuple[subprocess.Popen[bytes], str, str]:
    port = free_port()
    env = {
        **os.environ,
        "PLANTSTORE_DATABASE_URL": f"sqlite:///{directory / 'bench.db'}",
        "PLANTSTORE_GROUP_COMMIT": str(group_commit).lower(),
    }
    log = directory / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                "taskset",
                "-c",
                "0",
                sys.executable,
                "-m",
                "plantstore",
                "serve",
                "--port",
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{base}/healthz", timeout=1)
            break
        except OSError:
            time.sleep(0.05)
    token = re.search(r"pst_[A-Za-z0-9_-]+", log.read_text()).group(0)  # type: ignore[union-attr]
    return server, base, token


def run_wrk(base: str, token: str, seconds: int, connections: int) -> tuple[float, int, str]:
    output = subprocess.run(
        [
            "taskset",
            "-c",
            "1",
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{seconds}s",
            "--latency",
            "-s",
            str(HERE / "create.lua"),
            base,
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PLANTSTORE_BENCH_TOKEN": token},
    ).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    p99 = re.search(r"99%\s+(\S+)", output)
    return rate, int(errors.group(1)) if errors else 0, p99.group(1) if p99 else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    print(f"durable creates, {args.connections} connections, {args.seconds}s each")
    print(f"{'group commit':<14}{'creates/s':>12}{'p99':>10}{'non-2xx':>9}")
    for group_commit in (True, False):
        with tempfile.TemporaryDirectory() as directory:
            server, base, token = start(Path(directory), group_commit)
            try:
                rate, errors, p99 = run_wrk(base, token, args.seconds, args.connections)
            finally:
                os.killpg(server.pid, signal.SIGTERM)
                server.wait()
        print(f"{'on' if group_commit else 'off':<14}{rate:>12,.0f}{p99:>10}{errors:>9}")


if __name__ == "__main__":
    main()
