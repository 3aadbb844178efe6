"""Fixtures: a fresh database per test on each backend, an in-process client, tokens issued
through the real CLI, and a real ``plantstore serve`` process on a free port.

Every test that takes ``db_url`` (or anything built on it) runs as ``[sqlite]`` and
``[postgres]``. PostgreSQL comes from PLANTSTORE_TEST_POSTGRES_URL, else a throwaway cluster
from the local binaries, else its tests skip with the reason shown (they fail instead when
PLANTSTORE_TEST_REQUIRE_POSTGRES=1, as in CI).

The tests that talk HTTP through ``client`` or ``live_server`` run a third time, as
``[sqlite-2workers]``: against a real ``plantstore serve --workers 2`` on one SQLite file,
each request on a new connection so that both worker processes answer. The rest of that
backend's items are deselected (see ``pytest_collection_modifyitems``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import httpx2
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from plantstore.app import create_app
from plantstore.cli import main
from plantstore.db.migrate import upgrade
from plantstore.settings import Settings
from tests import pg

IssueToken = Callable[..., str]
TWO_WORKERS = "sqlite-2workers"  # the contract suite against a two-worker SQLite server
BACKENDS = ("sqlite", "postgres", TWO_WORKERS)
# A test runs on TWO_WORKERS only if it takes one of these (it talks HTTP to a server) and
# none of the next: those need the app in this process (its settings, its log records, a
# patched environment) or a database of their own (they break the schema).
# ("server": tests/webhooks/test_webhooks.py's server of the test's backend, two workers on TWO_WORKERS.)
LIVE_FIXTURES = frozenset({"client", "live_server", "server"})
IN_PROCESS_FIXTURES = frozenset({"settings", "caplog"})
IN_PROCESS_ONLY = "in_process_only"  # a marker for single parameters (see pytest_configure)
# Read once at import: the autouse fixture below hides PLANTSTORE_* variables from tests.
TEST_POSTGRES_URL = os.environ.get(pg.URL_VARIABLE)
REQUIRE_POSTGRES = os.environ.get(pg.REQUIRE_VARIABLE) == "1"
NO_SKIPS_VARIABLE = "PLANTSTORE_TEST_NO_SKIPS"
NO_SKIPS = os.environ.get(NO_SKIPS_VARIABLE) == "1"
# The README's knobs for a wider schemathesis run (tests/e2e/test_schemathesis.py), read here for
# the same reason: by the time a test runs, the fixture below has deleted them.
SCHEMATHESIS_EXAMPLES_VARIABLE = "PLANTSTORE_SCHEMATHESIS_EXAMPLES"
SCHEMATHESIS_SEED_VARIABLE = "PLANTSTORE_SCHEMATHESIS_SEED"
SCHEMATHESIS_EXAMPLES = os.environ.get(SCHEMATHESIS_EXAMPLES_VARIABLE, "100")
SCHEMATHESIS_SEED = os.environ.get(SCHEMATHESIS_SEED_VARIABLE, "20261120")
# Tests send bursts from one address with few tokens (the rate-limit tests turn limits on),
# and run servers side by side (the metrics tests give theirs a free metrics port). A server
# has one worker unless its test asks for more (--workers N): the shipped default, one per
# core, would make every server's behaviour depend on the machine (a test counting granian's
# children, waiting for "Started worker-", or relying on one process's rate-limit budget),
# and start up to 8 processes per server on a shared CI machine.
QUIET_SERVER_ENV = {
    "PLANTSTORE_RATE_LIMIT": "off",
    "PLANTSTORE_AUTH_FAILURE_LIMIT": "off",
    "PLANTSTORE_METRICS_ADDRESS": "off",
    "PLANTSTORE_WORKERS": "1",
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{IN_PROCESS_ONLY}: a request no HTTP client library sends as written, or that a "
        f"server's HTTP parser refuses before the app sees it: not run on {TWO_WORKERS}",
    )


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Deselect (not skip: CI forbids skips) the TWO_WORKERS items that do not talk HTTP to a
    server: a CLI, migration or store test would only repeat its ``[sqlite]`` run."""
    kept: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        (deselected if _in_process_only(item) else kept).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def _in_process_only(item: pytest.Item) -> bool:
    """Whether ``item`` is a TWO_WORKERS run that the two-worker server cannot carry."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or callspec.params.get("backend") != TWO_WORKERS:
        return False
    fixtures = set(getattr(item, "fixturenames", ()))
    direct = set(getattr(getattr(item, "_fixtureinfo", None), "argnames", ()))
    return (
        not fixtures & LIVE_FIXTURES
        or bool(fixtures & IN_PROCESS_FIXTURES)
        or "monkeypatch" in direct
        or item.get_closest_marker("own_database") is not None
        or item.get_closest_marker(IN_PROCESS_ONLY) is not None
    )


def is_sqlite(backend: str) -> bool:
    return backend in ("sqlite", TWO_WORKERS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """With PLANTSTORE_TEST_NO_SKIPS=1 (CI), a skipped test fails: it proved nothing."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if NO_SKIPS and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped, which {NO_SKIPS_VARIABLE}=1 forbids: {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """The same rule for a skip while collecting (a module-level ``pytest.importorskip`` or
    ``pytest.skip(allow_module_level=True)``): it would drop a whole module without a word."""
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()  # type: ignore[attr-defined]
    if NO_SKIPS and report.skipped:
        report.outcome = "failed"
        where, reason = collector.nodeid or collector.name, report.longrepr
        if isinstance(reason, tuple):  # (path, line, "Skipped: why")
            where, reason = f"{reason[0]}:{reason[1]}", reason[2]
        report.longrepr = (
            f"{where}: skipped while collecting, which {NO_SKIPS_VARIABLE}=1 forbids: {reason}"
        )


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep a developer's own PLANTSTORE_* variables out of every test."""
    for name in list(os.environ):
        if name.startswith("PLANTSTORE_"):
            monkeypatch.delenv(name)
    for name, value in QUIET_SERVER_ENV.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "plantstore.db"


@pytest.fixture
def sqlite_url(db_path: Path) -> str:
    return f"sqlite:///{db_path}"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[pg.PostgresServer | None]:
    """The PostgreSQL server of this run, or None when there is none to be had."""
    if TEST_POSTGRES_URL:
        server = pg.PostgresServer(TEST_POSTGRES_URL, pg.database_of(TEST_POSTGRES_URL))
        yield server
        server.drop_all()
    elif pg.postgres_binaries() is not None:
        with pg.throwaway_cluster() as cluster:
            server = pg.PostgresServer(cluster.url, "plantstore_test")
            yield server
            server.drop_all()
    else:
        yield None


def require_postgres(server: pg.PostgresServer | None) -> pg.PostgresServer:
    if server is None:
        reason = (
            f"PostgreSQL tests skipped: {pg.URL_VARIABLE} is not set and no initdb/pg_ctl "
            "was found to start a throwaway cluster"
        )
        if REQUIRE_POSTGRES:
            pytest.fail(reason)
        pytest.skip(reason)
    return server


@pytest.fixture
def postgres(postgres_server: pg.PostgresServer | None) -> pg.PostgresServer:
    """The run's PostgreSQL server, for tests that are about PostgreSQL alone."""
    return require_postgres(postgres_server)


@pytest.fixture(scope="session")
def postgres_shared_url(postgres_server: pg.PostgresServer | None) -> str:
    """One migrated database that ``db_url`` empties before each test that uses it."""
    url = require_postgres(postgres_server).create_database()
    upgrade(url)
    return url


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Session-scoped so that pytest runs each backend's tests together."""
    return str(request.param)


@pytest.fixture
def db_url(backend: str, sqlite_url: str, request: pytest.FixtureRequest) -> str:
    """An empty, migrated database on this test's backend.

    ``@pytest.mark.own_database`` gives a PostgreSQL test a database of its own (for tests
    that break the schema or need it unmigrated) instead of the emptied shared one. On
    TWO_WORKERS it is the file of the session's two-worker server, emptied.
    """
    if backend == "sqlite":
        return sqlite_url
    if backend == TWO_WORKERS:
        shared: LiveServer = request.getfixturevalue("two_worker_server")
        empty_sqlite(shared.db_url)
        return shared.db_url
    server = require_postgres(request.getfixturevalue("postgres_server"))
    if request.node.get_closest_marker("own_database"):
        return server.create_database()
    return emptied_shared_database(request)


def emptied_shared_database(request: pytest.FixtureRequest) -> str:
    """The shared PostgreSQL database with every user, token, plant and sandbox issue
    removed."""
    url: str = request.getfixturevalue("postgres_shared_url")
    pg.run_sql(url, "TRUNCATE plants, tokens, users, sandbox_issues RESTART IDENTITY CASCADE")
    return url


def empty_sqlite(db_url: str) -> None:
    """Remove every webhook subscription, plant, token and user from a SQLite file a server is
    serving, in one transaction (the plant-count triggers keep ``users.plant_count`` right on
    the way). Subscriptions go first and by hand: this connection has no foreign keys, so
    nothing cascades, and a reused user id would inherit an earlier test's subscriptions."""
    with contextlib.closing(
        sqlite3.connect(db_url.removeprefix("sqlite:///"), timeout=10, isolation_level=None)
    ) as conn:
        conn.execute("BEGIN IMMEDIATE")
        webhooks = ("webhook_attempts", "webhook_deliveries", "webhook_subscriptions")
        for table in (*webhooks, "plants", "tokens", "users", "sandbox_issues"):
            conn.execute(f"DELETE FROM {table}")
        conn.execute("COMMIT")


def new_database_url(backend: str, directory: Path, request: pytest.FixtureRequest) -> str:
    """A database of its own, for servers that outlive one test or for several at once."""
    if is_sqlite(backend):
        return f"sqlite:///{directory / 'plantstore.db'}"
    return require_postgres(request.getfixturevalue("postgres_server")).create_database()


def stored_data(db_url: str) -> bytes:
    """Everything the database holds, as bytes to search: the SQLite files (with the WAL),
    or every row of every PostgreSQL table as text."""
    if db_url.startswith("sqlite:///"):
        path = Path(db_url.removeprefix("sqlite:///"))
        files = [path, path.with_name(f"{path.name}-wal"), path.with_name(f"{path.name}-journal")]
        return b"".join(file.read_bytes() for file in files if file.exists())
    [rows] = pg.run_sql(
        db_url,
        "SELECT string_agg(row_text, E'\\n') FROM ("
        " SELECT t::text AS row_text FROM tokens t UNION ALL SELECT u::text FROM users u"
        " UNION ALL SELECT p::text FROM plants p UNION ALL SELECT s::text FROM secrets s) rows",
    )
    return str(rows[0][0] or "").encode()


def run_sql(db_url: str, statement: str) -> None:
    """Run one statement straight on the database, behind the service's back."""
    if db_url.startswith("sqlite:///"):
        with contextlib.closing(
            sqlite3.connect(db_url.removeprefix("sqlite:///"), timeout=10)
        ) as conn:
            conn.execute(statement)
            conn.commit()
    else:
        pg.run_sql(db_url, statement)


@pytest.fixture
def settings(db_url: str) -> Settings:
    """The shipped settings, but for PostgreSQL's time budget: CI's shared 2-core machine
    stalled the shared test database past the shipped 1 s + 1 s twice in ~5,000 in-process
    requests (a 503 in a test of something else). The outage tests keep the shipped budget."""
    return Settings(database_url=db_url, connect_timeout=5.0, statement_timeout=5.0)


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
def client(
    backend: str, db_url: str, request: pytest.FixtureRequest
) -> Iterator[TestClient | httpx.Client]:
    """An in-process client; the app's lifespan (migrations, store) runs around the test.

    On TWO_WORKERS, an httpx client of the two-worker server instead (TestClient's API is
    httpx's) that keeps no connection alive: each request is accepted anew, by either
    worker, so a plant created through one is listed and deleted through the other.
    """
    if backend == TWO_WORKERS:
        server: LiveServer = request.getfixturevalue("two_worker_server")
        fresh = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(base_url=server.base_url, timeout=30, limits=fresh) as http:
            yield http
        return
    settings: Settings = request.getfixturevalue("settings")
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
    token: str
    log_path: Path

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=10)


def start_server(
    db_url: str, log_path: Path, *args: str, unset: Collection[str] = (), **env: str
) -> LiveServer:
    """Start ``plantstore serve [args]`` on a free port and wait until it answers /healthz.

    ``env`` adds settings; ``unset`` names variables the server must not see at all (to
    get a setting's shipped default, e.g. one that QUIET_SERVER_ENV would otherwise set).
    """
    port = free_port()
    environment = {**os.environ, **QUIET_SERVER_ENV, "PLANTSTORE_DATABASE_URL": db_url, **env}
    for name in unset:
        environment.pop(name, None)
    with log_path.open("w") as log:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            [sys.executable, "-m", "plantstore", "serve", "--port", str(port), *args],
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
    return LiveServer(process, base_url, db_url, token, log_path)


def all_plants(server: LiveServer, token: str) -> list[dict[str, str]]:
    """Every plant of the token's user, following the Link header page by page."""
    plants: list[dict[str, str]] = []
    url: str | None = "/plants?limit=1000"
    with server.client() as http:
        while url is not None:
            response = http.get(url, headers=bearer(token))
            assert response.status_code == 200, response.text
            plants.extend(response.json())
            link = response.headers.get("link")
            url = link[1 : link.index(">")] if link else None
    return plants


def child_pids(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (granian's workers), from /proc."""
    children: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            children.update(int(word) for word in (task / "children").read_text().split())
    return children


def kill_server(server: LiveServer) -> None:
    """SIGKILL the server and all its workers at once: no shutdown code runs."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.process.pid, signal.SIGKILL)
    server.process.wait()


def stop_server(server: LiveServer) -> None:
    """SIGTERM, as an operator would; if that does not end it, SIGKILL it and its workers."""
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            kill_server(server)


def wait_for_started_workers(server: LiveServer, workers: int) -> None:
    """Wait until granian has logged "Started worker-N" ``workers`` times (/healthz answers
    as soon as one worker listens)."""
    deadline = time.monotonic() + 60
    while server.log_path.read_text().count("Started worker-") < workers:
        assert server.process.poll() is None, server.log_path.read_text()[-2000:]
        assert time.monotonic() < deadline, f"not every worker started: {server.log_path}"
        time.sleep(0.05)


def start_workers(db_url: str, log_path: Path, workers: int, **env: str) -> LiveServer:
    """``plantstore serve --workers N``, once every worker has started (stopped if not)."""
    server = start_server(db_url, log_path, "--workers", str(workers), **env)
    try:
        wait_for_started_workers(server, workers)
        assert len(child_pids(server.process.pid)) == workers
    except BaseException:
        stop_server(server)
        raise
    return server


def answered_by(response: httpx.Response) -> str:
    """The answering process: a generated request id starts with its process's prefix."""
    return response.headers["x-request-id"][:12]


@contextlib.contextmanager
def two_worker_server_in(directory: Path) -> Iterator[LiveServer]:
    """``plantstore serve --workers 2`` on a fresh SQLite file, once both workers serve; at
    the end, neither may have died meanwhile (granian would have replaced it unseen)."""
    server = start_server(
        f"sqlite:///{directory / 'plantstore.db'}", directory / "server.log", "--workers", "2"
    )
    try:
        wait_for_started_workers(server, 2)
        workers = child_pids(server.process.pid)
        yield server
        assert child_pids(server.process.pid) == workers, server.log_path.read_text()[-2000:]
    finally:
        stop_server(server)


@pytest.fixture(scope="session")
def two_worker_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """TWO_WORKERS' server for ``client`` and ``db_url``, whose file each test empties."""
    with two_worker_server_in(tmp_path_factory.mktemp("two-workers")) as server:
        yield server


@pytest.fixture(scope="session")
def live_server(
    backend: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[LiveServer]:
    """One real server per backend for the whole session, on a fresh database (on
    TWO_WORKERS, a two-worker server of its own: ``db_url`` never empties this one)."""
    directory = tmp_path_factory.mktemp(f"live-{backend}")
    if backend == TWO_WORKERS:
        with two_worker_server_in(directory) as server:
            assert server.token, "the first start should issue and print a token"
            yield server
        return
    db_url = new_database_url(backend, directory, request)
    server = start_server(db_url, directory / "server.log")
    assert server.token, "the first start should issue and print a token for user 'default'"
    yield server
    stop_server(server)
