"""Patroni fails over under load: the leader's Patroni and postmaster are killed while
clients create plants, and the service, given every node in one URL
(``target_session_attrs=read-write``), answers only 200 or 503, loses no create it answered
200, and writes again on the promoted node within a second of its promotion.

Real etcd and Patroni (strict synchronous mode: the standby Patroni may promote has every
commit), so a failure here is the service's, or Patroni's as operators run it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest

from plantstore.db.postgres.connections import connect_to_writer
from tests import pg
from tests.db.postgres.patroni import TTL, Node, PatroniCluster, missing_tools, patroni_cluster
from tests.db.postgres.test_failover import Answer, judge_answers, write_until
from tests.fixtures.calls import run_cli, token_from_output
from tests.fixtures.servers import start_server, stop_server

pytestmark = [pytest.mark.cluster, pytest.mark.root]

WRITERS = 4
CONNECT_TIMEOUT = 1.0  # the service's, as shipped
WRITE_AGAIN_S = 1.0  # from Patroni's promotion to the service's next create answered 200


class Watch:
    """When a surviving node's Patroni first calls itself the primary (``/primary`` answers
    200), and when its synchronous standby is back (a commit can be acknowledged)."""

    def __init__(self, cluster: PatroniCluster, survivors: list[Node]) -> None:
        self.promoted: float | None = None
        self.synchronous: float | None = None
        self.leader: Node | None = None
        self._cluster = cluster
        self._survivors = survivors
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.is_set() and self.promoted is None:
            for node in self._survivors:
                if node.role() == 200:
                    self.promoted, self.leader = time.monotonic(), node
                    break
            else:
                time.sleep(0.01)
        while not self._stop.is_set() and self.leader is not None and self.synchronous is None:
            try:
                [rows] = pg.run_sql(
                    self._cluster.node_url(self.leader),
                    "SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'",
                )
            except Exception:  # restarting, or not yet up: ask again
                rows = []
            if rows:
                self.synchronous = time.monotonic()
            else:
                time.sleep(0.01)


@pytest.mark.skipif(
    bool(missing_tools()),
    reason=f"missing here: {', '.join(missing_tools())} (Debian: patroni etcd-server)",
)
def test_patroni_failover_loses_no_acknowledged_create(tmp_path: Path) -> None:
    with patroni_cluster() as cluster:
        old_leader = cluster.leader()
        assert old_leader is not None
        token = token_from_output(run_cli(cluster.url, "token", "create", "alice"))
        server = start_server(
            cluster.url, tmp_path / "serve.log", "--workers", "2", unset=["PLANTSTORE_WORKERS"]
        )
        stop = threading.Event()
        results: list[list[Answer]] = [[] for _ in range(WRITERS)]
        threads = [
            threading.Thread(
                target=write_until, args=(server.base_url, token, n * 10**9 + 1, stop, results[n])
            )
            for n in range(WRITERS)
        ]
        survivors = [node for node in cluster.nodes if node is not old_leader]
        try:
            for thread in threads:
                thread.start()
            warm_up = time.monotonic() + 30
            while sum(a.status == 200 for r in results for a in r) < 150:
                assert time.monotonic() < warm_up, "too few writes acknowledged before the kill"
                time.sleep(0.1)
            with Watch(cluster, survivors) as watch:
                old_leader.kill()
                killed = time.monotonic()
                give_up = killed + TTL + 40
                while time.monotonic() < give_up:
                    if watch.promoted is not None:
                        later = [
                            a
                            for r in results
                            for a in r
                            if a.status == 200 and a.started > watch.promoted
                        ]
                        if len(later) >= 50:
                            break
                    time.sleep(0.2)
            stop.set()
            for thread in threads:
                thread.join()
            log = server.log_path.read_text()
        finally:
            stop.set()
            stop_server(server)
        promoted = watch.promoted
        assert promoted is not None, f"no promotion {TTL + 40} s after the kill: {cluster.logs()}"
        assert watch.leader is not None
        assert cluster.leader() is watch.leader, "the leader changed again during the test"
        [held] = pg.run_sql(cluster.node_url(watch.leader), "SELECT id FROM plants")
    answers = [a for r in results for a in r]
    acknowledged = judge_answers(answers, held, killed)
    first_after = min(
        a.started + a.seconds
        for a in answers
        if a.status == 200 and a.started + a.seconds > promoted
    )
    gap = first_after - promoted
    synchronous = "never" if watch.synchronous is None else f"{watch.synchronous - promoted:.2f} s"
    print(
        f"\npatroni failover: promoted {promoted - killed:.2f} s after the kill; a synchronous "
        f"standby again {synchronous} after the promotion; creates answered 200 again "
        f"{gap:.2f} s after it; {len(acknowledged)} acknowledged, {len(held)} on the new "
        f"leader, {sum(a.status == 503 for a in answers)} answered 503"
    )
    assert gap <= WRITE_AGAIN_S, f"writes again {gap:.2f} s after the promotion"
    assert "Traceback" not in log


@pytest.mark.skipif(
    bool(missing_tools()),
    reason=f"missing here: {', '.join(missing_tools())} (Debian: patroni etcd-server)",
)
def test_a_frozen_leader_listed_first_does_not_hide_the_promoted_one() -> None:
    """A leader that takes TCP connections and answers nothing (a partition, a frozen
    machine) spends asyncpg's whole connect timeout when it is listed first; tried at once,
    the hosts give the promoted node within the same timeout."""
    with patroni_cluster() as cluster:
        old_leader = cluster.leader()
        assert old_leader is not None
        url = cluster.url_listing_first(old_leader)
        old_leader.freeze()
        frozen = time.monotonic()
        survivors = [node for node in cluster.nodes if node is not old_leader]
        while (new_leader := cluster.leader(survivors)) is None:
            assert time.monotonic() < frozen + TTL + 40, f"no promotion: {cluster.logs()}"
            time.sleep(0.05)
        promoted = time.monotonic()
        while pg.run_sql(cluster.node_url(new_leader), "SELECT pg_is_in_recovery()") != [
            [(False,)]
        ]:  # Patroni says primary a moment before PostgreSQL has left recovery
            assert time.monotonic() < promoted + 30, "the new leader never left recovery"
            time.sleep(0.01)
        in_turn, in_turn_s = asyncio.run(connect_port(asyncpg.connect, url))
        at_once, at_once_s = asyncio.run(connect_port(connect_to_writer, url))
    print(
        f"\nfrozen leader listed first, {promoted - frozen:.2f} s to the promotion: "
        f"asyncpg in turn {in_turn!r} in {in_turn_s:.2f} s, at once {at_once!r} in "
        f"{at_once_s:.2f} s"
    )
    assert isinstance(in_turn, TimeoutError), "asyncpg no longer waits out a silent host"
    assert at_once == new_leader.port
    assert at_once_s < CONNECT_TIMEOUT


async def connect_port(
    connect: Callable[..., Awaitable[asyncpg.Connection]], url: str
) -> tuple[int | BaseException, float]:
    """The port of the server ``connect`` reached within the shipped connect timeout, or
    what it raised; and how long it took."""
    started = time.monotonic()
    try:
        connection = await connect(url, timeout=CONNECT_TIMEOUT)
    except (
        OSError,
        asyncpg.PostgresError,
        asyncpg.InterfaceError,
        asyncpg.TargetServerAttributeNotMatched,
    ) as exc:
        return exc, time.monotonic() - started
    try:
        return int(await connection.fetchval("SELECT inet_server_port()")), (
            time.monotonic() - started
        )
    finally:
        await connection.close()
