"""One service per address: ``serve`` on a host and port another process already serves stops
within seconds with one line naming the address, and the service already there goes on
answering every request. granian binds each worker with SO_REUSEPORT, so that one server's
workers share the port; without the check the kernel would let a second service share it
too, and split the connections between the two.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.calls import bearer
from tests.fixtures.servers import (
    QUIET_SERVER_ENV,
    LiveServer,
    free_port,
    start_server,
    start_workers,
    stop_server,
)

pytestmark = pytest.mark.server

REFUSAL_SECONDS = 5.0
REQUESTS = 20


def serve_on(port: int, db_url: str, log_path: Path, *args: str) -> subprocess.Popen[str]:
    """``plantstore serve --port PORT`` as ``start_server`` starts one, without waiting."""
    environment = {**os.environ, **QUIET_SERVER_ENV, "PLANTSTORE_DATABASE_URL": db_url}
    with log_path.open("w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "plantstore", "serve", "--port", str(port), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
            text=True,
            start_new_session=True,
        )


def assert_refused(process: subprocess.Popen[str], log_path: Path, address: str) -> None:
    """The process ended non-zero within REFUSAL_SECONDS, with one line naming ``address``."""
    try:
        code = process.wait(timeout=REFUSAL_SECONDS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 9)
        process.wait()
        pytest.fail(f"serve did not stop within {REFUSAL_SECONDS} s: {log_path.read_text()}")
    output = log_path.read_text()
    assert code != 0, output
    assert "Traceback" not in output
    naming = [line for line in output.splitlines() if address in line]
    assert naming == [
        f"Error: {address} is already served by another process; stop it or choose another --port"
    ], output


def assert_answers(server: LiveServer) -> None:
    """Every request, each on a connection of its own, answered by ``server`` itself."""
    fresh = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(base_url=server.base_url, timeout=10, limits=fresh) as http:
        for _ in range(REQUESTS):
            assert http.get("/healthz").status_code == 200
        for _ in range(REQUESTS):
            response = http.get("/plants", headers=bearer(server.token))
            assert response.status_code == 200, response.text


def port_of(server: LiveServer) -> int:
    return int(server.base_url.rsplit(":", 1)[1])


@pytest.fixture
def first(tmp_path: Path) -> Iterator[LiveServer]:
    server = start_server(f"sqlite:///{tmp_path / 'first.db'}", tmp_path / "first.log")
    assert server.token
    try:
        yield server
    finally:
        stop_server(server)


def test_a_second_serve_on_the_port_is_refused(first: LiveServer, tmp_path: Path) -> None:
    port = port_of(first)
    log_path = tmp_path / "second.log"
    second = serve_on(port, f"sqlite:///{tmp_path / 'second.db'}", log_path)
    assert_refused(second, log_path, f"127.0.0.1:{port}")
    assert first.process.poll() is None
    assert_answers(first)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "localhost"])
def test_a_second_serve_on_an_overlapping_host_is_refused(
    first: LiveServer, tmp_path: Path, host: str
) -> None:
    """0.0.0.0 and :: take in 127.0.0.1 (:: is dual-stack here); localhost is 127.0.0.1."""
    if host == "::" and Path("/proc/sys/net/ipv6/bindv6only").read_text().strip() != "0":
        pytest.skip(":: is not dual-stack on this machine")
    port = port_of(first)
    log_path = tmp_path / "second.log"
    second = serve_on(port, f"sqlite:///{tmp_path / 'second.db'}", log_path, "--host", host)
    shown = {"0.0.0.0": "0.0.0.0", "::": "[::]", "localhost": "127.0.0.1"}[host]
    assert_refused(second, log_path, f"{shown}:{port}")
    assert_answers(first)


@contextlib.contextmanager
def reuseport_listener(host: str) -> Iterator[tuple[socket.socket, int]]:
    """A plain socket listening with SO_REUSEPORT, as granian's workers do."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind((host, 0))
        listener.listen()
        listener.settimeout(10)
        yield listener, int(listener.getsockname()[1])


@pytest.mark.parametrize("listening", ["127.0.0.1", "0.0.0.0"])
def test_a_reuseport_socket_keeps_its_port(tmp_path: Path, listening: str) -> None:
    with reuseport_listener(listening) as (listener, port):
        log_path = tmp_path / "serve.log"
        process = serve_on(port, f"sqlite:///{tmp_path / 'p.db'}", log_path)
        assert_refused(process, log_path, f"127.0.0.1:{port}")
        for _ in range(REQUESTS):  # every connection still reaches the socket
            with socket.create_connection(("127.0.0.1", port), timeout=10):
                accepted, _ = listener.accept()
                accepted.close()


def test_the_workers_of_one_serve_share_the_port(tmp_path: Path) -> None:
    server = start_workers(f"sqlite:///{tmp_path / 'p.db'}", tmp_path / "serve.log", 2)
    try:
        assert_answers(server)
        assert "already served" not in server.log_path.read_text()
    finally:
        stop_server(server)


def test_a_restart_on_the_same_port_is_not_refused(first: LiveServer, tmp_path: Path) -> None:
    """Connections the stopped server closed linger in TIME_WAIT on its port: they are no
    service, and the check must not take them for one."""
    port = port_of(first)
    with httpx.Client(base_url=first.base_url, timeout=10) as http:  # kept alive
        assert http.get("/healthz").status_code == 200
        stop_server(first)  # the server closes the idle connection: it lingers on its side
    assert lingering(port), "no connection lingers: the test would prove nothing"
    log_path = tmp_path / "restart.log"
    with serving(serve_on(port, first.db_url, log_path), port, log_path):
        pass


def test_a_free_port_is_served(tmp_path: Path) -> None:
    """The check itself leaves the port free for granian to bind."""
    port = free_port()
    log_path = tmp_path / "serve.log"
    with serving(serve_on(port, f"sqlite:///{tmp_path / 'p.db'}", log_path), port, log_path):
        pass


@contextlib.contextmanager
def serving(process: subprocess.Popen[str], port: int, log_path: Path) -> Iterator[None]:
    """Wait until ``process`` answers /healthz on ``port``; stop it afterwards."""
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, log_path.read_text()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        yield
    finally:
        process.terminate()
        process.wait(timeout=15)


# /proc/net/tcp's states of a connection its own side closed first: FIN_WAIT1, FIN_WAIT2,
# TIME_WAIT, CLOSING.
CLOSED_HERE = {"04", "05", "06", "0B"}


def lingering(port: int) -> bool:
    """Whether a connection on local ``port`` lingers, closed by that side (within 1 s)."""
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] in CLOSED_HERE:
                return True
        time.sleep(0.01)
    return False
