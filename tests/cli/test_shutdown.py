"""SIGTERM: the server stops accepting, finishes the requests it is
answering, lets the writer commit what it holds, and exits 0 within a bound that
``PLANTSTORE_SHUTDOWN_TIMEOUT`` sets: during traffic, with a client that stalls mid-body, and
while the workers are still starting.

The signal goes to the main process only, as ``docker stop`` sends it; granian's main process
passes it on to its workers. PostgreSQL runs with two workers here, SQLite with one
(tests/db/sqlite/test_sqlite_workers.py stops two SQLite workers under load).

Every request ends in one of three ways: a complete 200 carrying the plant (*answered*); a
refused connection, or one the server closed before any byte of an answer (*refused*: the
client knows the request was not answered and may retry it); or anything else, such as an
answer cut off, a timeout or an error status (*broken*). None may be broken, and every
answered create must still be there after a restart.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from harness.procstat import running
from plantstore.processes.forks import PARENT_DEATH_SIGNAL
from tests.fixtures.calls import IssueToken, bearer
from tests.fixtures.servers import (
    QUIET_SERVER_ENV,
    LiveServer,
    all_plants,
    child_pids,
    free_port,
    kill_server,
    start_server,
    stop_server,
    wait_for_started_workers,
)

pytestmark = pytest.mark.server

USERS = ("alice", "bob", "carol")
THREADS = 6
IN_FLIGHT = 3  # creates whose body is still arriving when the signal is sent
EXIT_BOUND = 30.0  # seconds from SIGTERM to exit without a stalled client; generous on purpose
DRAIN_TIMEOUT = 20  # PLANTSTORE_SHUTDOWN_TIMEOUT while the in-flight requests are finished
SHUTDOWN_TIMEOUT = 2  # PLANTSTORE_SHUTDOWN_TIMEOUT for the stalled-client test
BODY_TIMEOUT = 30  # what a stalled body would otherwise hold the shutdown for
STALLED_BOUND = 15.0  # the setting plus room for a busy machine, well under BODY_TIMEOUT
STARTING_BOUND = 10.0  # seconds to exit when signalled while the workers are still starting
NO_ANSWER = "Server disconnected without sending a response."  # h11: no status line came

Kind = Literal["answered", "refused", "broken"]


@dataclass(frozen=True)
class Outcome:
    user: str
    plant: tuple[str, str]  # (name, tag)
    started: float
    finished: float
    kind: Kind
    detail: str
    request_id: str = ""  # the answer's X-Request-ID (its first 12 digits name the process)


def plant_of(plant_id: int) -> dict[str, Any]:
    return {"id": plant_id, "name": f"plant {plant_id}", "tag": f"t{plant_id % 7}"}


def _closed_before_answer(exc: httpx.TransportError, events: list[str]) -> bool:
    """Did the request fail before any of its answer arrived?

    httpx reports the server's close as "Server disconnected without sending a response"
    while it still waits for the status line, and a reset as a ReadError; once the head of
    the answer is complete (the trace says so) any failure cuts an answer off.
    """
    if "http11.receive_response_headers.complete" in events:
        return False
    if isinstance(exc, httpx.ConnectError):
        return True
    if isinstance(exc, httpx.RemoteProtocolError):
        return str(exc) == NO_ANSWER
    return isinstance(exc, httpx.ReadError)


def create(http: httpx.Client, user: str, token: str, plant_id: int) -> Outcome:
    body = plant_of(plant_id)
    plant = (body["name"], body["tag"])
    events: list[str] = []

    def trace(name: str, info: dict[str, Any]) -> None:
        events.append(name)

    started = time.monotonic()
    try:
        response = http.post(
            "/plants", json=body, headers=bearer(token), extensions={"trace": trace}
        )
    except httpx.TransportError as exc:
        kind: Kind = "refused" if _closed_before_answer(exc, events) else "broken"
        return Outcome(user, plant, started, time.monotonic(), kind, repr(exc))
    finished = time.monotonic()
    expected = {"name": plant[0], "tag": plant[1]}
    kind = "answered" if response.status_code == 200 and response.json() == expected else "broken"
    detail = f"{response.status_code} {response.text}"
    request_id = response.headers.get("x-request-id", "")
    return Outcome(user, plant, started, finished, kind, detail, request_id)


class Traffic:
    """Threads creating plants as fast as they can, each on its own keep-alive client (or,
    with ``fresh_connections``, on a new connection per request, so that the kernel spreads
    them over the server's workers)."""

    def __init__(
        self, server: LiveServer, tokens: dict[str, str], *, fresh_connections: bool = False
    ) -> None:
        self._server = server
        self._tokens = tokens
        self._fresh_connections = fresh_connections
        self._ids = itertools.count(1)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(THREADS)]
        self.outcomes: list[Outcome] = []

    def start(self, *, until_answered: int = 0) -> None:
        """Start the threads; return once ``until_answered`` creates were answered (or 60 s)."""
        for thread in self._threads:
            thread.start()
        deadline = time.monotonic() + 60
        while self.answered() < until_answered and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join()

    def answered(self) -> int:
        return sum(outcome.kind == "answered" for outcome in list(self.outcomes))

    def _run(self, index: int) -> None:
        user = USERS[index % len(USERS)]
        options: dict[str, Any] = {"base_url": self._server.base_url, "timeout": EXIT_BOUND}
        if self._fresh_connections:
            options["limits"] = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(**options) as http:
            while not self._stop.is_set():
                outcome = create(http, user, self._tokens[user], next(self._ids))
                self.outcomes.append(outcome)
                if outcome.kind != "answered":
                    self._stop.wait(0.02)  # refused: no need to spin on a shared machine


def port_of(server: LiveServer) -> int:
    return int(server.base_url.rsplit(":", 1)[1])


def served_connection(server: LiveServer) -> http.client.HTTPConnection:
    """A keep-alive connection the server has accepted and answered once (GET /healthz)."""
    connection = http.client.HTTPConnection("127.0.0.1", port_of(server), timeout=EXIT_BOUND)
    connection.request("GET", "/healthz")
    response = connection.getresponse()
    response.read()
    assert response.status == 200
    return connection


def wait_until_read(requests: list[SlowCreate], seconds: float = 10.0) -> None:
    """Wait until the server has read all that ``requests`` sent so far (a fixed pause can be
    too short on a stalled host): no server-side socket of theirs holds unread bytes."""
    ports = {request.connection.sock.getsockname()[1] for request in requests}
    deadline = time.monotonic() + seconds
    while _unread_from(ports) and time.monotonic() < deadline:
        time.sleep(0.02)


def _unread_from(client_ports: set[int]) -> bool:
    """Whether a socket whose peer is one of ``client_ports`` has bytes its process has not
    read (``/proc/net/tcp``: the remote address, then ``tx_queue:rx_queue``, in hex)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote_port = int(fields[2].split(":")[1], 16)
        if remote_port in client_ports and int(fields[4].split(":")[1], 16):
            return True
    return False


class SlowCreate:
    """A create sent in two parts over a served connection: the head and the first bytes of
    the body now, the rest when ``finish`` is called. In between, the request is in flight."""

    def __init__(self, server: LiveServer, user: str, token: str, plant_id: int) -> None:
        body = plant_of(plant_id)
        self.user = user
        self.plant = (str(body["name"]), str(body["tag"]))
        self._body = json.dumps(body).encode()
        self.connection = served_connection(server)
        self.connection.putrequest("POST", "/plants")
        self.connection.putheader("Authorization", f"Bearer {token}")
        self.connection.putheader("Content-Type", "application/json")
        self.connection.putheader("Content-Length", str(len(self._body)))
        self.connection.endheaders(self._body[:5])
        self.started = time.monotonic()

    def finish(self) -> Outcome:
        """Send the rest of the body and read the answer, classified byte for byte."""
        try:
            self.connection.send(self._body[5:])
            response = self.connection.getresponse()
            status, raw = response.status, response.read()
        except http.client.RemoteDisconnected as exc:  # closed before one byte of an answer
            return self._outcome("refused", repr(exc))
        except (OSError, http.client.HTTPException) as exc:
            return self._outcome("broken", repr(exc))
        expected = {"name": self.plant[0], "tag": self.plant[1]}
        complete = status == 200 and json.loads(raw) == expected
        return self._outcome("answered" if complete else "broken", f"{status} {raw!r}")

    def _outcome(self, kind: Kind, detail: str) -> Outcome:
        return Outcome(self.user, self.plant, self.started, time.monotonic(), kind, detail)


def refuses_connections(server: LiveServer, deadline: float) -> bool:
    """Poll until a new connection is refused; False if it is still accepted at ``deadline``."""
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port_of(server)), timeout=5).close()
        except (ConnectionRefusedError, ConnectionResetError):  # reset: the listener closed
            return True  # with this connection still in its accept queue
        time.sleep(0.05)
    return False


def how_it_ended(connection: http.client.HTTPConnection) -> str:
    """How the server ended this idle connection: "closed" is a clean close (FIN, no byte)."""
    assert connection.sock is not None
    connection.sock.settimeout(5)
    try:
        data = connection.sock.recv(1)
    except OSError as exc:
        return repr(exc)
    return "closed" if data == b"" else f"sent {data!r}"


def wait_exit(server: LiveServer, signalled_at: float, bound: float) -> int:
    try:
        return server.process.wait(timeout=max(0.0, signalled_at + bound - time.monotonic()))
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"plantstore serve still running {bound:.0f} s after SIGTERM: "
            f"{server.log_path.read_text()[-2000:]}"
        )


@pytest.fixture
def serve_args(backend: str) -> tuple[str, ...]:
    """SQLite here by one process (two: tests/db/sqlite/test_sqlite_workers.py); PostgreSQL by two,
    signalled through the main."""
    return ("--workers", "2") if backend == "postgres" else ()


@pytest.fixture
def tokens(issue_token: IssueToken) -> dict[str, str]:
    return {user: issue_token(user) for user in USERS}


@pytest.fixture
def stopped_at_the_end() -> Iterator[list[LiveServer]]:
    """Servers to SIGKILL (with every worker) if a test leaves them running."""
    servers: list[LiveServer] = []
    yield servers
    for server in servers:
        if server.process.poll() is None:
            kill_server(server)


def stored_plants(
    db_url: str, log_path: Path, serve_args: tuple[str, ...], tokens: dict[str, str]
) -> dict[str, set[tuple[str, str]]]:
    """Every user's plants as (name, tag), read through a freshly started server."""
    server = start_server(db_url, log_path, *serve_args)
    try:
        return {
            user: {(plant["name"], plant.get("tag", "")) for plant in all_plants(server, token)}
            for user, token in tokens.items()
        }
    finally:
        stop_server(server)


def assert_none_lost(answered: list[Outcome], stored: dict[str, set[tuple[str, str]]]) -> None:
    """Every create answered 200 is among its user's stored plants."""
    for user in USERS:
        acknowledged = {outcome.plant for outcome in answered if outcome.user == user}
        lost = acknowledged - stored[user]
        assert not lost, f"{len(lost)} acknowledged creates of {user} lost: {sorted(lost)[:10]}"


def test_sigterm_during_traffic_finishes_in_flight_requests_and_keeps_every_write(
    db_url: str,
    serve_args: tuple[str, ...],
    tokens: dict[str, str],
    tmp_path: Path,
    stopped_at_the_end: list[LiveServer],
) -> None:
    env = {"PLANTSTORE_SHUTDOWN_TIMEOUT": str(DRAIN_TIMEOUT)}
    server = start_server(db_url, tmp_path / "server.log", *serve_args, **env)
    stopped_at_the_end.append(server)
    wait_for_started_workers(server, 2 if serve_args else 1)
    traffic = Traffic(server, tokens)
    connections: list[http.client.HTTPConnection] = []
    try:
        traffic.start(until_answered=100)
        slow = [
            SlowCreate(server, USERS[0], tokens[USERS[0]], -plant_id)
            for plant_id in range(1, IN_FLIGHT + 1)
        ]
        connections.extend(request.connection for request in slow)
        idle = served_connection(server)
        connections.append(idle)
        wait_until_read(slow)  # the heads are read: those requests are in, awaiting bodies
        time.sleep(0.1)  # and handed to the app

        signalled_at = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        refused = refuses_connections(server, signalled_at + EXIT_BOUND)
        still_running = server.process.poll() is None
        in_flight = [request.finish() for request in slow]
        returncode = wait_exit(server, signalled_at, EXIT_BOUND)
        idle_end = how_it_ended(idle)
        time.sleep(0.5)  # traffic goes on a little after the exit: it is refused
    finally:
        traffic.stop()
        for connection in connections:
            connection.close()

    assert returncode == 0, server.log_path.read_text()[-2000:]
    assert refused, "new connections were still accepted after SIGTERM"
    assert still_running, "the server exited before answering the requests in flight"
    assert idle_end == "closed", f"an idle keep-alive connection was not closed cleanly: {idle_end}"
    assert [outcome.kind for outcome in in_flight] == ["answered"] * IN_FLIGHT, in_flight
    outcomes = traffic.outcomes + in_flight
    broken = [outcome for outcome in outcomes if outcome.kind == "broken"]
    assert not broken, f"{len(broken)} requests cut off or failed, e.g. {broken[:5]}"
    answered = [outcome for outcome in outcomes if outcome.kind == "answered"]
    assert any(outcome.finished < signalled_at for outcome in answered)
    assert any(outcome.finished > signalled_at for outcome in answered)

    assert_none_lost(
        answered, stored_plants(db_url, tmp_path / "restarted.log", serve_args, tokens)
    )


def test_a_stalled_client_holds_the_shutdown_no_longer_than_the_setting(
    db_url: str,
    serve_args: tuple[str, ...],
    tokens: dict[str, str],
    tmp_path: Path,
    stopped_at_the_end: list[LiveServer],
) -> None:
    env = {
        "PLANTSTORE_SHUTDOWN_TIMEOUT": str(SHUTDOWN_TIMEOUT),
        "PLANTSTORE_BODY_TIMEOUT": str(BODY_TIMEOUT),
    }
    server = start_server(db_url, tmp_path / "server.log", *serve_args, **env)
    stopped_at_the_end.append(server)
    user, token = USERS[0], tokens[USERS[0]]
    with server.client() as http:
        answered = create(http, user, token, 1)
    assert answered.kind == "answered", answered
    stalled = SlowCreate(server, user, token, 2)  # its body never completes
    try:
        time.sleep(0.3)
        signalled_at = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        returncode = wait_exit(server, signalled_at, STALLED_BOUND)
    finally:
        stalled.connection.close()
    assert returncode == 0, server.log_path.read_text()[-2000:]

    stored = stored_plants(db_url, tmp_path / "restarted.log", serve_args, tokens)
    assert answered.plant in stored[user]


def test_sigterm_while_the_workers_start_stops_them_before_they_serve(
    db_url: str, serve_args: tuple[str, ...], tmp_path: Path
) -> None:
    """A SIGTERM that arrives as the workers are being started (a deploy rolled back at once,
    a stop during boot) stops them too; none starts serving after it."""
    workers = 2 if serve_args else 1
    port = free_port()
    log_path = tmp_path / "server.log"
    environment = {
        **os.environ,
        **QUIET_SERVER_ENV,
        "PLANTSTORE_DATABASE_URL": db_url,
        "PLANTSTORE_SHUTDOWN_TIMEOUT": "25",  # longer than STARTING_BOUND: no kill may hide it
    }
    command = [sys.executable, "-m", "plantstore", "serve", "--port", str(port), *serve_args]
    with log_path.open("w") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
            text=True,
            start_new_session=True,
        )
    server = LiveServer(process, f"http://127.0.0.1:{port}", db_url, "", log_path)
    try:
        deadline = time.monotonic() + 60
        while len(child_pids(process.pid)) < workers:  # forked or spawned, not yet serving
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.002)
        signalled_at = time.monotonic()
        process.send_signal(signal.SIGTERM)
        returncode = wait_exit(server, signalled_at, STARTING_BOUND)
    finally:
        if process.poll() is None:
            kill_server(server)
    assert returncode == 0, log_path.read_text()[-2000:]


@pytest.mark.parametrize("extra_signals", [0, 3], ids=["signalled once", "once per thread"])
def test_a_sigkilled_supervisor_takes_its_workers_down_gracefully(
    db_url: str,
    serve_args: tuple[str, ...],
    tokens: dict[str, str],
    tmp_path: Path,
    stopped_at_the_end: list[LiveServer],
    extra_signals: int,
) -> None:
    """Orphaned workers would serve on and hold the port a restarted service needs: the
    kernel signals each when the supervisor dies, and they stop as on SIGTERM. The kernel
    signals a worker once per thread of it, so some get the signal several times; it is
    sent here again to be sure, and the stop is the same (granian's SIGTERM handler, called
    a third time, hung the worker)."""
    server = start_server(db_url, tmp_path / "server.log", *serve_args)
    stopped_at_the_end.append(server)
    workers = 2 if serve_args else 1
    wait_for_started_workers(server, workers)
    orphans = child_pids(server.process.pid)
    assert len(orphans) == workers
    traffic = Traffic(server, tokens)
    try:
        traffic.start(until_answered=100)
        killed_at = time.monotonic()
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(timeout=10)
        for pid in orphans:  # back to back, as the kernel sends them
            for _ in range(extra_signals):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, PARENT_DEATH_SIGNAL)
        while any(running(pid) for pid in orphans):
            assert time.monotonic() - killed_at < EXIT_BOUND, "the workers served on, orphaned"
            time.sleep(0.05)
    finally:
        traffic.stop()

    with socket.socket() as probe:  # the port is free for the service's restart
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port_of(server)))
    broken = [outcome for outcome in traffic.outcomes if outcome.kind == "broken"]
    assert not broken, f"{len(broken)} requests cut off or failed, e.g. {broken[:5]}"
    answered = [outcome for outcome in traffic.outcomes if outcome.kind == "answered"]
    assert_none_lost(
        answered, stored_plants(db_url, tmp_path / "restarted.log", serve_args, tokens)
    )
