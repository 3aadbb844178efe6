"""Fixtures: a fresh SQLite file per test, an in-process client, tokens issued through the
real CLI, and a real ``plantstore serve`` process on a free port for over-the-wire tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import httpx2
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from plantstore.app import create_app
from plantstore.cli import main
from plantstore.settings import Settings

IssueToken = Callable[..., str]


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep a developer's own PLANTSTORE_* variables out of every test."""
    for name in list(os.environ):
        if name.startswith("PLANTSTORE_"):
            monkeypatch.delenv(name)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "plantstore.db"


@pytest.fixture
def db_url(db_path: Path) -> str:
    return f"sqlite:///{db_path}"


@pytest.fixture
def settings(db_url: str) -> Settings:
    return Settings(database_url=db_url)


def run_cli(db_url: str, *args: str) -> str:
    """Run a ``plantstore`` command in-process; return its stdout, failing on a non-zero exit."""
    result = CliRunner().invoke(main, ["--database", db_url, *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def token_from_output(stdout: str) -> str:
    """The token is alone on the last line of ``token create``'s stdout."""
    token = stdout.rstrip("\n").splitlines()[-1]
    assert token.startswith("pst_")
    return token


@pytest.fixture
def issue_token(db_url: str) -> IssueToken:
    """``issue_token("alice", expires_in="30d")`` issues a token through the CLI."""

    def issue(user: str, expires_in: str | None = None) -> str:
        extra = [] if expires_in is None else ["--expires-in", expires_in]
        return token_from_output(run_cli(db_url, "token", "create", user, *extra))

    return issue


def assert_error(response: httpx.Response | httpx2.Response, status: int, *names: str) -> str:
    """Check the exact Error body (``error`` equals the status, a message naming ``names``)
    and its JSON media type; return the message."""
    assert response.status_code == status, response.text
    media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    assert media_type == "application/json", response.headers.get("content-type")
    body = response.json()
    assert isinstance(body, dict)
    assert set(body) == {"error", "message"}, body
    assert type(body["error"]) is int
    assert body["error"] == status
    message = body["message"]
    assert isinstance(message, str)
    assert message.strip()
    for name in names:
        assert name in message, f"{name!r} not named in {message!r}"
    return message


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    """An in-process client; the app's lifespan (migrations, store) runs around the test."""
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def alice(issue_token: IssueToken) -> dict[str, str]:
    return bearer(issue_token("alice"))


@pytest.fixture
def bob(issue_token: IssueToken) -> dict[str, str]:
    return bearer(issue_token("bob"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LiveServer:
    """A real ``plantstore serve`` process, its address, its database and its first token."""

    process: subprocess.Popen[str]
    base_url: str
    db_url: str
    db_path: Path
    token: str
    log_path: Path

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=10)


def start_server(db_path: Path, log_path: Path, **env: str) -> LiveServer:
    """Start ``plantstore serve`` on a free port and wait until it answers /healthz."""
    port = free_port()
    db_url = f"sqlite:///{db_path}"
    environment = {**os.environ, "PLANTSTORE_DATABASE_URL": db_url, **env}
    with log_path.open("w") as log:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "plantstore", "serve", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
            text=True,
            start_new_session=True,  # its own process group, so a kill reaches every worker
        )
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"plantstore serve exited: {log_path.read_text()}")
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"plantstore serve did not start: {log_path.read_text()}")
        time.sleep(0.05)
    output = log_path.read_text()
    token = next((word for word in output.split() if word.startswith("pst_")), "")
    return LiveServer(process, base_url, db_url, db_path, token, log_path)


def kill_server(server: LiveServer) -> None:
    """SIGKILL the server and all its workers at once: no shutdown code runs."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.process.pid, signal.SIGKILL)
    server.process.wait()


def stop_server(server: LiveServer) -> None:
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One real server for the whole session, on a fresh database with its first token."""
    directory = tmp_path_factory.mktemp("live")
    server = start_server(directory / "plantstore.db", directory / "server.log")
    assert server.token, "the first start should issue and print a token for user 'default'"
    yield server
    stop_server(server)
