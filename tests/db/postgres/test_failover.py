"""The primary is lost, its synchronous standby promoted: no create answered 200 is lost, no
request answers 500 or hangs, and the service writes again on the promoted host by itself,
following the URL's host list (``target_session_attrs=read-write``), webhooks included.

The clusters are our own (initdb, ``pg_basebackup -R``, ``synchronous_standby_names``), so
the test runs wherever the PostgreSQL binaries are, with or without a server running.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests import pg
from tests.fixtures.calls import bearer, run_cli, token_from_output
from tests.fixtures.servers import start_server, stop_server
from tests.webhooks.webhook_receiver import receiver

pytestmark = pytest.mark.server

WRITERS = 6
GAP_LIMIT = 15.0  # seconds from the promotion to the next create answered 200
AFTER_ID = 10**12  # beyond every writer's ids
DEADLINE = 2.0 + 1.0  # connect + statement timeout as shipped, and a second to spare


@dataclass(frozen=True)
class Answer:
    plant_id: int
    status: int
    retry_after: str | None
    started: float
    seconds: float


def write_until(
    base_url: str, token: str, first_id: int, stop: threading.Event, answers: list[Answer]
) -> None:
    """Create plants until ``stop``, noting each answer in ``answers`` as it comes."""
    with httpx.Client(base_url=base_url, timeout=30) as http:
        plant_id = first_id
        while not stop.is_set():
            started = time.monotonic()
            response = http.post(
                "/plants", json={"id": plant_id, "name": "fern"}, headers=bearer(token)
            )
            answers.append(
                Answer(
                    plant_id,
                    response.status_code,
                    response.headers.get("retry-after"),
                    started,
                    time.monotonic() - started,
                )
            )
            plant_id += 1


@pytest.mark.skipif(pg.postgres_binaries() is None, reason="no PostgreSQL binaries here")
def judge_answers(answers: list[Answer], held: list[tuple[object, ...]], killed: float) -> set[int]:
    """What every failover test asks of the clients' answers: only 200 and 503 (a 503 with
    Retry-After), each within the deadline, enough acknowledged before the primary was lost,
    and every acknowledged create among the rows the new primary ``held``. Returns the ids
    acknowledged."""
    statuses = {a.status for a in answers}
    assert statuses <= {200, 503}, statuses
    assert all(a.retry_after for a in answers if a.status == 503)
    assert max(a.seconds for a in answers) < DEADLINE, max(a.seconds for a in answers)
    acknowledged = {a.plant_id for a in answers if a.status == 200}
    before = [a for a in answers if a.status == 200 and a.started < killed]
    assert len(before) > 100, "too few writes before the primary was lost to prove anything"
    missing = acknowledged - {row[0] for row in held}
    assert not missing, f"{len(missing)} acknowledged creates lost, e.g. {sorted(missing)[:5]}"
    return acknowledged


def test_a_promoted_standby_has_every_acknowledged_write(tmp_path: Path) -> None:
    with pg.primary_and_synchronous_standby() as (primary, standby), receiver() as hooks:
        url = f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/postgres"
        token = token_from_output(run_cli(url, "token", "create", "alice"))
        hooked_token = token_from_output(run_cli(url, "token", "create", "bob"))  # webhooks
        server = start_server(
            url,
            tmp_path / "serve.log",
            "--workers",
            "2",
            PLANTSTORE_WEBHOOK_ALLOW_PRIVATE="true",
            unset=["PLANTSTORE_WORKERS"],
        )
        stop = threading.Event()
        results: list[list[Answer]] = [[] for _ in range(WRITERS)]

        def writer(n: int) -> None:
            write_until(server.base_url, token, n * 10**9 + 1, stop, results[n])

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
        try:
            with httpx.Client(base_url=server.base_url) as http:
                hooked = http.post(
                    "/webhooks", json={"url": hooks.url}, headers=bearer(hooked_token)
                )
                assert hooked.status_code == 200, hooked.text
            for thread in threads:
                thread.start()
            warm_up = time.monotonic() + 30  # enough acknowledged writes to lose, however slow
            while sum(a.status == 200 for r in results for a in r) < 150:
                assert time.monotonic() < warm_up, "too few writes acknowledged before the switch"
                time.sleep(0.1)
            primary.stop("immediate")
            killed = time.monotonic()
            time.sleep(1)
            standby.promote()
            promoted = time.monotonic()
            while time.monotonic() - promoted < GAP_LIMIT + 5:
                later = [a for r in results for a in r if a.started > promoted and a.status == 200]
                if len(later) >= 50:
                    break
                time.sleep(0.2)
            stop.set()
            for thread in threads:
                thread.join()
            with httpx.Client(base_url=server.base_url) as http:
                after = {"id": AFTER_ID, "name": "after the switch"}
                created = http.post("/plants", json=after, headers=bearer(hooked_token))
                assert created.status_code == 200
            deadline = time.monotonic() + 30
            while not any(b"after the switch" in event.body for event in hooks.snapshot()):
                assert time.monotonic() < deadline, "no event for a plant created after the switch"
                time.sleep(0.1)
            log = server.log_path.read_text()
        finally:
            stop.set()
            stop_server(server)
        [held] = pg.run_sql(standby.url, "SELECT id FROM plants")  # the promoted host
    answers = [a for r in results for a in r]
    acknowledged = judge_answers(answers, held, killed)
    first_after = min(
        a.started + a.seconds for a in answers if a.status == 200 and a.started > promoted
    )
    gap = first_after - promoted
    print(
        f"\nfailover: creates answered 200 again {gap:.2f} s after the promotion "
        f"({first_after - killed:.2f} s after the primary was lost); {len(acknowledged)} "
        f"acknowledged, {len(held)} on the promoted standby, "
        f"{sum(a.status == 503 for a in answers)} answered 503"
    )
    assert gap <= GAP_LIMIT
    assert "Traceback" not in log
