"""What an operator sees: request ids, /metrics (and who may read it), one access line per
request, and the startup line. In process where the app alone decides, and against real
``plantstore serve`` processes where the server, the workers or stdout are part of the promise.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from plantstore import __version__
from plantstore.ops.metrics import FLUSH_SECONDS
from tests.fixtures.backends import new_database_url
from tests.fixtures.calls import IssueToken, assert_error, bearer, run_cli, token_from_output
from tests.fixtures.servers import (
    LiveServer,
    child_pids,
    free_port,
    start_server,
    stop_server,
    wait_for_started_workers,
)

Headers = dict[str, str]
GENERATED_ID = re.compile(r"[0-9a-f]{24}")


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a Prometheus text page, keyed by name and labels."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name, frozenset(sample.labels.items())] = sample.value
    return found


def sample(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, frozenset(labels.items())), 0.0)


# --- request ids -----------------------------------------------------------------------------


@pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")
def test_a_safe_request_id_is_returned_as_given(client: TestClient, alice: Headers) -> None:
    given = "edge-7f3a.b9:42/x+y="
    response = client.get("/plants", headers={**alice, "X-Request-ID": given})
    assert response.status_code == 200
    assert response.headers["x-request-id"] == given


@pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")
@pytest.mark.parametrize("given", ["", "has space", "x" * 129, "semi;colon", 'quote"d', "ünïcode"])
def test_an_unsafe_or_missing_request_id_is_replaced(
    client: TestClient, alice: Headers, given: str
) -> None:
    headers = [(name.encode(), value.encode()) for name, value in alice.items()]
    response = client.get("/plants", headers=[*headers, (b"X-Request-ID", given.encode())])
    assert GENERATED_ID.fullmatch(response.headers["x-request-id"])


@pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")
def test_every_answer_has_its_own_request_id(client: TestClient, alice: Headers) -> None:
    answers = [
        client.get("/plants", headers=alice),
        client.get("/plants"),  # 401
        client.get("/nowhere"),  # 404
        client.put("/plants", headers=alice),  # 405
        client.get("/healthz"),
        client.get("/docs"),
    ]
    ids = [answer.headers["x-request-id"] for answer in answers]
    assert all(GENERATED_ID.fullmatch(request_id) for request_id in ids)
    assert len(set(ids)) == len(ids)


# --- /metrics, on its own listener ------------------------------------------------------------


@dataclass
class Instrumented:
    """A real server with its metrics listener on a free port of its own."""

    server: LiveServer
    metrics_url: str

    def scrape(self) -> str:
        answer = settled_scrape(self.metrics_url)
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/plain; version=")
        return answer.text


def settled_scrape(metrics_url: str) -> httpx.Response:
    """What the listener serves once the workers have written out what they hold: they write
    every ``FLUSH_SECONDS``, so the counts are settled once two scrapes a few of those apart
    agree (a stalled host may hold a worker's write back past one)."""
    time.sleep(5 * FLUSH_SECONDS)
    answer = httpx.get(metrics_url, timeout=10)
    for _ in range(20):
        time.sleep(5 * FLUSH_SECONDS)
        again = httpx.get(metrics_url, timeout=10)
        if _counts(again.text) == _counts(answer.text):
            return again
        answer = again
    return answer


_COUNTED = ("plantstore_http_requests_total", "plantstore_store_operation_duration_seconds_count")


def _counts(exposition: str) -> list[str]:
    """The request and store-operation counts the tests read."""
    return [line for line in exposition.splitlines() if line.startswith(_COUNTED)]


@contextmanager
def instrumented(db_url: str, log_path: Path, *args: str, **env: str) -> Iterator[Instrumented]:
    port = free_port()
    metrics = f"127.0.0.1:{port}"
    server = start_server(db_url, log_path, *args, **env, PLANTSTORE_METRICS_ADDRESS=metrics)
    try:
        yield Instrumented(server, f"http://127.0.0.1:{port}/metrics")
    finally:
        stop_server(server)


@pytest.mark.server
def test_requests_are_counted_by_route_template_and_status(
    db_url: str, tmp_path: Path, issue_token: IssueToken
) -> None:
    headers = bearer(issue_token("carol"))
    with instrumented(db_url, tmp_path / "server.log") as live, live.server.client() as http:
        before = live.scrape()
        assert http.post("/plants", json={"id": 1, "name": "a"}, headers=headers).status_code == 200
        for plant_id in (1, 2, 3):
            http.delete(f"/plants/{plant_id}", headers=headers)
        http.get("/no/such/path/42")
        http.get("/plants")
        http.request("BREW", "/plants")  # a made-up method: counted, as "other"
        after = live.scrape()
    name = "plantstore_http_requests_total"

    def delta(**labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert delta(method="POST", route="/plants", status="200") == 1
    assert delta(method="DELETE", route="/plants/{id}", status="204") == 1
    assert delta(method="DELETE", route="/plants/{id}", status="404") == 2
    assert delta(method="GET", route="unmatched", status="404") == 1
    assert delta(method="GET", route="/plants", status="401") == 1
    assert delta(method="other", route="/plants", status="405") == 1
    assert "/plants/1" not in after  # templates, never raw paths
    assert "/no/such/path" not in after
    assert "BREW" not in after


@pytest.mark.server
def test_latency_store_and_commit_metrics_move(
    db_url: str, backend: str, tmp_path: Path, issue_token: IssueToken
) -> None:
    headers = bearer(issue_token("dave"))
    with instrumented(db_url, tmp_path / "server.log") as live, live.server.client() as http:
        before = live.scrape()
        for plant_id in range(5):
            http.post("/plants", json={"id": plant_id, "name": "n"}, headers=headers)
        http.get("/plants", headers=headers)
        after = live.scrape()

    def delta(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    timer = "plantstore_http_request_duration_seconds_count"
    assert delta(timer, method="POST", route="/plants") == 5
    store = "plantstore_store_operation_duration_seconds_count"
    assert delta(store, operation="create_plant") == 5
    assert delta(store, operation="list_plants") == 1
    assert delta("plantstore_http_request_duration_seconds_sum", method="GET", route="/plants") > 0
    assert sample(after, "plantstore_http_requests_in_flight") == 0  # nothing left running
    if backend == "sqlite":
        commits = delta("plantstore_group_commit_batch_size_count")
        writes = delta("plantstore_group_commit_batch_size_sum")
        assert 1 <= commits <= writes
        assert writes >= 5  # every create went through a commit (the token touch may too)


@pytest.mark.server
def test_a_client_that_leaves_mid_body_is_a_499_not_a_500(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'left.db'}"
    with instrumented(db_url, tmp_path / "server.log") as live:
        before = live.scrape()
        host, port = live.server.base_url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                b"POST /plants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Authorization: Bearer {live.server.token}\r\n".encode()
                + b'Content-Length: 100\r\n\r\n{"id": 1'
            )
            time.sleep(0.3)
        deadline = time.monotonic() + 10
        while True:
            after = live.scrape()
            left = sample(
                after,
                "plantstore_http_requests_total",
                method="POST",
                route="/plants",
                status="499",
            )
            if left or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    assert (
        left
        - sample(
            before, "plantstore_http_requests_total", method="POST", route="/plants", status="499"
        )
        == 1
    )
    assert not sample(
        after, "plantstore_http_requests_total", method="POST", route="/plants", status="500"
    )


@pytest.mark.server
def test_metrics_stay_off_the_api_address(tmp_path: Path) -> None:
    """The API's address serves the contract's routes only: /metrics there is a 404."""
    with instrumented(f"sqlite:///{tmp_path / 'm.db'}", tmp_path / "server.log") as live:
        assert_error(httpx.get(f"{live.server.base_url}/metrics", timeout=10), 404)
        assert "plantstore_http_requests_total" in live.scrape()


def process_tree(pid: int) -> set[int]:
    """``pid`` and every process below it (granian's workers, and theirs)."""
    tree, frontier = {pid}, [pid]
    while frontier:
        for child in child_pids(frontier.pop()) - tree:
            tree.add(child)
            frontier.append(child)
    return tree


def proc_address(hex_address: str) -> tuple[str, int]:
    """A /proc/net/tcp{,6} ``host:port`` (host in 32-bit words of host byte order)."""
    host_hex, port_hex = hex_address.split(":")
    raw = bytes.fromhex(host_hex)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, words), int(port_hex, 16)


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """Every TCP address a socket of the process tree under ``pid`` listens on, from /proc:
    the tree's socket inodes (its descriptors), matched against the LISTEN rows of its
    network namespace's tcp and tcp6 tables. Whatever port a listener picked, it is here."""
    inodes: set[int] = set()
    for member in process_tree(pid):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for descriptor in Path(f"/proc/{member}/fd").iterdir():
                with contextlib.suppress(FileNotFoundError):  # closed meanwhile
                    target = os.readlink(descriptor)
                    if target.startswith("socket:["):
                        inodes.add(int(target[len("socket:[") : -1]))
    listening: set[tuple[str, int]] = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[9]) in inodes:  # 0A: TCP_LISTEN
                listening.add(proc_address(fields[1]))
    return listening


def api_address(server: LiveServer) -> tuple[str, int]:
    host, port = server.base_url.removeprefix("http://").split(":")
    return host, int(port)


@pytest.mark.server
def test_the_metrics_listener_is_the_address_given_and_nothing_else(tmp_path: Path) -> None:
    """The converse of the next test, and what makes it able to fail: the listener that the
    setting asks for is seen among the tree's listening sockets."""
    with instrumented(f"sqlite:///{tmp_path / 'on.db'}", tmp_path / "server.log") as live:
        metrics_port = int(live.metrics_url.split(":")[2].split("/")[0])
        listening = listening_addresses(live.server.process.pid)
        assert listening == {api_address(live.server), ("127.0.0.1", metrics_port)}
        assert "plantstore_http_requests_total" in live.scrape()


@pytest.mark.server
def test_metrics_off_opens_no_listener(tmp_path: Path) -> None:
    """With ``off``, the API's address is the only one the server and its workers listen
    on: not the default metrics port, not any other."""
    server = start_server(
        f"sqlite:///{tmp_path / 'off.db'}",
        tmp_path / "server.log",
        PLANTSTORE_METRICS_ADDRESS="off",
    )
    try:
        assert listening_addresses(server.process.pid) == {api_address(server)}
    finally:
        stop_server(server)


DEFAULT_METRICS_ADDRESS = "127.0.0.1:9464"  # the README's default, not the code's constant
DEFAULT_METRICS_LOCK = Path(tempfile.gettempdir()) / "plantstore-tests-default-metrics.lock"


@contextmanager
def default_metrics_port_to_ourselves(wait: float = 30.0) -> Iterator[None]:
    """Hold the machine-wide turn for the shipped default metrics port, and see it free.

    Test runs side by side (a checkout each) take turns on a lock file; a port still taken
    after ``wait`` seconds is held by something else (``make run``, a bench server), and the
    test fails saying so: it cannot check the default while another program holds it.
    """
    with DEFAULT_METRICS_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            host, port = DEFAULT_METRICS_ADDRESS.split(":")
            deadline = time.monotonic() + wait
            while (taken := bind_error(host, int(port))) and time.monotonic() < deadline:
                time.sleep(0.5)
            if taken:
                pytest.fail(
                    f"{DEFAULT_METRICS_ADDRESS}, the shipped default metrics address, is held by "
                    f"another program ({taken}) for over {wait:.0f} s; stop it to run this test "
                    f"({holder_of(int(port))})"
                )
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def bind_error(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on now, or None when it can."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server's listener
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def holder_of(port: int) -> str:
    """Who listens on ``port``, as ``ss`` tells it (best effort: for the failure message)."""
    try:
        done = subprocess.run(
            ["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return "ss is not available to name it"
    return done.stdout.strip() or "ss names no listener now"


@pytest.mark.server
def test_metrics_are_served_on_the_shipped_default_address(tmp_path: Path) -> None:
    """No PLANTSTORE_METRICS_ADDRESS at all: /metrics on 127.0.0.1:9464, loopback only."""
    with default_metrics_port_to_ourselves():
        server = start_server(
            f"sqlite:///{tmp_path / 'default.db'}",
            tmp_path / "server.log",
            unset=["PLANTSTORE_METRICS_ADDRESS"],
        )
        try:
            host, port = DEFAULT_METRICS_ADDRESS.split(":")
            assert listening_addresses(server.process.pid) == {
                api_address(server),
                (host, int(port)),
            }
            httpx.get(f"{server.base_url}/plants", headers=bearer(server.token), timeout=10)
            answer = settled_scrape(f"http://{DEFAULT_METRICS_ADDRESS}/metrics")
        finally:
            stop_server(server)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=")
    counted = sample(
        answer.text, "plantstore_http_requests_total", method="GET", route="/plants", status="200"
    )
    assert counted == 1, answer.text[:2000]


@pytest.mark.server
def test_a_second_server_on_the_machine_serves_without_the_taken_default_metrics_address(
    tmp_path: Path,
) -> None:
    """The first plantstore holds 127.0.0.1:9464: a second, with no address of its own, says
    so in its log and serves anyway."""
    with default_metrics_port_to_ourselves():
        host, port = DEFAULT_METRICS_ADDRESS.split(":")
        with socket.socket() as first:
            first.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            first.bind((host, int(port)))
            first.listen()
            server = start_server(
                f"sqlite:///{tmp_path / 'second.db'}",
                tmp_path / "server.log",
                unset=["PLANTSTORE_METRICS_ADDRESS"],
            )
            try:
                listed = httpx.get(
                    f"{server.base_url}/plants", headers=bearer(server.token), timeout=10
                )
                log = server.log_path.read_text()
            finally:
                stop_server(server)
    assert listed.status_code == 200
    assert f"the default metrics address {DEFAULT_METRICS_ADDRESS} is taken" in log
    assert "PLANTSTORE_METRICS_ADDRESS" in log
    assert "Traceback" not in log


@pytest.mark.server
def test_a_taken_metrics_address_stops_serve_with_one_line(tmp_path: Path) -> None:
    """An address the operator chose is not quietly dropped."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(RuntimeError, match="cannot serve metrics on") as failure:
            start_server(
                f"sqlite:///{tmp_path / 't.db'}",
                tmp_path / "server.log",
                PLANTSTORE_METRICS_ADDRESS=address,
            )
    assert "Traceback" not in str(failure.value)


# --- several workers: one total --------------------------------------------------------------


@pytest.mark.own_database
@pytest.mark.parametrize("store", ["sqlite", "postgres"])
@pytest.mark.server
def test_totals_add_up_across_worker_processes(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = new_database_url(store, tmp_path, request)
    requests = 120
    answered_by: Counter[str] = Counter()
    with instrumented(url, tmp_path / "server.log", "--workers", "2") as live:
        wait_for_started_workers(live.server, 2)
        for _ in range(requests):  # a new connection each: the kernel spreads them over workers
            answer = httpx.get(f"{live.server.base_url}/plants", headers=bearer(live.server.token))
            assert answer.status_code == 200
            answered_by[answering_process(answer)] += 1
        scrapes = [live.scrape() for _ in range(3)]
        workers = child_pids(live.server.process.pid)
    counted = [
        sample(text, "plantstore_http_requests_total", method="GET", route="/plants", status="200")
        for text in scrapes
    ]
    assert len(workers) == 2, workers
    assert len(answered_by) == 2, f"one worker answered all: {answered_by}"
    assert counted == [requests] * len(scrapes), counted  # the two workers' counts, added up


def answering_process(response: httpx.Response) -> str:
    """Which process answered: a generated X-Request-ID is the process's random 12-digit
    prefix and a count (plantstore/ops/observe.py), so two workers give two prefixes."""
    request_id = response.headers["x-request-id"]
    assert GENERATED_ID.fullmatch(request_id), request_id
    return request_id[:12]


# --- logs ------------------------------------------------------------------------------------


def log_records(server: LiveServer) -> list[dict[str, Any]]:
    lines = server.log_path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


@pytest.mark.server
def test_one_json_access_line_per_request_without_the_token(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'log.db'}"
    server = start_server(db_url, tmp_path / "server.log")
    token = token_from_output(run_cli(db_url, "token", "create", "erin"))
    try:
        with server.client() as http:
            http.post(
                "/plants",
                json={"id": 9, "name": "fern"},
                headers={**bearer(token), "X-Request-ID": "trace-9"},
            )
            http.delete("/plants/9", headers=bearer(token))
            http.get("/plants", headers=bearer("pst_not_a_real_token"))
            http.get("/plants/9")
    finally:
        stop_server(server)
    text = server.log_path.read_text()
    assert token not in text
    assert "pst_not_a_real_token" not in text
    access = [  # start_server's own /healthz polls aside
        record
        for record in log_records(server)
        if record.get("logger") == "plantstore.access" and record["route"] != "/healthz"
    ]
    assert [(r["method"], r["route"], r["status"]) for r in access] == [
        ("POST", "/plants", 200),
        ("DELETE", "/plants/{id}", 204),
        ("GET", "/plants", 401),
        ("GET", "/plants/{id}", 405),
    ]
    assert access[0]["request_id"] == "trace-9"
    assert all(GENERATED_ID.fullmatch(r["request_id"]) for r in access[1:])
    erin = access[0]["user_id"]
    assert isinstance(erin, int)
    assert [r["user_id"] for r in access] == [erin, erin, None, None]
    for record in access:
        assert record["event"] == "request"
        assert record["level"] == "info"
        assert isinstance(record["duration_ms"], float)
        assert record["duration_ms"] >= 0
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", record["timestamp"])


@pytest.mark.server
def test_a_known_callers_list_lines_name_their_user_refused_ones_too(tmp_path: Path) -> None:
    """A caller whose token the cache holds is served its list straight from granian's call,
    without a request object (``Observe.native``). Its lines still name its user: for the
    400 and the 429 that come after its token is known, as for each 200."""
    db_url = f"sqlite:///{tmp_path / 'known.db'}"
    server = start_server(
        db_url, tmp_path / "server.log", "--workers", "1", PLANTSTORE_RATE_LIMIT="4/minute"
    )
    token = token_from_output(run_cli(db_url, "token", "create", "erin"))
    paths = ["/plants", "/plants", "/plants?limit=x", "/plants", "/plants"]
    try:
        with server.client() as http:
            statuses = [http.get(path, headers=bearer(token)).status_code for path in paths]
    finally:
        stop_server(server)
    assert statuses == [200, 200, 400, 200, 429]
    access = [
        record
        for record in log_records(server)
        if record.get("logger") == "plantstore.access" and record["route"] == "/plants"
    ]
    assert [r["status"] for r in access] == statuses
    users = {r["user_id"] for r in access}
    assert len(users) == 1, access
    assert isinstance(users.pop(), int)


@pytest.mark.server
def test_access_log_can_be_turned_off(tmp_path: Path) -> None:
    server = start_server(
        f"sqlite:///{tmp_path / 'quiet.db'}", tmp_path / "server.log", PLANTSTORE_ACCESS_LOG="false"
    )
    try:
        httpx.get(f"{server.base_url}/plants", headers=bearer(server.token))
    finally:
        stop_server(server)
    records = log_records(server)
    assert records, "the startup line is still logged"
    assert not [record for record in records if record.get("logger") == "plantstore.access"]


@pytest.mark.server
def test_startup_line_gives_version_address_and_database(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'start.db'}"
    server = start_server(db_url, tmp_path / "server.log")
    stop_server(server)
    startup = next(r for r in log_records(server) if r.get("logger") == "plantstore")
    assert startup["version"] == __version__
    assert startup["address"] == server.base_url
    assert startup["database"] == db_url
    assert server.base_url in startup["event"]


@pytest.mark.server
def test_startup_line_hides_the_database_password(tmp_path: Path, postgres: Any) -> None:
    url = postgres.create_database()
    with_password = url.replace("postgres@", "postgres:hunter2@", 1)
    assert "hunter2" in with_password
    server = start_server(with_password, tmp_path / "server.log")
    stop_server(server)
    assert "hunter2" not in server.log_path.read_text()
