"""A real webhook receiver on a loopback port, in a thread: records every POST it gets and
answers what the test scripts (a status per attempt, a Retry-After, or a hang)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float
    path: str


@dataclass
class Receiver:
    url: str
    received: list[Received] = field(default_factory=list)
    # Called with the number of requests before this one: (status, extra headers, seconds to hang).
    answer: Callable[[int], tuple[int, dict[str, str], float]] = lambda _: (200, {}, 0.0)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                if len(self.received) >= count:
                    return list(self.received)
            assert time.monotonic() < deadline, f"got {len(self.received)} of {count} webhooks"
            time.sleep(0.02)

    def snapshot(self) -> list[Received]:
        with self.lock:
            return list(self.received)


@contextlib.contextmanager
def receiver(
    answer: Callable[[int], tuple[int, dict[str, str], float]] | None = None,
) -> Iterator[Receiver]:
    """Serve on 127.0.0.1 until the block ends."""
    state = Receiver(url="")
    if answer is not None:
        state.answer = answer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            with state.lock:
                before = len(state.received)
                state.received.append(
                    Received(
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        time.time(),
                        self.path,
                    )
                )
            status, headers, hang = state.answer(before)
            if hang:
                time.sleep(hang)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a sender killed mid-request (the torture) resets its connection: expected

    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
