"""Webhooks on SQLite: what the outbox costs a create, and how fast events go out.

Four figures, each server pinned as in ``python -m bench.speed``, the receiver
(``bench/apps/webhook_receiver.py``, a bare aiohttp app) on wrk's core:
- creates on a file whose webhook triggers were dropped (the cost before webhooks existed);
- creates with the triggers and no subscription (one indexed lookup per create);
- creates with one subscriber (the same process delivers meanwhile), and how long after the
  load the last of them was delivered;
- delivered events/s: a backlog of queued deliveries written straight into the file, sent by
  a freshly started server, timed until the receiver has every one.

    .venv/bin/python -m bench.speed.webhooks_phase [--seconds 5] [--backlog 20000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.lib.loads import creates, fresh_sqlite, sqlite_path
from bench.lib.measure import Measurement, Options, measure, warm_up
from bench.lib.place import HERE
from bench.lib.seed import Layout
from bench.lib.services import start_service
from harness.servers import Server, launch

IDS = 5 * 10**12  # create ids of their own (bench.speed's phases use 1e12 to 3e12)
PRIVATE_OK = "true"  # PLANTSTORE_WEBHOOK_ALLOW_PRIVATE: the receiver is on loopback
DEFAULT_BACKLOG = 20_000


@dataclass
class WebhookFigures:
    rows: list[Measurement]
    delivered_per_second: float | None
    backlog: int
    drain_after_load: float | None  # seconds from the end of the create load to the last one

    def summary(self) -> list[str]:
        by_key = {row.key: row.result.rate for row in self.rows if row.result}
        lines = []
        none, one = by_key.get("wh_create_none"), by_key.get("wh_create_one")
        dropped = by_key.get("wh_create_no_triggers")
        if none and dropped:
            lines.append(f"creates, no subscriber / triggers dropped: {none / dropped:.2f}")
        if none and one:
            verdict = "met" if one / none >= 0.8 else "NOT MET"
            lines.append(
                f"creates, one subscriber / no subscriber: {one / none:.2f} (>= 0.80: {verdict})"
            )
        if self.drain_after_load is not None:
            lines.append(
                f"last event of the create run delivered {self.drain_after_load:.1f}s after it"
            )
        if self.delivered_per_second is not None:
            verdict = "met" if self.delivered_per_second >= 2000 else "NOT MET"
            lines.append(
                f"delivered: {self.delivered_per_second:,.0f} events/s "
                f"({self.backlog:,} queued; >= 2,000/s: {verdict})"
            )
        return lines


def webhook_phase(options: Options, backlog: int = DEFAULT_BACKLOG) -> WebhookFigures:
    layout = Layout.for_run(0, 0, options.seconds).small
    rows = [_creates_without_triggers(options, layout), _creates(options, layout, "none")]
    with _receiver(options) as hook_url:
        url, token = fresh_sqlite(options, "webhooks-one", layout)
        server = start_service(
            options, "webhooks-one", url, token, PLANTSTORE_WEBHOOK_ALLOW_PRIVATE=PRIVATE_OK
        )
        try:
            _subscribe(server, hook_url)
            warm_up(server, options)
            rows.append(
                measure(
                    server,
                    creates(IDS + 2 * 10**9),
                    options,
                    "wh_create_one",
                    "create, one webhook subscriber",
                )
            )
            ended = time.monotonic()
            queued = _queued(url)
            _wait_for(hook_url, queued)
            drain = time.monotonic() - ended
        finally:
            server.stop()
        rate = _delivery_rate(options, url, token, hook_url, queued, backlog)
    return WebhookFigures(rows, rate, backlog, drain)


def _creates_without_triggers(options: Options, layout: Layout) -> Measurement:
    url, token = fresh_sqlite(options, "webhooks-dropped", layout)
    with contextlib.closing(sqlite3.connect(sqlite_path(url))) as conn:
        conn.execute("DROP TRIGGER plants_webhook_created")
        conn.execute("DROP TRIGGER plants_webhook_deleted")
        conn.commit()
    server = start_service(options, "webhooks-dropped", url, token)
    try:
        warm_up(server, options)
        return measure(
            server,
            creates(IDS),
            options,
            "wh_create_no_triggers",
            "create, webhook triggers dropped",
        )
    finally:
        server.stop()


def _creates(options: Options, layout: Layout, name: str) -> Measurement:
    url, token = fresh_sqlite(options, f"webhooks-{name}", layout)
    server = start_service(options, f"webhooks-{name}", url, token)
    try:
        warm_up(server, options)
        return measure(
            server, creates(IDS + 10**9), options, "wh_create_none", "create, no webhook subscriber"
        )
    finally:
        server.stop()


@contextlib.contextmanager
def _receiver(options: Options) -> Iterator[str]:
    command = [sys.executable, str(HERE / "apps" / "webhook_receiver.py")]
    log = options.workdir / "webhook-receiver.log"
    process, base_url = launch(command, log, options.wrk_cpus, {}, ready_path="/count")
    try:
        yield f"{base_url}/hook"
    finally:
        Server(process, base_url, "").stop()


def _subscribe(server: Server, hook_url: str) -> None:
    request = urllib.request.Request(
        f"{server.base_url}/webhooks",
        data=json.dumps({"url": hook_url}).encode(),
        headers={"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=10).read()


def _count(hook_url: str) -> int:
    with urllib.request.urlopen(hook_url.replace("/hook", "/count"), timeout=10) as answer:
        return int(json.load(answer)["unique"])


def _wait_for(hook_url: str, count: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while _count(hook_url) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {_count(hook_url)} of {count} webhooks arrived")
        time.sleep(0.05)


def _queued(url: str) -> int:
    with contextlib.closing(sqlite3.connect(sqlite_path(url))) as conn:
        return int(conn.execute("SELECT count(*) FROM webhook_deliveries").fetchone()[0])


def _delivery_rate(
    options: Options, url: str, token: str, hook_url: str, already: int, backlog: int
) -> float:
    """Queue ``backlog`` deliveries behind the server's back, start it, time the drain."""
    with contextlib.closing(sqlite3.connect(sqlite_path(url))) as conn:
        (subscription_id, user_id) = conn.execute(
            "SELECT id, user_id FROM webhook_subscriptions"
        ).fetchone()
        now = time.time()
        conn.executemany(
            "INSERT INTO webhook_deliveries (subscription_id, user_id, msg_id, event_type, "
            "occurred_at, plant_id, name, tag, state, attempts, next_attempt_at) "
            "VALUES (?, ?, ?, 'plant.created', ?, ?, 'backlog', NULL, 0, 0, ?)",
            ((subscription_id, user_id, f"msg_backlog_{n}", now, n, now) for n in range(backlog)),
        )
        conn.commit()
    print(f"  webhook backlog of {backlog:,} ...", flush=True)
    server = start_service(
        options, "webhooks-drain", url, token, PLANTSTORE_WEBHOOK_ALLOW_PRIVATE=PRIVATE_OK
    )
    try:
        started = time.monotonic()
        _wait_for(hook_url, already + backlog)
        return backlog / (time.monotonic() - started)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.speed.webhooks_phase", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--backlog", type=int, default=DEFAULT_BACKLOG)
    parser.add_argument("--server-cpus", default="0")
    parser.add_argument("--wrk-cpus", default="1")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=HERE) as workdir:
        options = Options(
            args.seconds, args.connections, args.server_cpus, args.wrk_cpus, Path(workdir)
        )
        figures = webhook_phase(options, args.backlog)
    for row in figures.rows:
        rate = row.result.rate if row.result else 0
        cpu = f"{row.cpu_us_per_request:.0f}" if row.cpu_us_per_request else "-"
        print(f"{row.scenario:<40} {rate:>10,.0f} req/s  {cpu:>6} us CPU/request")
    for line in figures.summary():
        print(line)


if __name__ == "__main__":
    main()
