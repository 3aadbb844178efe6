"""PostgreSQL going away and coming back, and PostgreSQL set up to lose acknowledged writes.

Each test runs its own throwaway cluster (``tests/pg.py``), because it stops the cluster or
starts it with unsafe settings; the machine's own PostgreSQL is never touched. Without
initdb/pg_ctl the tests skip with the reason shown, or fail under
PLANTSTORE_TEST_REQUIRE_POSTGRES=1.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import pg
from tests.fixtures.backends import REQUIRE_POSTGRES
from tests.fixtures.calls import assert_error, bearer, run_cli, token_from_output
from tests.fixtures.servers import (
    LiveServer,
    all_plants,
    child_pids,
    free_port,
    start_server,
    stop_server,
)

pytestmark = pytest.mark.server

ANSWER_BOUND = 2.5  # seconds: the promise for every answer while the database is down
AUTH_BOUND = 1.0  # seconds: a 401 needs no database at all
HTTP_TIMEOUT = 5.0  # larger than the bound, so a hang fails the bound instead of raising
DOWN_SECONDS = 4.0
RECOVERY_BOUND = 5.0  # seconds from the cluster being up again to 2xx
RECOVERY_WATCH = 10.0  # keep polling past the bound, to report how long recovery took
WORKERS = 3
CHALLENGE = 'Bearer realm="plantstore"'
INVALID_TOKEN_CHALLENGE = f'{CHALLENGE}, error="invalid_token"'
RETRY_AFTER = re.compile(r"[1-9][0-9]*")
DATABASE_KINDS = {"create": 200, "list": 200, "delete": 404, "readyz": 200}
CREATES = 40  # sequential creates per WAL-sync measurement
UNSAFE = {"PLANTSTORE_ALLOW_UNSAFE_DURABILITY": "true"}


def require_binaries() -> None:
    """Skip (or fail, when PostgreSQL is required) where no cluster can be started."""
    if pg.postgres_binaries() is None:
        reason = (
            "PostgreSQL outage and durability tests skipped: no initdb/pg_ctl was found to "
            "start a throwaway cluster"
        )
        if REQUIRE_POSTGRES:
            pytest.fail(reason)
        pytest.skip(reason)


# --- the outage --------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One request: what it was, the phase it was sent and answered in, and the answer."""

    kind: str
    sent_in: str
    answered_in: str
    seconds: float
    response: httpx.Response | None
    failure: str
    at: float  # wall clock, to find the request in the server's log
    expected: object = None  # the body a 200 must carry, where the test knows it

    def describe(self) -> str:
        when = time.strftime("%H:%M:%S", time.gmtime(self.at)) + f"{self.at % 1:.3f}"[1:]
        got = "no answer" if self.response is None else str(self.response.status_code)
        phases = f"{self.sent_in}->{self.answered_in}"
        return f"{self.kind} ({phases} at {when}Z, {self.seconds:.3f}s, {got})"


@dataclass
class Traffic:
    """Requests from several threads, every answer recorded with the phase around it."""

    base_url: str
    token: str
    phase: str = "up"
    answers: list[Answer] = field(default_factory=list)
    sent: dict[int, dict[str, str]] = field(default_factory=dict)
    acknowledged: dict[int, dict[str, str]] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=HTTP_TIMEOUT)

    def call(
        self,
        http: httpx.Client,
        kind: str,
        method: str,
        url: str,
        expected: object = None,
        **kw: Any,
    ) -> Answer:
        sent_in, at = self.phase, time.time()
        start = time.monotonic()
        try:
            response: httpx.Response | None = http.request(method, url, **kw)
            failure = ""
        except httpx.HTTPError as exc:
            response, failure = None, f"{type(exc).__name__}: {exc}"
        seconds = time.monotonic() - start
        answer = Answer(kind, sent_in, self.phase, seconds, response, failure, at, expected)
        with self.lock:
            self.answers.append(answer)
        return answer

    def create(self, http: httpx.Client, plant_id: int) -> Answer:
        plant = {"name": f"plant-{plant_id}", "tag": f"tag-{plant_id % 7}"}
        with self.lock:
            self.sent[plant_id] = plant
        body = {"id": plant_id, **plant}
        answer = self.call(http, "create", "POST", "/plants", plant, json=body, headers=self.auth)
        if answer.response is not None and answer.response.status_code == 200:
            with self.lock:
                self.acknowledged[plant_id] = plant
        return answer

    @property
    def auth(self) -> dict[str, str]:
        return bearer(self.token)

    def run(self, first_id: int) -> None:
        """Create ids upwards, list, delete an id never created, ask /readyz; until done."""
        with self.client() as http:
            plant_id = first_id
            while not self.done.is_set():
                self.create(http, plant_id)
                self.call(http, "list", "GET", "/plants?limit=10", headers=self.auth)
                self.call(http, "delete", "DELETE", f"/plants/{-plant_id}", headers=self.auth)
                self.call(http, "readyz", "GET", "/readyz")
                plant_id += 1
                self.done.wait(0.02)


def unavailable_problems(response: httpx.Response) -> list[str]:
    """What is wrong with ``response`` as a 503 for an unreachable database."""
    problems = []
    try:
        assert_error(response, 503)
    except AssertionError as exc:
        problems.append(f"not the 503 Error body: {exc}".splitlines()[0])
    retry_after = response.headers.get("retry-after")
    if retry_after is None or not RETRY_AFTER.fullmatch(retry_after):
        problems.append(f"Retry-After is {retry_after!r}, not a positive integer")
    return problems


def database_answer_problems(answer: Answer) -> list[str]:
    """A request that needs the database: 503 while down, its usual status while up."""
    assert answer.response is not None
    status = answer.response.status_code
    steady = answer.sent_in == answer.answered_in
    healthy = steady and answer.sent_in in ("up", "recovered")
    if (steady and answer.sent_in == "down") or (status == 503 and not healthy):
        return unavailable_problems(answer.response)
    if status != DATABASE_KINDS[answer.kind]:
        return [f"status {status}: {answer.response.text[:200]}"]
    if answer.expected is not None and answer.response.json() != answer.expected:
        return [f"body {answer.response.text[:200]}, not {answer.expected}"]
    return []


def auth_answer_problems(answer: Answer) -> list[str]:
    """A request refused before the database: a 401 with the right challenge, quickly."""
    assert answer.response is not None
    problems = []
    try:
        assert_error(answer.response, 401)
    except AssertionError as exc:
        problems.append(f"not the 401 Error body: {exc}".splitlines()[0])
    expected = INVALID_TOKEN_CHALLENGE if "malformed" in answer.kind else CHALLENGE
    challenge = answer.response.headers.get("www-authenticate")
    if challenge != expected:
        problems.append(f"WWW-Authenticate is {challenge!r}, not {expected!r}")
    if answer.seconds > AUTH_BOUND:
        problems.append(f"took {answer.seconds:.3f}s")
    return problems


def answer_problems(answer: Answer) -> list[str]:
    if answer.response is None:
        return [answer.failure]
    problems = []
    if answer.seconds > ANSWER_BOUND:
        problems.append(f"took {answer.seconds:.3f}s > {ANSWER_BOUND}s")
    if answer.kind in DATABASE_KINDS:
        problems += database_answer_problems(answer)
    elif answer.kind.startswith("auth"):
        problems += auth_answer_problems(answer)
    elif answer.response.status_code != 200:  # /healthz
        problems.append(f"status {answer.response.status_code}")
    return problems


AUTH_PROBES = {
    "auth: no Authorization": {},
    "auth: Basic": {"Authorization": "Basic abc"},
    "auth: malformed Bearer": {"Authorization": "Bearer not-a-plantstore-token"},
}


def probe_while_down(traffic: Traffic, seconds: float) -> None:
    """Bad credentials on every route, and /healthz, for as long as the database is down."""
    deadline = time.monotonic() + seconds
    with traffic.client() as http:
        while time.monotonic() < deadline:
            for kind, headers in AUTH_PROBES.items():
                body = {"id": 1, "name": "Fern"}
                traffic.call(http, kind, "POST", "/plants", json=body, headers=headers)
                traffic.call(http, kind, "GET", "/plants?limit=10", headers=headers)
                traffic.call(http, kind, "DELETE", "/plants/1", headers=headers)
            traffic.call(http, "healthz", "GET", "/healthz")
            time.sleep(0.2)


def seconds_to_recover(traffic: Traffic, since: float) -> float | None:
    """Poll a create, a list and /readyz until all three are 2xx; None if never."""
    plant_id = 9_000_000
    with traffic.client() as http:
        while time.monotonic() - since < RECOVERY_WATCH:
            answers = [
                traffic.create(http, plant_id),
                traffic.call(http, "list", "GET", "/plants?limit=10", headers=traffic.auth),
                traffic.call(http, "readyz", "GET", "/readyz"),
            ]
            plant_id += 1
            if all(a.response is not None and a.response.status_code == 200 for a in answers):
                return time.monotonic() - since
            time.sleep(0.1)
    return None


def summary(traffic: Traffic, recovered_in: float | None) -> str:
    counts = collections.Counter(
        (
            a.kind.split(":")[0],
            a.sent_in,
            a.answered_in,
            a.response.status_code if a.response else a.failure,
        )
        for a in traffic.answers
    )
    down = [a for a in traffic.answers if a.sent_in == "down" and a.kind in DATABASE_KINDS]
    slowest = max((a.seconds for a in down), default=0.0)
    recovery = "never" if recovered_in is None else f"{recovered_in:.2f}s"
    lines = [f"{count:6d}  {key}" for key, count in sorted(counts.items(), key=str)]
    return (
        f"{len(traffic.answers)} answers, slowest while down {slowest:.3f}s, "
        f"recovered after {recovery}, {len(traffic.acknowledged)} creates acknowledged\n"
        + "\n".join(lines)
    )


def first(problems: list[str]) -> list[str]:
    """The first few problems of each kind of request, so one flood does not hide another."""
    shown: dict[str, list[str]] = collections.defaultdict(list)
    for problem in problems:
        kind = problem.split(" (")[0]
        if len(shown[kind]) < 3:
            shown[kind].append(problem)
    return [problem for group in shown.values() for problem in group]


def outage(
    cluster: pg.ThrowawayCluster, server: LiveServer, token: str
) -> tuple[Traffic, float | None, set[int]]:
    """Traffic before, during and after an immediate stop of the cluster."""
    traffic = Traffic(server.base_url, token)
    threads = [
        threading.Thread(target=traffic.run, args=(n * 1_000_000 + 1,)) for n in range(WORKERS)
    ]
    for thread in threads:
        thread.start()
    try:
        warm_up = time.monotonic() + 10
        while len(traffic.acknowledged) < 30 and time.monotonic() < warm_up:
            time.sleep(0.05)
        time.sleep(0.5)
        workers = child_pids(server.process.pid)
        traffic.phase = "stopping"
        cluster.stop("immediate")
        traffic.phase = "down"
        probe_while_down(traffic, DOWN_SECONDS)
        traffic.phase = "starting"
        cluster.start()
        back_at = time.monotonic()
        traffic.phase = "back"
        recovered_in = seconds_to_recover(traffic, back_at)
        traffic.phase = "recovered"
        time.sleep(1.0)
    finally:
        traffic.done.set()
        for thread in threads:
            thread.join(timeout=30)
    return traffic, recovered_in, workers


def lost_problems(traffic: Traffic, plants: list[dict[str, str]]) -> list[str]:
    """Every acknowledged create is listed exactly as sent; nothing unsent appears."""
    problems = []
    listed = {int(plant["name"].removeprefix("plant-")): plant for plant in plants}
    if len(listed) != len(plants):
        problems.append("a plant is listed twice")
    if list(listed) != sorted(listed):
        problems.append("plants are not listed by id ascending")
    lost = [i for i, plant in traffic.acknowledged.items() if listed.get(i) != plant]
    if lost:
        problems.append(f"{len(lost)} acknowledged creates missing or changed: {lost[:10]}")
    phantom = [i for i, plant in listed.items() if traffic.sent.get(i) != plant]
    if phantom:
        problems.append(f"listed but never sent as such: {phantom[:10]}")
    if len(traffic.acknowledged) < 30:
        problems.append(f"only {len(traffic.acknowledged)} creates acknowledged in all")
    return problems


@pytest.mark.serial  # the clock judges every answer against the request's deadline
def test_postgres_outage_gets_quick_503s_and_recovers_without_restart(tmp_path: Path) -> None:
    """While PostgreSQL is down every answer is a prompt 503 that says when to retry (or a 401
    for bad credentials, which needs no database); once it is back the same process serves
    2xx within 5 s, and no create acknowledged before, during or after is lost."""
    require_binaries()
    with pg.throwaway_cluster() as cluster:
        pg.run_sql(cluster.url, "CREATE DATABASE plantstore_outage")
        db_url = pg.with_database(cluster.url, "plantstore_outage")
        server = start_server(db_url, tmp_path / "server.log")
        try:
            assert server.token, "the first start should issue a token for 'default'"
            token = token_from_output(run_cli(db_url, "token", "create", "gardener"))
            traffic, recovered_in, workers_before = outage(cluster, server, token)
            still_running = server.process.poll() is None
            workers_after = child_pids(server.process.pid)
            plants = all_plants(server, token)
        finally:
            stop_server(server)
    report = summary(traffic, recovered_in)
    print(report)
    # Every finding at once: one broken promise must not hide another.
    problems = [
        f"{answer.describe()}: {problem}"
        for answer in traffic.answers
        for problem in answer_problems(answer)
    ]
    failures = []
    if problems:
        examples = "".join(f"\n  {problem}" for problem in first(problems))
        failures.append(f"{len(problems)} bad answers, e.g.{examples}")
    if recovered_in is None or recovered_in > RECOVERY_BOUND:
        failures.append(f"not 2xx within {RECOVERY_BOUND}s of the cluster starting")
    if not still_running:
        failures.append("the server process exited")
    if workers_after != workers_before:
        failures.append(f"workers replaced: {workers_before} -> {workers_after}")
    if "unexpected fault" in server.log_path.read_text():
        failures.append("the log has an unexpected fault (a 500)")
    failures += lost_problems(traffic, plants)
    assert not failures, "\n".join(failures) + "\n" + report


# --- durability settings -----------------------------------------------------------------


@pytest.fixture(scope="module")
def fsync_off() -> Iterator[pg.PostgresServer]:
    """One cluster with ``fsync=off`` for the tests below; each takes a database of its own."""
    require_binaries()
    with pg.throwaway_cluster("fsync=off") as cluster:
        yield pg.PostgresServer(cluster.url, "plantstore_fsync_off")


@pytest.fixture(scope="module")
def synchronous_commit_off() -> Iterator[pg.ThrowawayCluster]:
    """A cluster whose default would let commits return before their WAL is on disk."""
    require_binaries()
    with pg.throwaway_cluster("synchronous_commit=off") as cluster:
        yield cluster


def run_plantstore(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``python -m plantstore ARGS``; kill its whole group if it has not exited in 30 s."""
    command = [sys.executable, "-m", "plantstore", *args]
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # a serve that wrongly starts has workers to kill too
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            pytest.fail(f"{' '.join(args)} did not exit; it should refuse to start:\n{stdout}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.mark.parametrize("command", ["serve", "token create"])
def test_fsync_off_is_refused_with_one_line(fsync_off: pg.PostgresServer, command: str) -> None:
    """With fsync off a crash can lose commits PostgreSQL acknowledged, so the service must
    not start (nor issue a token), and must say why in one line naming the way out."""
    db_url = fsync_off.create_database()
    args = (
        ["serve", "--port", str(free_port())] if command == "serve" else ["token", "create", "al"]
    )
    result = run_plantstore("--database", db_url, *args, env=dict(os.environ))
    print(f"exit {result.returncode}, stderr: {result.stderr!r}")
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "fsync" in lines[0], lines[0]
    assert "PLANTSTORE_ALLOW_UNSAFE_DURABILITY" in lines[0], lines[0]
    assert "pst_" not in result.stdout
    assert pg.run_sql(db_url, "SELECT count(*) FROM tokens") == [[(0,)]]


def test_fsync_off_is_served_when_explicitly_allowed(
    fsync_off: pg.PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PLANTSTORE_ALLOW_UNSAFE_DURABILITY=true is the documented way to accept the risk
    (a scratch database, say): then it serves, and says in its log what it accepted."""
    db_url = fsync_off.create_database()
    server = start_server(db_url, tmp_path / "server.log", **UNSAFE)
    try:
        with server.client() as http:
            response = http.post(
                "/plants", json={"id": 1, "name": "Fern"}, headers=bearer(server.token)
            )
        assert response.status_code == 200, response.text
        assert response.json() == {"name": "Fern"}
    finally:
        stop_server(server)
    assert "fsync=off" in server.log_path.read_text()
    monkeypatch.setenv("PLANTSTORE_ALLOW_UNSAFE_DURABILITY", "true")
    assert token_from_output(run_cli(db_url, "token", "create", "al"))


def wal_syncs(admin_url: str) -> int:
    """How often the cluster has synced its WAL to disk (issue_xlog_fsync) since stats reset."""
    [[(version,)]] = pg.run_sql(admin_url, "SHOW server_version_num")
    if int(str(version)) < 140000:
        pytest.skip("counting WAL syncs needs pg_stat_wal, PostgreSQL 14 or newer")
    query = (
        "SELECT wal_sync FROM pg_stat_wal"
        if int(str(version)) < 180000
        else "SELECT sum(fsyncs) FROM pg_stat_io WHERE object = 'wal'"
    )
    [[(count,)]] = pg.run_sql(admin_url, query)
    return int(str(count))


def wait_for_no_service_sessions(admin_url: str) -> None:
    """A backend flushes its statistics before it leaves pg_stat_activity, so once the
    service's sessions are gone its WAL syncs are all counted."""
    query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'plantstore'"
    deadline = time.monotonic() + 10
    while (sessions := pg.run_sql(admin_url, query)) != [[(0,)]]:
        assert time.monotonic() < deadline, f"plantstore sessions still open: {sessions}"
        time.sleep(0.05)


def wal_syncs_during_creates(
    admin_url: str, db_url: str, token: str, first_id: int, log_path: Path, **env: str
) -> tuple[int, str]:
    """Serve CREATES sequential creates; return the WAL syncs they caused, and the log."""
    wait_for_no_service_sessions(admin_url)
    before = wal_syncs(admin_url)
    server = start_server(db_url, log_path, **env)
    try:
        with server.client() as http:
            for plant_id in range(first_id, first_id + CREATES):
                plant = {"id": plant_id, "name": f"plant-{plant_id}"}
                response = http.post("/plants", json=plant, headers=bearer(token))
                assert response.status_code == 200, response.text
    finally:
        stop_server(server)
    wait_for_no_service_sessions(admin_url)
    deadline = time.monotonic() + 2  # the WAL writer reports its own syncs a moment later
    while (syncs := wal_syncs(admin_url) - before) < CREATES and time.monotonic() < deadline:
        time.sleep(0.1)
    return syncs, log_path.read_text()


def test_service_forces_synchronous_commit_on_over_the_database_default(
    synchronous_commit_off: pg.ThrowawayCluster, tmp_path: Path
) -> None:
    """On a cluster whose default is ``synchronous_commit=off`` the service starts (it sets
    ``synchronous_commit=on`` on its own sessions) and its writes are durable.

    ``pg_settings`` cannot show this: the setting is per session, and only the service's
    sessions have it on. What can be seen from outside is its effect: with it on, every
    commit waits for a WAL fsync, so the cluster's WAL sync counter (pg_stat_wal.wal_sync)
    grows by at least one per acknowledged create; with it off, commits return before the
    flush and the WAL writer syncs a few times a second at most. The same creates with
    PLANTSTORE_ALLOW_UNSAFE_DURABILITY=true (where the service leaves the database's default
    alone, and logs that it saw ``synchronous_commit=off``) are the control that shows the
    counter tells the two apart."""
    admin_url = synchronous_commit_off.url
    assert pg.run_sql(admin_url, "SHOW synchronous_commit") == [[("off",)]]
    pg.run_sql(admin_url, "CREATE DATABASE plantstore_sync")
    db_url = pg.with_database(admin_url, "plantstore_sync")
    # Migrates and issues a token without the override: the CLI starts here too.
    token = token_from_output(run_cli(db_url, "token", "create", "gardener"))

    forced, forced_log = wal_syncs_during_creates(
        admin_url, db_url, token, 1, tmp_path / "forced.log"
    )
    unsafe, unsafe_log = wal_syncs_during_creates(
        admin_url, db_url, token, 1_001, tmp_path / "unsafe.log", **UNSAFE
    )

    print(f"WAL syncs for {CREATES} creates: {forced} forced on, {unsafe} left off")
    assert forced >= CREATES, f"{forced} WAL syncs for {CREATES} creates: not synchronous"
    assert unsafe < CREATES // 2, f"control: {unsafe} WAL syncs with synchronous_commit=off"
    assert "synchronous_commit=off" not in forced_log
    assert "synchronous_commit=off" in unsafe_log
    assert pg.run_sql(db_url, "SELECT count(*) FROM plants") == [[(2 * CREATES,)]]
