"""A fast webhook receiver for bench/speed/webhooks_phase.py: answers every POST 204 at once and
counts the POSTs and distinct webhook-ids; ``GET /count`` tells both.

    .venv/bin/python bench/apps/webhook_receiver.py --port 9100
"""

from __future__ import annotations

import argparse
import json

from aiohttp import web


def create_app() -> web.Application:
    seen: set[str] = set()
    totals = {"received": 0}

    async def receive(request: web.Request) -> web.Response:
        await request.read()
        totals["received"] += 1
        seen.add(request.headers.get("webhook-id", ""))
        return web.Response(status=204)

    async def count(request: web.Request) -> web.Response:
        body = {"received": totals["received"], "unique": len(seen)}
        return web.Response(text=json.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_post("/hook", receive)
    app.router.add_get("/count", count)
    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="python -m bench.apps.webhook_receiver", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--port", type=int, required=True)
    web.run_app(
        create_app(), host="127.0.0.1", port=parser.parse_args().port, print=None, access_log=None
    )
