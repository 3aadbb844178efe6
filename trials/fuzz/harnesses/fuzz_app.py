"""Fuzz the whole service in-process: the ASGI app on a real SQLite file, one request a run.

The input is an HTTP/1.1 request as text, so a reproducer reads as one::

    POST /plants?limit=1 HTTP/1.1          (the version is optional and ignored)
    authorization: Bearer $TOKEN           ($TOKEN: a valid token; $LEN: the body's length)
    content-type: application/json

    {"id": 1, "name": "x"}

The app is built once (``create_app`` with the lifespan entered, so migrations, the store
and its group-commit writer all run) and every input is one ASGI call on one event loop,
as granian would make it. Every answer must follow docs/api.md: never a 5xx (the exception
behind a 500 is re-raised, so the crash shows the service's own traceback); one response
start and a complete body; a documented status; for every error the Error body (``error``
equal to the status, a message that never echoes the token) as ``application/json``, with
``WWW-Authenticate`` on a 401 and ``Allow`` on a 405; a Plant for a create, a list of Plants
for a list, an empty 204 for a delete.

    .venv/bin/python -m trials.fuzz.harnesses.fuzz_app -runs=20000
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes

from .fuzzlib import ServiceFault, Violation, fuzz, instrumented_imports

with instrumented_imports("starlette"):
    from starlette.types import ASGIApp, Message

    from plantstore.app import create_app
    from plantstore.settings import load_settings

# Small enough that inputs within -max_len reach the 413 both ways (declared and sent).
MAX_BODY_BYTES = 2048
_DOCUMENTED = {200, 204, 400, 401, 403, 404, 405, 408, 409, 413, 415, 429}
_STATIC_PREFIX = "/docs/assets/"
_MAX_CHUNK = 1024
_DEADLINE_SECONDS = 10.0


class _Faults(logging.Handler):
    """Keeps the exception the service logs with its 500."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.last: BaseException | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.last = record.exc_info[1]


def _issue_token(user: str) -> str:
    output = subprocess.run(
        [sys.executable, "-m", "plantstore", "token", "create", user],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return output.rstrip("\n").splitlines()[-1]


@dataclass
class Service:
    app: ASGIApp
    loop: asyncio.AbstractEventLoop
    lifespan: asyncio.Task[None]  # held: the app's lifespan, running until the process ends
    token: str
    faults: _Faults


SERVICE: Service | None = None


def start() -> Service:
    """The app on a fresh SQLite file, with its lifespan entered.

    The file goes to a new directory in $PLANTSTORE_FUZZ_WORKDIR (``python -m trials.fuzz`` points it
    at a RAM disk and removes it), else in the system's temporary directory, where it stays:
    libFuzzer ends the process without running Python's exit handlers. Settings come from
    the environment, as in ``plantstore serve``; the rate limits are out of reach (this
    fuzzes parsing, and one address sends every request)."""
    global SERVICE
    directory = tempfile.mkdtemp(prefix="fuzz-app-", dir=os.environ.get("PLANTSTORE_FUZZ_WORKDIR"))
    os.environ.update(
        PLANTSTORE_DATABASE_URL=f"sqlite:///{Path(directory) / 'fuzz.db'}",
        PLANTSTORE_RATE_LIMIT="1000000/second",
        PLANTSTORE_AUTH_FAILURE_LIMIT="1000000/second",
        PLANTSTORE_LOG_LEVEL="error",
        PLANTSTORE_MAX_BODY_BYTES=str(MAX_BODY_BYTES),
    )
    token = _issue_token("fuzz")
    faults = _Faults()
    for name in ("plantstore", "granian", "starlette"):
        logging.getLogger(name).addHandler(faults)
        logging.getLogger(name).propagate = False  # the crash report carries the traceback
    app = create_app(load_settings())
    loop = asyncio.new_event_loop()
    lifespan = loop.run_until_complete(_started(app))
    SERVICE = Service(app, loop, lifespan, token, faults)
    return SERVICE


async def _started(app: ASGIApp) -> asyncio.Task[None]:
    """Run the app's ASGI lifespan up to 'startup complete', as a server would."""
    messages: asyncio.Queue[Message] = asyncio.Queue()
    await messages.put({"type": "lifespan.startup"})
    started = asyncio.get_running_loop().create_future()

    async def send(message: Message) -> None:
        if not started.done():
            started.set_result(message["type"])

    async def run() -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
        await app(scope, messages.get, send)

    task = asyncio.create_task(run())
    outcome = await started
    if outcome != "lifespan.startup.complete":
        raise RuntimeError(f"the app did not start: {outcome}")
    return task


def service() -> Service:
    return SERVICE or start()


def parse_request(data: bytes) -> tuple[str, bytes, list[tuple[bytes, bytes]], bytes]:
    """Method, raw target, headers (names lowercased) and body of a request as text."""
    head, _, body = data.partition(b"\n\n")
    request_line, *header_lines = head.split(b"\n")
    method, _, target = request_line.partition(b" ")
    target = target.rsplit(b" HTTP/", 1)[0]
    headers = []
    for line in header_lines:
        name, _, value = line.partition(b":")
        value = value.strip(b" \t").replace(b"$TOKEN", service().token.encode())
        headers.append((name.strip().lower(), value.replace(b"$LEN", b"%d" % len(body))))
    return method.decode("latin-1"), target, headers, body


def scope_for(method: str, target: bytes, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    raw_path, _, query = target.partition(b"?")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "scheme": "http",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 40000),
        "method": method,
        "root_path": "",
        "path": unquote_to_bytes(raw_path).decode("utf-8", "replace"),
        "raw_path": raw_path,
        "query_string": query,
        "headers": headers,
        "state": {},
    }


async def call(scope: dict[str, Any], body: bytes) -> tuple[list[Message], BaseException | None]:
    chunks = [body[i : i + _MAX_CHUNK] for i in range(0, len(body), _MAX_CHUNK)] or [b""]
    messages: list[Message] = []

    async def receive() -> Message:
        if chunks:
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}
        await asyncio.Event().wait()  # the client waits for its answer: no disconnect
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        messages.append(message)

    try:
        async with asyncio.timeout(_DEADLINE_SECONDS):
            await service().app(scope, receive, send)
    except TimeoutError:
        raise AssertionError(f"no answer within {_DEADLINE_SECONDS} s: {messages}") from None
    except Exception as exc:  # Starlette re-raises what it answered with a 500
        return messages, exc
    return messages, None


def check_response(
    scope: dict[str, Any], messages: list[Message], raised: BaseException | None
) -> None:
    starts = [m for m in messages if m["type"] == "http.response.start"]
    status = starts[0]["status"] if starts else None
    if raised is not None or status is None or status >= 500:
        cause = raised or service().faults.last
        target = scope["raw_path"][:100] + (b"..." if len(scope["raw_path"]) > 100 else b"")
        fault = ServiceFault(f"answered {status} to {scope['method']} {target!r}")
        raise fault from cause
    assert len(starts) == 1, messages
    assert messages[0] is starts[0], messages
    bodies = [m for m in messages if m["type"] == "http.response.body"]
    assert bodies, messages
    assert not bodies[-1].get("more_body", False), messages
    assert all(m.get("more_body", False) for m in bodies[:-1]), messages
    body = b"".join(m.get("body", b"") for m in bodies)
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in starts[0]["headers"]}
    path, method = scope["path"], scope["method"]
    if (path == "/docs" or path.startswith(_STATIC_PREFIX)) and status in (200, 206, 304):
        return  # HTML and assets: files, which also answer conditional and range requests
    assert status in _DOCUMENTED, f"undocumented status {status} for {method} {path!r}"
    if "content-length" in headers and method != "HEAD":
        assert int(headers["content-length"]) == len(body), (headers, len(body))
    if status >= 400:
        assert headers.get("content-type", "").split(";")[0] == "application/json", headers
        error = json.loads(body)
        assert isinstance(error, dict), body
        assert set(error) == {"error", "message"}, body
        assert type(error["error"]) is int, body
        assert error["error"] == status, body
        assert isinstance(error["message"], str), body
        assert error["message"].strip(), body
        assert service().token not in error["message"], "the message echoes the token"
        if status == 401:
            assert headers.get("www-authenticate", "").startswith('Bearer realm="plantstore"')
        if status == 405:
            assert headers.get("allow"), headers
        return
    assert headers.get("content-type", "").split(";")[0] in ("application/json", ""), headers
    if path == "/plants" and method == "POST":
        assert status == 200, status
        assert _is_plant(json.loads(body)), body
    elif path == "/plants" and method == "GET":
        plants = json.loads(body)
        assert status == 200, status
        assert isinstance(plants, list), body
        assert all(_is_plant(plant) for plant in plants), body
    elif method == "DELETE":
        assert status == 204, status
        assert body == b"", body


def route_of(path: str) -> str:
    """The route a path names, for telling findings apart."""
    if path.startswith("/plants/"):
        return "/plants/{id}"
    if path.startswith(_STATIC_PREFIX):
        return _STATIC_PREFIX + "*"
    known = ("/plants", "/healthz", "/readyz", "/openapi.json", "/docs")
    return path if path in known else "(unknown path)"


def _is_plant(value: object) -> bool:
    if not isinstance(value, dict) or not {"name"} <= set(value) <= {"name", "tag"}:
        return False
    return all(isinstance(text, str) and text for text in value.values())


def test_one_input(data: bytes) -> None:
    method, target, headers, body = parse_request(data)
    scope = scope_for(method, target, headers)
    running = service()
    running.faults.last = None
    messages, raised = running.loop.run_until_complete(call(scope, body))
    try:
        check_response(scope, messages, raised)
    except ServiceFault:
        raise
    except (AssertionError, ValueError) as exc:  # ValueError: a body that is not JSON
        starts = [m for m in messages if m["type"] == "http.response.start"]
        status = starts[0]["status"] if starts else "no answer"
        verb = method if method in ("GET", "HEAD", "POST", "DELETE") else "other method"
        line = traceback.extract_tb(exc.__traceback__)[-1].lineno
        key = f"{status} {verb} {route_of(scope['path'])}, check on line {line}"
        raise Violation(f"{key}: {exc}", key) from exc


_AUTH = b"authorization: Bearer $TOKEN\n"
_JSON = b"content-type: application/json\n"
SEEDS = [
    b"POST /plants\n" + _AUTH + _JSON + b'\n{"id": 1, "name": "Monstera", "tag": "tropical"}',
    b"POST /plants\n" + _AUTH + _JSON + b"content-length: $LEN\n\n" + b'{"id": 2, "name": "x"}',
    b"POST /plants\n" + _AUTH + b"content-type: text/plain\n\n{}",
    b"POST /plants\n" + _AUTH + _JSON + b"content-length: 2049\n\n{}",
    b"POST /plants\n" + _AUTH + _JSON + b'\n{"id": 1, "name": "a", "name": "b"}',
    b"POST /plants\n" + _AUTH + _JSON + b"transfer-encoding: chunked\n\n" + b" " * 2049,
    b"GET /plants?limit=1\n" + _AUTH,
    b"GET /plants?limit=1&cursor=AAAAAAAAAAG6fDAgHNlRcwoID3UxoFPu\n" + _AUTH,
    b"GET /plants?limit=%31&limit=2\n" + _AUTH,
    b"GET /plants\nauthorization: Basic eDp5\n",
    b"GET /plants\nauthorization: Bearer pst_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n",
    b"HEAD /plants\n" + _AUTH,
    b"DELETE /plants/1\n" + _AUTH,
    b"DELETE /plants/-9223372036854775809\n" + _AUTH,
    b"DELETE /plants/%31\n" + _AUTH + b"content-length: 3\n\nabc",
    b"PUT /plants/1\n" + _AUTH,
    b"GET /healthz\n",
    b"GET /readyz\n",
    b"GET /openapi.json\n",
    b"GET /docs\n",
    b"GET /docs/assets/swagger-ui.css\nif-none-match: x\nrange: bytes=0-10\n",
    b"GET /docs/assets/..%2f..%2fapp.py\n",
    b"OPTIONS /plants HTTP/1.1\n",
    # Python's int() refuses strings over 4,300 digits (CVE-2020-10735): numbers at the limit.
    b"GET /plants?limit=" + b"0" * 4299 + b"1\n" + _AUTH,
    b"DELETE /plants/" + b"0" * 4299 + b"1\n" + _AUTH,
    b"POST /plants\n" + _AUTH + _JSON + b"content-length: " + b"0" * 4299 + b"9\n\n{}",
    b"GET /nowhere\n",
]

if __name__ == "__main__":
    fuzz(test_one_input, SEEDS, max_len=8192, setup=start)
