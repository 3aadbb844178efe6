"""Drive the ASGI app in process, 32 requests at a time, for instruction counts.

callgrind counts instructions, which repeat to within about 1 % on this shared VM where
timings do not. Run it twice with different counts; the difference over the difference in
requests is the cost of one request, start-up and import cancelled out:

    for n in 992 2976; do valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \\
        .venv/bin/python -m bench.apps.callgrind_app list $n; done   # "Collected" / 1,984

The app is the ASGI stack ``plantstore serve`` builds, without the RSGI bridge in front, as
shipped (access log to a file, metrics in multiprocess mode, the rate limiter on at a rate
never reached), on a fresh SQLite file whose user holds 20 plants; ``list`` is ``GET /plants?limit=10``, ``create`` a fresh durable create.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

Message = MutableMapping[str, Any]


def prepare(workdir: Path) -> None:
    """The environment ``plantstore serve`` would give its workers."""
    os.environ.update(
        PROMETHEUS_MULTIPROC_DIR=str(workdir),
        PLANTSTORE_DATABASE_URL=f"sqlite:///{workdir / 'plantstore.db'}",
        PLANTSTORE_RATE_LIMIT="100000000/second",
        PLANTSTORE_MAX_PLANTS_PER_USER=str(10**12),
    )
    sys.stdout = (workdir / "access.log").open("w")  # where the access lines go


async def seed() -> str:
    """A token whose user holds 20 plants."""
    from plantstore.auth.backends import token_store_for
    from plantstore.auth.tokens import hash_token, new_token
    from plantstore.db import open_database
    from plantstore.db.migrate import upgrade
    from plantstore.plants.backends import plant_store_for
    from plantstore.plants.store import PlantRecord
    from plantstore.settings import load_settings

    settings = load_settings()
    await asyncio.to_thread(upgrade, settings.database_url)
    database = open_database(settings)
    await database.open()
    token = new_token()
    user = await token_store_for(database).create_token("bench", hash_token(token), None)
    plants = plant_store_for(database)
    for plant_id in range(20):
        await plants.create_plant(user.user_id, PlantRecord(plant_id, f"plant {plant_id}", "t"))
    await database.close()
    return token


def scope(method: str, query: bytes, headers: list[tuple[bytes, bytes]]) -> Message:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": "/plants",
        "raw_path": b"/plants",
        "query_string": query,
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }


async def main(mode: str, count: int, *, machine_table: bool) -> None:
    from plantstore.app import create_app
    from plantstore.http.machine_budget import MachineTable
    from plantstore.ops.logs import configure_logging
    from plantstore.processes.inheritance import Inheritance
    from plantstore.settings import load_settings

    token = await seed()
    settings = load_settings()
    configure_logging(settings.log_level)
    shared = Inheritance(settings, MachineTable() if machine_table else None)
    app = create_app(settings, inherited=shared, freeze_after_start=True)
    startup: asyncio.Queue[Message] = asyncio.Queue()
    await startup.put({"type": "lifespan.startup"})
    started = asyncio.Event()

    async def lifespan_send(message: Message) -> None:
        started.set()

    lifespan = asyncio.create_task(app({"type": "lifespan"}, startup.get, lifespan_send))
    await started.wait()
    auth = (b"authorization", f"Bearer {token}".encode())
    ids = iter(range(10**9, 10**10))

    async def one() -> int:
        if mode == "list":
            request, body = scope("GET", b"limit=10", [(b"host", b"x"), auth]), b""
        else:
            body = json.dumps({"id": next(ids), "name": "n", "tag": "t"}).encode()
            length = (b"content-length", str(len(body)).encode())
            request = scope(
                "POST", b"", [(b"host", b"x"), auth, (b"content-type", b"application/json"), length]
            )
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        status = 0

        async def receive() -> Message:
            if messages:
                return messages.pop()
            await asyncio.Event().wait()  # the client waits for its answer
            raise AssertionError("unreachable")

        async def send(message: Message) -> None:
            nonlocal status
            status = message.get("status", status)

        await app(request, receive, send)
        return status

    for _ in range(200):
        await one()  # warm
    began = time.perf_counter()
    for _ in range(count // 32):
        statuses = await asyncio.gather(*(one() for _ in range(32)))
        assert set(statuses) == {200}, statuses
    elapsed = time.perf_counter() - began
    print(f"{mode}: {elapsed / count * 1e6:.1f} µs a request", file=sys.stderr)
    await startup.put({"type": "lifespan.shutdown"})
    await lifespan


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="python -m bench.apps.callgrind_app", description=__doc__.splitlines()[0]
    )
    parser.add_argument("mode", choices=["list", "create"])
    parser.add_argument("count", type=int, help="requests, a multiple of 32")
    parser.add_argument(
        "--machine-table",
        action="store_true",
        help="the rate budgets in the table serve shares among several workers",
    )
    args = parser.parse_args()
    prepare(Path(tempfile.mkdtemp(prefix="plantstore-callgrind-")))
    asyncio.run(main(args.mode, args.count, machine_table=args.machine_table))
