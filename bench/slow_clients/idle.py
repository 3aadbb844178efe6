"""Connections that never send a byte, kept at a count: each one the server closes is opened
again at once, as an attacker would. Run as its own (pinned) process by ``combined.py``:

    python bench/slow_clients/idle.py HOST PORT COUNT [RAMP_SECONDS]

The first COUNT are opened evenly over RAMP_SECONDS (default 0: at once), so that, with a
ramp as long as the header deadline, the server closes and the flood reopens about
COUNT / deadline connections a second, steadily, rather than all of them at once.

Every second it prints one JSON line: how many it holds, how many the server has closed, and
the longest any of them lived (from its connection's establishment to the server's close);
on SIGTERM it prints the lifetimes' summary and exits.
"""

from __future__ import annotations

import json
import resource
import selectors
import signal
import socket
import sys
import time


def main() -> None:
    host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ramp = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    selector = selectors.DefaultSelector()
    opened: dict[socket.socket, float] = {}  # socket -> when it was established (or begun)
    lifetimes: list[float] = []
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)

    def open_one() -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.connect_ex((host, port))
        opened[sock] = time.monotonic()
        selector.register(sock, selectors.EVENT_READ)

    started = time.monotonic()
    last_report = 0.0
    while not stopping:
        due = count if ramp <= 0 else min(count, int(count * (time.monotonic() - started) / ramp))
        while len(opened) + len(lifetimes) < due and len(opened) < count:
            open_one()
        for key, _ in selector.select(timeout=0.01):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)
            except (ConnectionResetError, ConnectionRefusedError, BlockingIOError):
                data = b""
            if data:
                continue  # the server answered something (it should not): keep waiting
            lifetimes.append(time.monotonic() - opened.pop(sock))
            selector.unregister(sock)
            sock.close()
            open_one()
        now = time.monotonic()
        if now - last_report >= 1.0:
            last_report = now
            report(len(opened), lifetimes, final=False)
    report(len(opened), lifetimes, final=True)


def report(held: int, lifetimes: list[float], *, final: bool) -> None:
    line = {
        "held": held,
        "closed_by_server": len(lifetimes),
        "longest_s": round(max(lifetimes), 3) if lifetimes else None,
        "final": final,
    }
    if final and lifetimes:
        ordered = sorted(lifetimes)
        line["median_s"] = round(ordered[len(ordered) // 2], 3)
        line["shortest_s"] = round(ordered[0], 3)
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
